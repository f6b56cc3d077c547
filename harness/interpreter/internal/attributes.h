// The user's attribute operations of one rank's interpreter (attributes.cc): set_attr,
// del_attr. Internal to harness/interpreter; each is the function of its operation's name, as in
// the Python replay's replay/attributes.py. Each writes the model and the attribute ledger alike,
// so I1 and I2 (checks.h's sweep) compare the model with the user's last write.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

namespace zerocheck::interpreter {

// The user writes op.name = op.value on op.module (or its parameter op.param).
OpOutcome set_attr(RankState& state, const Op& op);
// The user deletes op.name there (skipped when the user never wrote it).
OpOutcome del_attr(RankState& state, const Op& op);

}  // namespace zerocheck::interpreter
