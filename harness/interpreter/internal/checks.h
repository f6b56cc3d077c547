// What runs after every operation of one rank's interpreter (checks.cc), and how any check's
// finding is recorded. Internal to harness/interpreter.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

namespace zerocheck::interpreter {

// Records `found` (nothing, or a violation of an invariant that is on) for this operation.
// Throws ViolationFound when the run stops at the first violation.
void require(RankState& state, oracles::Result found);
// The sweeps after every operation: I1, then I2, I4 and I3 measured once for those that are on
// (a switched-off oracle costs nothing). Nothing when options.checks_after_every_op is false.
void sweep(RankState& state);
// I8, after the sweep: the traffic the operation measured (state.deferred_traffic) into
// `outcome`, checked against the schedule's prediction when there is one.
void check_traffic(RankState& state, OpOutcome& outcome);

}  // namespace zerocheck::interpreter
