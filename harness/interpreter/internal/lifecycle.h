// The life-cycle operations of one rank's interpreter (lifecycle.cc): initialize, release,
// destroy. Internal to harness/interpreter; each is the function of its operation's name, as in
// the Python replay's replay/lifecycle.py.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

namespace zerocheck::interpreter {

// Wraps op.target in an engine as the refusal model predicts (model/): a refusal it predicts is
// checked to change nothing (I5); an initialize it accepts makes the live engine.
// Throws what zero3::initialize throws when the model predicts no such refusal (I7).
OpOutcome initialize(RankState& state, const Op& op);
// The live engine releases the model, which is the user's again (I3: whole and equal to the twin).
OpOutcome release(RankState& state, const Op& op);
// The live engine is destroyed without a release; the model is the user's again, as above.
OpOutcome destroy(RankState& state, const Op& op);

}  // namespace zerocheck::interpreter
