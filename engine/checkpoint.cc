// Sharded checkpoints that any world size can load: save and load for zero3::Engine.
//
// Each rank pickles the real elements of its shards (no padding) with their optimizer state cut
// the same way (checkpoint_reader.h says the layout); rank 0 then writes the manifest with every
// file's size and CRC-32C. All of it goes into a sibling staging directory that is exchanged
// with the target at the end, so a checkpoint directory always holds a complete checkpoint.
// Loading reads and verifies every file, joins each parameter's elements and state, and cuts
// them again for this world: that is all resharding needs, because a shard is a pure function
// of (parameter, world size, rank) and Adam/SGD state is per element.
#include "engine/checkpoint_manifest.h"
#include "engine/checkpoint_reader.h"
#include "engine/checkpoint_tag.h"
#include "engine/crc32c.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/internal/durable_dir.h"
#include "engine/internal/engine_state.h"
#include "engine/internal/flat_copy.h"
#include "engine/optimizer_rebuild.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

namespace zero3 {
namespace {

namespace fs = std::filesystem;
using Elements = std::vector<c10::IValue>;

const char* kind_of(const ManagedParam& p) {
  return p.placed() ? "placed" : p.persistent ? "persistent" : "partitioned";
}

// The elements of `p` this rank writes, [begin, end) of the flattened parameter: its real
// shard elements when partitioned, all of them on the one rank that writes a whole parameter
// (the owner of a placed one, rank 0 for a persistent one), none elsewhere. Rank 0 always
// writes an entry for a partitioned parameter, so even an empty one has a shard.
std::optional<ManifestShard> written_by(const ManagedParam& p, int rank) {
  const int64_t numel = p.layout.numel;
  if (p.placed() || p.persistent) {
    const int writer = p.placed() ? p.owner : 0;
    return rank == writer ? std::optional<ManifestShard>(ManifestShard{rank, 0, numel}) : std::nullopt;
  }
  const int64_t real = p.layout.real_in_shard(rank);
  if (real == 0 && rank != 0) return std::nullopt;
  const int64_t begin = std::min(p.layout.begin(rank), numel);
  return ManifestShard{rank, begin, begin + real};
}

// Returns the first `n` elements of `t` flattened, as a CPU float32 copy.
at::Tensor real_elements(const at::Tensor& t, int64_t n) {
  const bool host_floats = t.device().is_cpu() && t.scalar_type() == at::kFloat;
  return flat_copy_then_zeros(host_floats ? t : t.detach().to(at::kCPU, at::kFloat), 0, n, n);
}

c10::IValue cut_state(const c10::IValue& state, int64_t n) {
  if (state.isNone()) return state;
  Elements fields = state.toTuple()->elements().vec();
  for (auto& f : fields)
    if (f.isTensor()) f = real_elements(f.toTensor(), n);
  return c10::ivalue::Tuple::create(std::move(fields));
}

std::vector<std::string> option_names(const std::string& kind) {
  if (kind == "sgd") return {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
  return {"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"};
}

nlohmann::json options_json(const c10::IValue& options, const std::string& kind) {
  nlohmann::json out = nlohmann::json::object();
  const auto names = option_names(kind);
  const auto fields = options.toTuple()->elements().vec();
  for (size_t i = 0; i < fields.size() && i < names.size(); ++i)
    out[names[i]] = fields[i].isBool() ? nlohmann::json(fields[i].toBool()) : nlohmann::json(fields[i].toDouble());
  return out;
}

std::string target_dir(const std::string& dir) {
  fs::path path(dir);
  if (!path.has_filename()) path = path.parent_path();  // "ckpt/" is "ckpt"
  return path.string();
}

// A directory may be replaced only when it is empty or holds a zerocheck checkpoint (of any
// format): anything else is the user's, and a save must not delete it.
void require_replaceable(const std::string& target) {
  std::error_code ec;
  if (!fs::exists(target, ec)) return;
  if (!fs::is_directory(target, ec)) throw CheckpointError(target + ": exists and is not a directory");
  for (const auto& entry : fs::directory_iterator(target)) {
    const std::string name = entry.path().filename().string();
    if (name != kManifestName && name.rfind("zero3_rank", 0) != 0)
      throw CheckpointError(target + ": holds '" + name + "', which is not part of a zerocheck checkpoint; "
                            "refusing to replace it");
  }
}

}  // namespace

void Engine::save_checkpoint(const std::string& dir, const std::string& client_state_json) {
  state_->require_live("save_checkpoint");
  const nlohmann::json client_state = nlohmann::json::parse(client_state_json, nullptr, /*allow_exceptions=*/false);
  if (!client_state.is_object()) throw UsageError("save_checkpoint: client state is not a JSON object: " + client_state_json);
  EngineState& s = *state_;
  const int rank = s.comm.rank(), world = s.comm.world_size();
  const std::string target = target_dir(dir);
  const std::string staging = target + ".zero3-staging";
  auto point = [&](const char* name) {
    if (s.options.save_point) s.options.save_point(name);
  };
  auto failure = [&](const std::string& what) {
    return CheckpointError("rank " + std::to_string(rank) + ": cannot save " + target + ": " + what);
  };
  if (rank == 0) {
    try {
      require_replaceable(target);
      fs::remove_all(staging);  // what a save killed before its exchange left behind
      const fs::path parent = fs::path(staging).parent_path();
      if (!parent.empty()) fs::create_directories(parent);
      fs::create_directory(staging);
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw failure(e.what());
    }
  }
  s.comm.barrier();
  point("staging");
  if (!fs::is_directory(staging)) throw failure("rank 0 did not prepare " + staging);

  // This rank's file.
  c10::impl::GenericList entries(c10::AnyType::get());
  for (const auto& p : s.params) {
    const auto shard = written_by(*p, rank);
    if (!shard) continue;
    const int64_t n = shard->end - shard->begin;
    c10::IValue state = param_state_value(*s.optimizer, p->master);
    s.faults.state_saved(*p, state);
    entries.push_back(c10::ivalue::Tuple::create(Elements{p->path, shard->begin, real_elements(p->master, n),
                                                          cut_state(state, n),
                                                          param_options_value(*s.optimizer, p->master)}));
  }
  const std::string file = (fs::path(staging) / rank_file_name(rank, world)).string();
  // The checksum and size of the bytes this rank meant to write: the manifest carries them, so
  // a file damaged on its way to the disk is caught at load, and rank 0 reads nobody's file.
  at::Tensor written = at::empty({2}, at::kLong);
  try {
    const std::vector<char> bytes = torch::pickle_save(c10::ivalue::Tuple::create(
        Elements{std::string(kCheckpointFormat), int64_t{world}, int64_t{rank}, s.micro_steps, entries}));
    durable::write_file(file, bytes);
    written.data_ptr<int64_t>()[0] = crc32c(bytes.data(), bytes.size());
    written.data_ptr<int64_t>()[1] = static_cast<int64_t>(bytes.size());
  } catch (const std::exception& e) {
    throw failure(e.what());
  }
  point("rank-file");
  at::Tensor every_written = at::empty({2 * world}, at::kLong);
  s.comm.all_gather(written, every_written);  // and every rank file is on disk

  if (rank == 0) {
    try {
      CheckpointManifest m;
      m.world_size = world;
      m.micro_steps = s.micro_steps;
      m.client_state = client_state;
      const LossScaler::State scaler = s.scaler.state();
      m.has_precision = true;
      m.precision = {scaler.scale, scaler.iter, scaler.last_overflow_iter, scaler.hysteresis_left, s.skipped_steps};
      m.optimizer = optimizer_kind(*s.optimizer);
      for (auto& group : s.optimizer->param_groups())
        if (!group.params().empty())
          m.optimizer_groups.push_back(options_json(param_options_value(*s.optimizer, group.params()[0]), m.optimizer));
      for (const auto& p : s.params) {
        ManifestParam mp{p->path, p->shape, "float32", p->trainable, kind_of(*p), p->owner, {}};
        for (int r = 0; r < world; ++r)
          if (const auto shard = written_by(*p, r)) mp.shards.push_back(*shard);
        m.params.push_back(std::move(mp));
      }
      const int64_t* checksums = every_written.data_ptr<int64_t>();
      for (int r = 0; r < world; ++r) {
        ManifestFile f;
        f.name = rank_file_name(r, world);
        f.crc32c = static_cast<uint32_t>(checksums[2 * r]);
        f.bytes = static_cast<uint64_t>(checksums[2 * r + 1]);
        m.files.push_back(f);
      }
      const std::string text = m.to_json();
      durable::write_file(manifest_path(staging), std::vector<char>(text.begin(), text.end()));
      durable::sync_dir(staging);
      point("manifest");
      durable::replace_dir(staging, target, [&] { point("exchanged"); });
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw failure(e.what());
    }
  }
  s.comm.barrier();  // the checkpoint is in place for every rank
  point("done");
}

void Engine::load_checkpoint(const std::string& dir, const LoadOptions& options) {
  state_->require_live("load_checkpoint");
  EngineState& s = *state_;
  const int rank = s.comm.rank();
  const std::string target = target_dir(dir);
  // Every rank reads and verifies every file: the same bytes give every rank the same verdict,
  // so all refuse together, before anything changes and before any collective.
  const LoadedCheckpoint saved = read_checkpoint(target);
  const CheckpointManifest& m = saved.manifest;
  const std::string where = manifest_path(target);

  if (m.params.size() != s.params.size())
    throw CheckpointError(where + ": " + std::to_string(m.params.size()) + " parameters, this model has " +
                          std::to_string(s.params.size()) + " (a checkpoint of another model)");
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ManifestParam& mp = m.params[i];
    const ManagedParam& p = *s.params[i];
    if (mp.path != p.path || mp.shape != p.shape || mp.trainable != p.trainable)
      throw CheckpointError(where + ": parameter " + std::to_string(i) + " is '" + mp.path + "' " +
                            c10::str(c10::IntArrayRef(mp.shape)) + (mp.trainable ? "" : " frozen") +
                            ", this model has '" + p.path + "' " + c10::str(c10::IntArrayRef(p.shape)) +
                            (p.trainable ? "" : " frozen") + " (a checkpoint of another model)");
  }
  // The manifest alone bounds the skipped steps by the step() calls; the steps they skipped are
  // boundaries under this engine's accumulation, which the manifest does not record.
  const int64_t boundaries = m.micro_steps / s.config.gradient_accumulation_steps;
  if (!options.module_only && m.has_precision && m.precision.skipped_steps > boundaries)
    throw CheckpointError(where + ": $.precision.skipped_steps is " + std::to_string(m.precision.skipped_steps) +
                          ", more than the " + std::to_string(boundaries) + " optimizer steps of " +
                          std::to_string(m.micro_steps) + " step() calls at gradient_accumulation_steps " +
                          std::to_string(s.config.gradient_accumulation_steps));
  const bool with_optimizer = options.restores_optimizer_state();
  const std::string kind = optimizer_kind(*s.optimizer);
  if (with_optimizer && m.optimizer != kind)
    throw CheckpointError(where + ": optimizer state of a " + m.optimizer + " optimizer, this engine's is " + kind);

