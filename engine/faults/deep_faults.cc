// The catalogue's deep faults (engine/faults.h, ZERO3_DEEP_FAULTS): each bites only when all of
// its conditions hold, and every condition is written here, in its fault's seams.
//
// What the shape of the tree decides is decided once, at initialize (after_placement sets
// ManagedParam::deep_fault_target); the conditions that depend on a call (world size, load
// options, counters) sit in the seam where the fault bites.
#include "engine/faults/planted.h"

#include "engine/internal/engine_state.h"
#include "engine/layers.h"
#include "engine/optimizer_rebuild.h"
#include "engine/registry.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <functional>
#include <unordered_map>
#include <unordered_set>

namespace zero3 {
namespace {

// How many places of the tree each module is used at (a shared module once per place).
std::unordered_map<const Module*, int> places_of(const Module& root) {
  std::unordered_map<const Module*, int> places;
  std::function<void(const Module&)> visit = [&](const Module& module) {
    ++places[&module];
    for (const auto& [name, child] : module.named_zero3_children()) visit(*child);
  };
  visit(root);
  return places;
}

// The experts an MoE lists more than once.
std::unordered_set<const Module*> experts_tied_in_their_moe(const EngineState& state) {
  std::unordered_set<const Module*> tied;
  for (const auto& [module, record] : state.modules) {
    const auto* moe = dynamic_cast<const MoE*>(module);
    if (moe == nullptr) continue;
    std::unordered_set<const Module*> seen;
    for (const auto& [name, expert] : moe->experts->named_zero3_children())
      if (!seen.insert(expert.get()).second) tied.insert(expert.get());
  }
  return tied;
}

// The modules of `roots`' subtrees.
std::unordered_set<const Module*> with_descendants(const std::unordered_set<const Module*>& roots) {
  std::unordered_set<const Module*> out;
  std::function<void(const Module&)> visit = [&](const Module& module) {
    if (!out.insert(&module).second) return;
    for (const auto& [name, child] : module.named_zero3_children()) visit(*child);
  };
  for (const Module* root : roots) visit(*root);
  return out;
}

// Marks the partitioned parameters of `chosen` modules (only the frozen ones when `frozen_only`).
void mark_targets(EngineState& state, const std::unordered_set<const Module*>& chosen, bool frozen_only) {
  for (const Module* module : chosen)
    for (ManagedParam* p : state.modules.at(module).own_params)
      p->deep_fault_target |= !p->persistent && !p->placed() && !(frozen_only && p->trainable);
}

// Whether a module of `tree` holds a parameter with no elements.
bool holds_zero_size_parameter(const std::vector<ModuleAtPath>& tree) {
  for (const auto& entry : tree)
    for (const auto& item : entry.module->own_parameters())
      if (item.second.numel() == 0) return true;
  return false;
}

// The engine already managing the root of `tree`, if any.
EngineState* live_engine_of(const std::vector<ModuleAtPath>& tree) {
  return const_cast<EngineState*>(
      static_cast<const EngineState*>(Registry::instance().manager_of(tree.front().module.get())));
}

// World 3, a partitioned parameter of an expert its MoE lists twice: divided by 4, not 3.
class TiedExpertWorld3 final : public PlantedFault {
  void after_placement(EngineState& state) const override {
    mark_targets(state, with_descendants(experts_tied_in_their_moe(state)), /*frozen_only=*/false);
  }
  void gradient_divisor(const ManagedParam& p, int world, int& divisor) const override {
    if (p.deep_fault_target && world == 3) divisor = world + 1;
  }
};

// Resumed on more ranks, a frozen partitioned parameter is cut from its saved tensor rotated by one.
class FrozenReshardRotated final : public PlantedFault {
  void shard_loaded(const EngineState& state, int saved_world, const ManagedParam& p, const at::Tensor& full,
                    at::Tensor& shard) const override {
    if (saved_world < state.comm.world_size() && !p.trainable && full.numel() > 1)
      shard = p.layout.shard_of(full.reshape({-1}).roll(1), state.comm.rank());
  }
};

// After a refused repeat on a submodule, the live engine's third step is counted, not applied.
class ThirdStepAfterRefusal final : public PlantedFault {
  void on_refusal(const AlreadyInitialized&, const std::vector<ModuleAtPath>& tree) const override {
    EngineState* live = live_engine_of(tree);
    if (live != nullptr && live->model != tree.front().module) live->steps_after_refusal = 0;
  }
  bool skips_optimizer_step(EngineState& state) const override {
    return state.steps_after_refusal >= 0 && ++state.steps_after_refusal == 3;
  }
};

// A repeat with a fresh Adam over a zero-size parameter, once the live engine has stepped, is
// never checked.
class FreshOptimizerZeroSizeRepeat final : public PlantedFault {
  bool skips_registry_check(const std::vector<ModuleAtPath>& tree,
                            const torch::optim::Optimizer& optimizer) const override {
    const EngineState* live = live_engine_of(tree);
    return live != nullptr && live->optimizer_steps > 0 && !Registry::instance().is_managed(&optimizer) &&
           dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr && holds_zero_size_parameter(tree);
  }
};

// Saved between two accumulation boundaries, the step() count is restored to the last one.
class AccumulationBoundaryOnLoad final : public PlantedFault {
  void after_load(EngineState& state, const LoadOptions& options) const override {
    const int64_t accumulation = state.config.gradient_accumulation_steps;
    if (!options.module_only && accumulation > 1) state.micro_steps -= state.micro_steps % accumulation;
  }
};

// A module_only load with Adam, in a world of 3 or more, after two steps or more, zeroes the
// first moments.
class ModuleOnlyLoadResetsAdam final : public PlantedFault {
  void after_load(EngineState& state, const LoadOptions& options) const override {
    if (!options.module_only || state.comm.world_size() < 3 || optimizer_kind(*state.optimizer) != "adam" ||
        state.optimizer_steps < 2)
      return;
    at::NoGradGuard no_grad;
    for (const auto& p : state.params)
      for (auto& [name, tensor] : named_state_tensors_of(*state.optimizer, p->master))
        if (name == "exp_avg") tensor.zero_();
  }
};

// Mid-accumulation, the last rank's count of step() calls drops back to the boundary.
class ZeroGradMidAccumulation final : public PlantedFault {
  void before_zero_grad(EngineState& state) const override {
    const int world = state.comm.world_size();
    const int64_t accumulation = state.config.gradient_accumulation_steps;
    if (accumulation > 1 && world > 1 && state.comm.rank() == world - 1)
      state.micro_steps -= state.micro_steps % accumulation;
  }
};

// A frozen partitioned parameter of a module used at two places stays gathered after backward.
class FrozenTiedKeptGathered final : public PlantedFault {
  void after_placement(EngineState& state) const override {
    std::unordered_set<const Module*> tied;
    for (const auto& [module, places] : places_of(*state.model))
      if (places > 1) tied.insert(module);
    mark_targets(state, tied, /*frozen_only=*/true);
  }
  bool keeps_gathered_after_backward(const ManagedParam& p) const override { return p.deep_fault_target; }
};

// In a world of 3 or more, a persistent parameter's edit is broadcast from rank 0.
class PersistentEditFromRank0 final : public PlantedFault {
  void persistent_edit_source(const EngineState& state, int& from) const override {
    if (state.comm.world_size() >= 3) from = 0;
  }
};

}  // namespace

namespace planted {

const PlantedFault& tied_expert_world3() {
  static const TiedExpertWorld3 fault;
  return fault;
}
const PlantedFault& frozen_reshard_rotated() {
  static const FrozenReshardRotated fault;
  return fault;
}
const PlantedFault& third_step_after_refusal() {
  static const ThirdStepAfterRefusal fault;
  return fault;
}
const PlantedFault& fresh_optimizer_zero_size_repeat() {
  static const FreshOptimizerZeroSizeRepeat fault;
  return fault;
}
const PlantedFault& accumulation_boundary_on_load() {
  static const AccumulationBoundaryOnLoad fault;
  return fault;
}
const PlantedFault& module_only_load_resets_adam() {
  static const ModuleOnlyLoadResetsAdam fault;
  return fault;
}
const PlantedFault& zero_grad_mid_accumulation() {
  static const ZeroGradMidAccumulation fault;
  return fault;
}
const PlantedFault& frozen_tied_kept_gathered() {
  static const FrozenTiedKeptGathered fault;
  return fault;
}
const PlantedFault& persistent_edit_from_rank0() {
  static const PersistentEditFromRank0 fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
