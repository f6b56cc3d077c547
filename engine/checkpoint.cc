// Sharded checkpoints: each rank writes its own shards and optimizer state, atomically.
//
// A rank's file is one pickled tuple (torch::pickle_save, which Python's torch.load reads too):
// (format, world size, micro-steps, shard ids, shards, optimizer state or None). Plain values,
// not a TorchScript archive: reading an archive compiles a class per nested archive, and that
// cost more than the training a checkpoint saves.
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/internal/engine_state.h"
#include "engine/optimizer_rebuild.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <unordered_map>
#include <unistd.h>

namespace zero3 {
namespace {

constexpr const char* kFormat = "zero3-shards/2";

std::string shard_file(const std::string& dir, const Comm& comm) {
  return (std::filesystem::path(dir) / ("zero3_rank" + std::to_string(comm.rank()) + "_of" +
                                        std::to_string(comm.world_size()) + ".pt"))
      .string();
}

}  // namespace

void Engine::save_checkpoint(const std::string& dir) {
  state_->require_live("save_checkpoint");
  const std::string file = shard_file(dir, state_->comm);
  const std::string temp = file + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(state_->comm.rank());
  try {
    std::filesystem::create_directories(dir);
    c10::impl::GenericList ids(c10::IntType::get()), shards(c10::TensorType::get());
    for (const auto& p : state_->params) {
      ids.push_back(p->id);
      shards.push_back(p->master.detach());
    }
    const c10::IValue optimizer = state_->options.fault == Fault::checkpoint_drops_optimizer_state
                                      ? c10::IValue()
                                      : optimizer_state_value(*state_->optimizer);
    const std::vector<char> bytes = torch::pickle_save(c10::ivalue::Tuple::create(
        std::vector<c10::IValue>{std::string(kFormat), int64_t{state_->comm.world_size()}, state_->micro_steps, ids,
                                 shards, optimizer}));
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      out.close();
      if (!out) throw std::runtime_error("short write");
    }
    // Rename is atomic: a crash leaves either the old checkpoint or the new one, never half.
    std::filesystem::rename(temp, file);
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw CheckpointError("rank " + std::to_string(state_->comm.rank()) + ": cannot write " +
                          file + ": " + e.what());
  }
  state_->comm.barrier();  // a checkpoint exists once every rank's file does
}

void Engine::load_checkpoint(const std::string& dir) {
  state_->require_live("load_checkpoint");
  const std::string file = shard_file(dir, state_->comm);
  if (!std::filesystem::exists(file))
    throw CheckpointError("rank " + std::to_string(state_->comm.rank()) + ": no checkpoint " +
                          file + " (written for another world size?)");
  std::vector<at::Tensor> shards;
  try {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error("cannot open it");
    std::vector<char> bytes(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) throw std::runtime_error("read error");
    const c10::IValue saved = torch::pickle_load(bytes);
    if (!saved.isTuple() || saved.toTuple()->elements().size() != 6)
      throw CheckpointError(file + ": not a " + std::string(kFormat) + " checkpoint");
    const auto fields = saved.toTuple()->elements().vec();
    if (!fields[0].isString() || fields[0].toStringRef() != kFormat)
      throw CheckpointError(file + ": not a " + std::string(kFormat) + " checkpoint");
    if (fields[1].toInt() != state_->comm.world_size())
      throw CheckpointError(file + ": written by a world of " + std::to_string(fields[1].toInt()) +
                            ", this world has " + std::to_string(state_->comm.world_size()));
    const auto ids = fields[3].toList();
    const auto saved_shards = fields[4].toList();
    if (ids.size() != saved_shards.size())
      throw CheckpointError(file + ": " + std::to_string(ids.size()) + " shard ids for " +
                            std::to_string(saved_shards.size()) + " shards");
    std::unordered_map<int64_t, at::Tensor> by_id;
    for (size_t i = 0; i < ids.size(); ++i) by_id[ids.get(i).toInt()] = saved_shards.get(i).toTensor();
    for (const auto& p : state_->params) {
      auto it = by_id.find(p->id);
      if (it == by_id.end()) throw CheckpointError(file + ": no shard of '" + p->path + "'");
      const at::Tensor& shard = it->second;
      if (shard.sizes() != p->master.sizes())
        throw CheckpointError(file + ": shard of '" + p->path + "' has shape " +
                              c10::str(shard.sizes()) + ", expected " +
                              c10::str(p->master.sizes()));
      shards.push_back(shard);
    }
    const int64_t saved_micro_steps = fields[2].toInt();
    // Without optimizer state in the file (a fault drops it) the optimizer keeps what it has.
    // load_optimizer_state replaces the whole state, or changes nothing when it throws.
    if (!fields[5].isNone()) {
      try {
        load_optimizer_state(*state_->optimizer, fields[5]);
      } catch (const CheckpointError& e) {
        throw CheckpointError(file + ": " + e.what());
      }
    }
    state_->micro_steps = saved_micro_steps;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError("rank " + std::to_string(state_->comm.rank()) + ": cannot read " +
                          file + ": " + e.what());
  }
  // Only now, with everything read and checked, does the engine change: nothing partial.
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shards.size(); ++i) state_->params[i]->master.copy_(shards[i]);
  state_->comm.barrier();
}

}  // namespace zero3
