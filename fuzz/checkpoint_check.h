// The checkpoint target's check: bytes -> a checkpoint directory -> load into a fixed small
// model ("odd", Adam, one rank, one step trained).
//
// The bytes are a bundle of files (fuzz/pack_checkpoint.py writes real checkpoints so):
//   flags (1 byte), then per file: name length (1 byte), name, size (4 bytes, little endian), data.
// Names other than manifest.json and zero3_rank<r>_of<n>.pt are skipped. Flag bit 0 refreshes
// the manifest's sizes and checksums from the files first (when the manifest parses), so the
// fuzzer reaches the unpickler and the structure checks behind the checksums.
//
// Holds when the load succeeds, or is refused with CheckpointError and leaves the engine's
// shards, optimizer state and options exactly as they were; anything else is a finding.
#pragma once

#include "fuzz/finding.h"

#include <string_view>

namespace zerocheck::fuzz {

// Returns whether the checkpoint loaded, and a finding when the loader broke its contract.
ParseCheck check_checkpoint(std::string_view bytes);

}  // namespace zerocheck::fuzz