  // Cut everything for this world, still without touching the engine.
  std::vector<at::Tensor> masters(s.params.size());
  std::vector<bool> stepped(s.params.size(), false);  // has optimizer state: it had a gradient
  std::vector<ParamStateToLoad> states;
  std::unordered_map<const c10::TensorImpl*, c10::IValue> options_by_master;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const ManagedParam& p = *s.params[i];
    if (p.placed() && p.owner != rank) continue;  // placed elsewhere: nothing of it lives here
    auto cut = [&](const at::Tensor& full) {
      if (p.placed() || p.persistent) return full.view(p.shape);
      at::Tensor shard = p.layout.shard_of(full, rank);
      s.faults.shard_loaded(s, m.world_size, p, full, shard);
      return shard;
    };
    masters[i] = cut(saved.full_parameter(i).reshape({-1}));
    if (!with_optimizer) {  // the optimizer keeps its state, and its say on what has stepped
      stepped[i] = state_numel_of(*s.optimizer, p.master) > 0;
      continue;
    }
    c10::IValue state = saved.full_state(i);
    if (!state.isNone()) {
      Elements fields = state.toTuple()->elements().vec();
      for (auto& f : fields)
        if (f.isTensor()) f = cut(f.toTensor()).to(p.master.device());
      state = c10::ivalue::Tuple::create(std::move(fields));
      stepped[i] = true;
    }
    states.push_back(ParamStateToLoad{p.master, state});
    const auto& pieces = saved.pieces[i];
    if (!pieces.empty()) options_by_master[p.master.unsafeGetTensorImpl()] = pieces.front().options;
  }
  std::vector<c10::IValue> group_options;
  for (auto& group : s.optimizer->param_groups()) {
    c10::IValue options;
    for (const auto& t : group.params())
      if (auto it = options_by_master.find(t.unsafeGetTensorImpl()); it != options_by_master.end() && options.isNone())
        options = it->second;
    group_options.push_back(options);
  }
  // Without optimizer state in the checkpoint (a planted fault drops it) the state is cleared,
  // as a fresh optimizer's would be. replace_optimizer_state changes nothing when it throws.
  try {
    if (with_optimizer) replace_optimizer_state(*s.optimizer, states, group_options);
  } catch (const CheckpointError& e) {
    throw CheckpointError(where + ": " + e.what());
  }
  // The optimizer is replaced; the rest cannot fail.
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < s.params.size(); ++i) {
    ManagedParam& p = *s.params[i];
    if (masters[i].defined()) p.master.copy_(masters[i]);
    s.partitioner.copy_back(p);  // bf16: the shard is the master rounded, as after a step
    s.faults.shard_written(p, rank);
    // A parameter the optimizer has stepped had a gradient, which zero_grad keeps as zeros
    // (LibTorch's default): it steps again even in a step that does not reach it, as in dense
    // training. An engine that never ran its backward (a fresh one, or the expert's new owner)
    // must get that zero gradient too, or it would skip those steps.
    if (stepped[i] && p.trainable && !p.grad_shard.defined()) p.grad_shard = s.partitioner.zero_gradient(p);
  }
  if (!options.module_only) {
    s.micro_steps = m.micro_steps;
    // The scaler and the skipped steps as saved; a manifest from before they were saved: the
    // scaler's initial state, nothing skipped.
    const ManifestPrecision& p = m.precision;
    s.scaler = LossScaler(s.options.precision.scaler);
    s.skipped_steps = 0;
    if (m.has_precision) {
      s.scaler.restore({p.loss_scale, p.scaler_iter, p.last_overflow_iter, static_cast<int>(p.hysteresis_left)});
      s.skipped_steps = p.skipped_steps;
    }
    // The steps those calls applied: every boundary but the skipped ones.
    s.optimizer_steps = m.micro_steps / s.config.gradient_accumulation_steps - s.skipped_steps;
  }
  s.faults.after_load(s, options);
  s.comm.barrier();
}

