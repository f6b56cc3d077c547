#include "engine/checkpoint_manifest.h"

#include "engine/errors.h"
#include "engine/json_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zero3 {
namespace {

void throw_checkpoint_error(const std::string& message) { throw CheckpointError(message); }

constexpr int kMaxWorld = 1 << 16;
constexpr int64_t kMaxElements = int64_t{1} << 48;

// A skipped step is a step boundary, so there are at most `micro_steps` of them.
ManifestPrecision parse_precision(const JsonAt& at, int64_t micro_steps) {
  at.object({"loss_scale", "scaler_iter", "last_overflow_iter", "hysteresis_left", "skipped_steps"});
  ManifestPrecision p;
  p.loss_scale = at["loss_scale"].number();
  if (!std::isfinite(p.loss_scale) || p.loss_scale <= 0) at["loss_scale"].fail("a loss scale must be finite and positive");
  p.scaler_iter = at["scaler_iter"].integer(0, std::numeric_limits<int64_t>::max());
  p.last_overflow_iter = at["last_overflow_iter"].integer(-1, p.scaler_iter);
  p.hysteresis_left = at["hysteresis_left"].integer(0, std::numeric_limits<int>::max());
  p.skipped_steps = at["skipped_steps"].integer(0, micro_steps);
  return p;
}

}  // namespace

std::string rank_file_name(int rank, int world_size) {
  return "zero3_rank" + std::to_string(rank) + "_of" + std::to_string(world_size) + ".pt";
}

int64_t ManifestParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string CheckpointManifest::to_json() const {
  nlohmann::json params_json = nlohmann::json::array();
  for (const auto& p : params) {
    nlohmann::json shards_json = nlohmann::json::array();
    for (const auto& s : p.shards) shards_json.push_back({{"rank", s.rank}, {"begin", s.begin}, {"end", s.end}});
    params_json.push_back({{"path", p.path},
                           {"shape", p.shape},
                           {"dtype", p.dtype},
                           {"trainable", p.trainable},
                           {"kind", p.kind},
                           {"owner", p.owner},
                           {"shards", shards_json}});
  }
  nlohmann::json files_json = nlohmann::json::array();
  for (const auto& f : files) files_json.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  nlohmann::json doc{{"format", format},
                           {"world_size", world_size},
                           {"micro_steps", micro_steps},
                           {"optimizer", {{"kind", optimizer}, {"groups", optimizer_groups}}},
                           {"params", params_json},
                           {"files", files_json},
                           {"client_state", client_state}};
  if (has_precision)
    doc["precision"] = {{"loss_scale", precision.loss_scale},
                        {"scaler_iter", precision.scaler_iter},
                        {"last_overflow_iter", precision.last_overflow_iter},
                        {"hysteresis_left", precision.hysteresis_left},
                        {"skipped_steps", precision.skipped_steps}};
  return doc.dump(1) + "\n";
}

CheckpointManifest CheckpointManifest::parse(std::string_view text, const std::string& where) {
  try {
    const nlohmann::json doc = parse_json_strict(text, throw_checkpoint_error);
    const JsonAt root(doc, "$", throw_checkpoint_error);
    if (doc.is_object() && doc.contains("format") && doc["format"].is_string() &&
        doc["format"].get<std::string>() != kCheckpointFormat)
      throw CheckpointError("format " + json_quoted(doc["format"].get<std::string>()) + ", expected " +
                            json_quoted(kCheckpointFormat) + " (written by another version of zerocheck)");
    root.object({"format", "world_size", "micro_steps", "optimizer", "params", "files"}, {"client_state", "precision"});
    CheckpointManifest m;
    m.format = root["format"].one_of({kCheckpointFormat});
    m.world_size = static_cast<int>(root["world_size"].integer(1, kMaxWorld));
    m.micro_steps = root["micro_steps"].integer(0, std::numeric_limits<int64_t>::max());
    const JsonAt optimizer = root["optimizer"];
    optimizer.object({"kind", "groups"});
    m.optimizer = optimizer["kind"].one_of({"adam", "adamw", "sgd"});
    optimizer["groups"].array(0, 1 << 20);
    m.optimizer_groups = optimizer["groups"].value();
    const JsonAt params = root["params"];
    const size_t n_params = params.array(0, 1 << 24);
    for (size_t i = 0; i < n_params; ++i) {
      const JsonAt p = params[i];
      p.object({"path", "shape", "dtype", "trainable", "kind", "owner", "shards"});
      ManifestParam param;
      param.path = p["path"].string();
      const size_t dims = p["shape"].array(0, 16);
      int64_t numel = 1;
      for (size_t d = 0; d < dims; ++d) {
        const int64_t dim = p["shape"][d].integer(0, kMaxElements);
        param.shape.push_back(dim);
        // Saturates instead of overflowing: anything past 2^48 is refused below.
        numel = dim == 0 || numel == 0 ? 0 : numel > kMaxElements / dim ? kMaxElements + 1 : numel * dim;
      }
      if (numel > kMaxElements) p["shape"].fail("more than 2^48 elements");
      param.dtype = p["dtype"].one_of({"float32"});
      param.trainable = p["trainable"].boolean();
      param.kind = p["kind"].one_of({"partitioned", "persistent", "placed"});
      param.owner = static_cast<int>(p["owner"].integer(-1, m.world_size - 1));
      if ((param.kind == "placed") != (param.owner >= 0))
        p["owner"].fail(param.kind == "placed" ? "a placed parameter needs its owner rank" : "only a placed parameter has an owner");
      const JsonAt shards = p["shards"];
      const size_t n_shards = shards.array(1, m.world_size);
      int64_t covered = 0;
      int last_rank = -1;
      for (size_t s = 0; s < n_shards; ++s) {
        const JsonAt shard = shards[s];
        shard.object({"rank", "begin", "end"});
        ManifestShard cut;
        cut.rank = static_cast<int>(shard["rank"].integer(last_rank + 1, m.world_size - 1));
        cut.begin = shard["begin"].integer(covered, covered);  // no gap, no overlap
        cut.end = shard["end"].integer(cut.begin, numel);
        covered = cut.end;
        last_rank = cut.rank;
        param.shards.push_back(cut);
      }
      if (covered != numel)
        shards.fail("the shards cover elements [0, " + std::to_string(covered) + ") of " + std::to_string(numel));
      m.params.push_back(std::move(param));
    }
    const JsonAt files = root["files"];
    const size_t n_files = files.array(m.world_size, m.world_size);
    for (size_t i = 0; i < n_files; ++i) {
      const JsonAt f = files[i];
      f.object({"name", "bytes", "crc32c"});
      ManifestFile file;
      file.name = f["name"].one_of({rank_file_name(static_cast<int>(i), m.world_size)});
      file.bytes = static_cast<uint64_t>(f["bytes"].integer(0, std::numeric_limits<int64_t>::max()));
      file.crc32c = static_cast<uint32_t>(f["crc32c"].integer(0, 0xFFFFFFFFll));
      m.files.push_back(file);
    }
    if (root.has("precision")) {
      m.precision = parse_precision(root["precision"], m.micro_steps);
      m.has_precision = true;
    }
    if (root.has("client_state")) {
      root["client_state"].map();
      m.client_state = root["client_state"].value();
    }
    return m;
  } catch (const CheckpointError& e) {
    throw CheckpointError(where + ": " + e.what());
  }
}

}  // namespace zero3
