// The tree conditions of the catalogue's deep faults (engine/faults.h, ZERO3_DEEP_FAULTS).
//
// What the shape of the tree decides is decided here, once, at initialize; the conditions that
// depend on a call (world size, load options, counters) sit beside each fault's effect, so that
// every effect reads as one line of the engine with its whole conjunction in view.
#pragma once

#include "engine/module.h"

#include <vector>

namespace zero3 {

struct EngineState;

// Sets ManagedParam::deep_fault_target where the engine's fault picks parameters by the tree:
// tied-expert-world3, a partitioned parameter of an expert that its MoE lists twice;
// frozen-tied-kept-gathered, a frozen partitioned parameter of a module used at two places.
// Call once placement has decided what is partitioned.
void mark_deep_fault_targets(EngineState& state);

// Whether a module of `tree` holds a parameter with no elements.
bool holds_zero_size_parameter(const std::vector<ModuleAtPath>& tree);

}  // namespace zero3
