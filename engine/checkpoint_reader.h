// Reading a checkpoint directory into memory, verifying every byte before anyone uses it.
//
// A rank file is one pickle (torch::pickle_save; Python's torch.load reads it too):
//   (format, world size, rank, micro-steps, [(path, begin, elements, state, options), ...])
// one entry per shard the manifest lists for that rank, in manifest order: `elements` are the
// parameter's flattened elements [begin, begin + n) (no padding), `state` its optimizer state
// tuple cut the same way (optimizer_rebuild.h) or None, `options` its group's options or None.
//
// Thread-safety: free functions over their arguments.
#pragma once

#include "engine/checkpoint_manifest.h"

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace zero3 {

// One shard of one parameter as read from a rank file.
struct CheckpointPiece {
  int rank = 0;
  int64_t begin = 0;
  at::Tensor elements;  // 1-D float32, the real elements [begin, begin + numel)
  c10::IValue state;    // optimizer state tuple (tensors 1-D, cut like `elements`) or None
  c10::IValue options;  // the group's options tuple or None
};

struct LoadedCheckpoint {
  std::string dir;
  CheckpointManifest manifest;
  std::vector<std::vector<CheckpointPiece>> pieces;  // per manifest parameter, in begin order

  // Returns parameter i's elements joined, shaped as the parameter.
  at::Tensor full_parameter(size_t i) const;
  // Returns parameter i's optimizer state joined (each tensor field flattened to numel
  // elements), or None when it has none. Throws CheckpointError when its shards disagree.
  c10::IValue full_state(size_t i) const;
};

// Returns the path of the manifest of the checkpoint in `dir`.
std::string manifest_path(const std::string& dir);

// Reads the checkpoint in `dir` and verifies it: the manifest is present and well-formed, every
// file it names exists with its size and CRC-32C, each rank file reads, names its own rank and
// world, and holds exactly the shards the manifest lists for it with matching element counts.
// Throws CheckpointError naming the file and what is wrong.
LoadedCheckpoint read_checkpoint(const std::string& dir);

}  // namespace zero3
