#include "engine/internal/deep_faults.h"

#include "engine/internal/engine_state.h"
#include "engine/layers.h"

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

}  // namespace

void mark_deep_fault_targets(EngineState& state) {
  std::unordered_set<const Module*> chosen;
  bool frozen_only = false;
  if (state.options.fault == Fault::tied_expert_world3) {
    chosen = with_descendants(experts_tied_in_their_moe(state));
  } else if (state.options.fault == Fault::frozen_tied_kept_gathered) {
    for (const auto& [module, places] : places_of(*state.model))
      if (places > 1) chosen.insert(module);
    frozen_only = true;
  } else {
    return;
  }
  for (const Module* module : chosen)
    for (ManagedParam* p : state.modules.at(module).own_params)
      p->deep_fault_target |= !p->persistent && !p->placed() && !(frozen_only && p->trainable);
}

bool holds_zero_size_parameter(const std::vector<ModuleAtPath>& tree) {
  for (const auto& entry : tree)
    for (const auto& item : entry.module->own_parameters())
      if (item.second.numel() == 0) return true;
  return false;
}

}  // namespace zero3
