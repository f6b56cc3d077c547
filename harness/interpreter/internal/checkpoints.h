// The checkpoint operations of one rank's interpreter (checkpoints.cc): save, load. Internal to
// harness/interpreter; each is the function of its operation's name, as in the Python replay's
// replay/checkpoints.py. I6 is checked where the operations make it checkable: the consolidated
// state dict at a save, the round trip and the step counter at a load, and a second world's load
// of the same checkpoint.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

namespace zerocheck::interpreter {

// The live engine saves under op.tag (absent: DeepSpeed's default tag from the step count);
// what its load must restore is kept. Collective.
OpOutcome save(RankState& state, const Op& op);
// The live engine loads the save of op.tag (absent: the last save) of the same target, with or
// without the optimizer's state; with op.world_size M, rank 0 loads it into a world of M too.
// Collective.
OpOutcome load(RankState& state, const Op& op);
// Rank 0 compares the consolidated state dict with the dense twin (I6); elsewhere nothing is
// compared. Collective.
RankInterpreter::Consolidated check_consolidated(RankState& state);

}  // namespace zerocheck::interpreter
