// How a scenario of each draw profile runs when it was decoded from fuzzer bytes: one table, read
// by the fuzz targets (fuzz/scenario_target.h) and by `zerocheck bench --profile`, so what the
// bench measures is what the fuzzer executes.
#pragma once

#include "harness/scenario/draw/draw_scenario.h"
#include "harness/interpreter/interpreter.h"

namespace zerocheck {

// training: every oracle after every operation on thread ranks. attributes: nothing trains or
// checkpoints, so parity (I3), memory (I4), round trips (I6) and traffic (I8) have nothing to
// judge; switching them off skips the dense twin and the per-operation sweeps, and the ranks
// are fibers of one thread (no backward ever runs).
RunOptions profile_run_options(DrawProfile profile, zero3::Fault fault = zero3::Fault::none);

}  // namespace zerocheck