namespace {

std::string checked_tag(const std::string& tag, const char* caller) {
  if (auto problem = tag_problem(tag); !problem.empty()) throw UsageError(std::string(caller) + ": " + problem);
  return tag;
}

}  // namespace

void Engine::save_checkpoint_tagged(const std::string& folder, const std::string& tag) {
  state_->require_live("save_checkpoint_tagged");
  checked_tag(tag, "save_checkpoint_tagged");
  save_checkpoint((fs::path(folder) / tag).string());
  if (state_->comm.rank() == 0) {
    // Written beside, then renamed over: a reader sees the old latest or the new one.
    const fs::path latest = fs::path(folder) / kLatestFile, written = fs::path(folder) / "latest.zero3-staging";
    try {
      durable::write_file(written.string(), std::vector<char>(tag.begin(), tag.end()));
      fs::rename(written, latest);
      durable::sync_dir(folder);
    } catch (const std::exception& e) {
      throw CheckpointError("rank 0: cannot write " + latest.string() + ": " + e.what());
    }
  }
  state_->comm.barrier();  // latest names the tag for every rank
}

void Engine::load_checkpoint_tagged(const std::string& folder, const std::string& tag, const LoadOptions& options) {
  state_->require_live("load_checkpoint_tagged");
  std::string resolved = tag.empty() ? std::string() : checked_tag(tag, "load_checkpoint_tagged");
  const fs::path latest = fs::path(folder) / kLatestFile;
  state_->faults.tag_to_load(resolved);
  if (resolved.empty()) {
    std::ifstream in(latest, std::ios::binary);
    if (!in) throw CheckpointError(latest.string() + ": missing (no tagged checkpoint saved in " + folder + ")");
    resolved.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (auto problem = tag_problem(resolved); !problem.empty())
      throw CheckpointError(latest.string() + ": names no valid tag: " + problem);
  }
  load_checkpoint((fs::path(folder) / resolved).string(), options);
}

}  // namespace zero3
