"""The scenario language: schema tables (schema.json), strict JSON, config, placement, collisions.

Torch-free: nothing here imports torch, directly or not (the command line and shrink use it
before torch loads)."""
