// The legacy modes: what upstream DeepSpeed writes onto users' modules and parameters.
//
// legacy-0.15.4 walks the tree in pre-order and sets `module.id` from a counter that is a
// mutable default argument upstream, i.e. global to the process and growing across initialize
// calls (root 0, +1 per child visited, a shared child visited once per place). legacy-ds-id
// writes the same counter to `ds_id`. Both also write the ds_* names of upstream_names.h. Ranks
// that are threads each get their own counter, as each upstream rank is its own process.
#pragma once

#include <string>

namespace zero3 {

struct EngineState;

// Writes the upstream module names, the id counter (under `id_name`: "id" or "ds_id") first,
// each as written by `owner` (the mode's name). The legacy faults (engine/faults/) call it before
// placement is evaluated: upstream numbers the modules while it installs its hooks, before any
// user code reads `.id` again.
void write_legacy_module_names(EngineState& state, const char* id_name, const std::string& owner);
// Writes the upstream parameter names (after partitioning: they describe the shards).
void write_legacy_param_names(EngineState& state, const std::string& owner);

// Starts every rank's legacy counter again at 0, as a fresh process would. The harness calls it
// before each scenario so a replay does not depend on what ran before it.
void reset_legacy_counters();

}  // namespace zero3
