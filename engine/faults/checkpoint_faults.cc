// The planted faults of the model's state on its way out and in: the consolidated state dict,
// sharded checkpoints and tagged loads.
#include "engine/faults/planted.h"

#include "engine/internal/engine_state.h"

#include <ATen/ATen.h>

namespace zero3 {
namespace {

// The consolidated state dict is built from rank 0's shard, other ranks' slices left zero.
class ConsolidatedFromRank0Shard final : public PlantedFault {
  bool builds_consolidated(const ManagedParam& p, at::Tensor& full) const override {
    full = at::zeros({p.layout.padded_numel()});
    full.narrow(0, 0, p.layout.chunk()).copy_(p.master.detach());
    full = full.narrow(0, 0, p.layout.numel).view(p.shape);
    return true;
  }
};

// A module used at two places is listed under its first place only.
class ConsolidatedListsSharedOnce final : public PlantedFault {
  bool lists_consolidated(const EngineState& state, const FullTensors& full_of, StateDict& out) const override {
    for (const auto& p : state.params) out.emplace(p->path, full_of.at(p.get()));
    return true;
  }
};

class CheckpointDropsOptimizerState final : public PlantedFault {
  void state_saved(const ManagedParam&, c10::IValue& state) const override { state = c10::IValue(); }
};

// Bites only when resharding, so a load into the saving world stays exact.
class ReshardOffsetOffByOne final : public PlantedFault {
  void shard_loaded(const EngineState& state, int saved_world, const ManagedParam& p, const at::Tensor& full,
                    at::Tensor& shard) const override {
    if (saved_world == state.comm.world_size() || full.numel() == 0) return;
    const at::Tensor flat = full.reshape({-1});
    shard = p.layout.shard_of(at::cat({flat.narrow(0, 1, flat.numel() - 1), at::zeros({1}, flat.options())}),
                              state.comm.rank());
  }
};

// A tagged load reads the checkpoint the folder's latest names.
class LoadIgnoresTag final : public PlantedFault {
  void tag_to_load(std::string& tag) const override { tag.clear(); }
};

}  // namespace

namespace planted {

const PlantedFault& consolidated_from_rank0_shard() {
  static const ConsolidatedFromRank0Shard fault;
  return fault;
}
const PlantedFault& consolidated_lists_shared_once() {
  static const ConsolidatedListsSharedOnce fault;
  return fault;
}
const PlantedFault& checkpoint_drops_optimizer_state() {
  static const CheckpointDropsOptimizerState fault;
  return fault;
}
const PlantedFault& reshard_offset_off_by_one() {
  static const ReshardOffsetOffByOne fault;
  return fault;
}
const PlantedFault& load_ignores_tag() {
  static const LoadIgnoresTag fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
