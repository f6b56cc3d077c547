// CheckpointManifest: what a checkpoint directory holds, written last.
//
// A checkpoint is complete exactly when its manifest exists: the manifest names every rank
// file with its size and CRC-32C, and describes the model it was taken from (every parameter's
// path, shape, dtype and where its elements lie in which rank's file) and the optimizer (kind and
// per-group hyper-parameters). A loader checks everything against it before it changes
// anything, and can reshard: the shard ranges say where every element of every parameter is.
//
// The manifest is JSON (manifest.json); rank files are pickles (see checkpoint_reader.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

inline constexpr const char* kCheckpointFormat = "zero3-checkpoint/3";
inline constexpr const char* kManifestName = "manifest.json";

// Returns "zero3_rank<rank>_of<world>.pt".
std::string rank_file_name(int rank, int world_size);

// Elements [begin, end) of a flattened parameter, stored in `rank`'s file.
struct ManifestShard {
  int rank = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

struct ManifestParam {
  std::string path;  // where the parameter first appears in the model ("layers.0.weight")
  std::vector<int64_t> shape;
  std::string dtype;      // "float32"
  bool trainable = true;  // held by the optimizer
  std::string kind;       // "partitioned", "persistent" or "placed"
  int owner = -1;         // placed: the rank that held it when saved
  std::vector<ManifestShard> shards;  // in rank order, together exactly [0, numel)
  int64_t numel() const;
};

struct ManifestFile {
  std::string name;  // inside the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// The mixed-precision step's state (precision.h): the loss scaler's fields and the steps skipped
// for an overflow, as DeepSpeed's checkpoint keeps its loss scaler and `skipped_steps`. Written by
// every save; a manifest without it (written before it existed) loads the scaler's initial state.
struct ManifestPrecision {
  double loss_scale = 1.0;          // finite and > 0
  int64_t scaler_iter = 0;          // the scaler's update count
  int64_t last_overflow_iter = -1;  // -1: none yet; else <= scaler_iter
  int64_t hysteresis_left = 1;
  int64_t skipped_steps = 0;        // optimizer steps skipped for an overflow
};

struct CheckpointManifest {
  std::string format = kCheckpointFormat;
  int world_size = 1;
  int64_t micro_steps = 0;
  std::string optimizer;                  // "adam", "adamw" or "sgd"
  nlohmann::json optimizer_groups = nlohmann::json::array();  // hyper-parameters, per group (rank 0's view)
  std::vector<ManifestParam> params;      // in the engine's order
  std::vector<ManifestFile> files;        // one per rank, in rank order
  // What the caller of save_checkpoint stored with the checkpoint (DeepSpeed's client_state):
  // a JSON object the engine keeps but never reads.
  nlohmann::json client_state = nlohmann::json::object();
  bool has_precision = false;  // false: a manifest read without it
  ManifestPrecision precision;

  std::string to_json() const;
  // Returns the manifest in `text`, read from `where` (for messages). Throws CheckpointError
  // "<where>: <JSON path>: <what>" for anything malformed, out of range or inconsistent (shard
  // ranges that leave a gap or overlap, a rank outside the world, a file list that is not one
  // per rank), and "<where>: format X, expected zero3-checkpoint/3" for other formats.
  static CheckpointManifest parse(std::string_view text, const std::string& where);
};

}  // namespace zero3
