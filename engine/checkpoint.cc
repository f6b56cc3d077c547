// Sharded checkpoints: each rank writes its own shards and optimizer state, atomically.
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/internal/engine_state.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <unistd.h>

namespace zero3 {
namespace {

constexpr const char* kFormat = "zero3-shards/1";

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
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(std::string(kFormat)));
    archive.write("world_size", c10::IValue(int64_t{state_->comm.world_size()}));
    archive.write("micro_steps", c10::IValue(state_->micro_steps));
    for (const auto& p : state_->params)
      archive.write("shard." + std::to_string(p->id), p->master.detach(), /*is_buffer=*/true);
    if (state_->options.fault != Fault::checkpoint_drops_optimizer_state) {
      torch::serialize::OutputArchive optimizer_archive;
      state_->optimizer->save(optimizer_archive);
      archive.write("optimizer", optimizer_archive);
    }
    archive.save_to(temp);
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
  torch::serialize::InputArchive archive;
  std::vector<at::Tensor> shards;
  try {
    archive.load_from(file);
    c10::IValue format, world, micro_steps;
    archive.read("format", format);
    archive.read("world_size", world);
    archive.read("micro_steps", micro_steps);
    if (!format.isString() || format.toStringRef() != kFormat)
      throw CheckpointError(file + ": not a " + std::string(kFormat) + " checkpoint");
    if (world.toInt() != state_->comm.world_size())
      throw CheckpointError(file + ": written by a world of " + std::to_string(world.toInt()) +
                            ", this world has " + std::to_string(state_->comm.world_size()));
    for (const auto& p : state_->params) {
      at::Tensor shard;
      archive.read("shard." + std::to_string(p->id), shard, /*is_buffer=*/true);
      if (shard.sizes() != p->master.sizes())
        throw CheckpointError(file + ": shard of '" + p->path + "' has shape " +
                              c10::str(shard.sizes()) + ", expected " +
                              c10::str(p->master.sizes()));
      shards.push_back(shard);
    }
    const int64_t saved_micro_steps = micro_steps.toInt();
    torch::serialize::InputArchive optimizer_archive;
    if (archive.try_read("optimizer", optimizer_archive)) {
      // LibTorch's load only adds the state it finds: state created after the save (a parameter
      // that had no gradient then) would survive the load. Start from nothing, as saved, and put
      // the old state back if the archive does not load: nothing partial.
      auto before = std::move(state_->optimizer->state());
      state_->optimizer->state().clear();
      try {
        state_->optimizer->load(optimizer_archive);
      } catch (...) {
        state_->optimizer->state() = std::move(before);
        throw;
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
