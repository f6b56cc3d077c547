// The training operations of one rank's interpreter (training.cc): forward, backward, step,
// zero_grad, gather. Internal to harness/interpreter; each is the function of its operation's
// name, as in the Python replay's replay/training.py. Each measures the traffic it moved
// (state.deferred_traffic, checked by checks.h's check_traffic after the sweep) and makes the same
// call on the dense twin.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

namespace zerocheck::interpreter {

// This rank's micro-batch through the live engine along the op's route; I3 compares the loss.
OpOutcome forward(RankState& state, const Op& op);
// Back-propagates the last forward's loss (skipped without one, or with nothing trainable).
OpOutcome backward(RankState& state, const Op& op);
// The engine's optimizer step; a pending forward's graph is stale after it.
OpOutcome step(RankState& state, const Op& op);
// Zeroes the engine's gradients.
OpOutcome zero_grad(RankState& state, const Op& op);
// Gathers op.module's parameters; the modifier rank (none: every rank) scales them in place and
// its edit is published.
OpOutcome gather(RankState& state, const Op& op);

}  // namespace zerocheck::interpreter
