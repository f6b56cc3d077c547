// Gives the shared precompiled header (pch.h) a target to be built from.
