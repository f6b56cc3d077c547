// The legacy modes: what upstream DeepSpeed writes onto users' modules and parameters.
//
// legacy-0.15.4 walks the tree in pre-order and sets `module.id` from a counter that is a
// mutable default argument upstream, i.e. global to the process and growing across initialize
// calls (root 0, +1 per child visited, a shared child visited once per place). legacy-ds-id
// writes the same counter to `ds_id`. Both also write the ds_* names of upstream_names.h. Ranks
// that are threads each get their own counter, as each upstream rank is its own process.
#pragma once

#include "engine/faults.h"

namespace zero3 {

struct EngineState;

// Whether `fault` is one of the legacy modes (they skip the registry and write attributes).
bool is_legacy(Fault fault);

// Writes the upstream module names (the id counter first) when the engine runs a legacy mode;
// does nothing otherwise. Runs before placement is evaluated: upstream numbers the modules while
// it installs its hooks, before any user code reads `.id` again.
void apply_legacy_module_writes(EngineState& state);
// Writes the upstream parameter names (after partitioning: they describe the shards).
void apply_legacy_param_writes(EngineState& state);

// Starts every rank's legacy counter again at 0, as a fresh process would. The harness calls it
// before each scenario so a replay does not depend on what ran before it.
void reset_legacy_counters();

}  // namespace zero3
