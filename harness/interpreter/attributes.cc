// The user's attribute operations of one rank's interpreter (internal/attributes.h).
#include "harness/interpreter/internal/attributes.h"

#include <fmt/format.h>

namespace zerocheck::interpreter {
namespace {

// Where a user's write lands: the ledger's entry (what must hold) and the model's dictionary.
struct Slot {
  model::AttributeLedger::Entry* expected = nullptr;
  zero3::AttrDict* actual = nullptr;
  std::string missing;  // why there is none: "no module 'a.b'", "no parameter 'w'"
};

Slot slot_of(RankState& state, const Op& op) {
  Slot slot;
  slot.expected = state.ledger.find(op.module, "");
  if (slot.expected == nullptr) {
    slot.missing = fmt::format("no module '{}'", op.module);
    return slot;
  }
  zero3::Module& module = *state.modules.at(op.module);
  slot.actual = &module.attrs();
  if (!op.param.empty()) {
    slot.expected = state.ledger.find(op.module, op.param);
    if (slot.expected == nullptr) slot.missing = fmt::format("no parameter '{}'", op.param);
    else slot.actual = &module.param_attrs(op.param);
  }
  return slot;
}

}  // namespace

OpOutcome set_attr(RankState& state, const Op& op) {
  Slot slot = slot_of(state, op);
  if (!slot.missing.empty()) return skipped(slot.missing);
  slot.actual->set(op.name, op.value);
  const NotChargedToTheRank harness;
  slot.expected->attrs.set(op.name, model::deep_copy(op.value));
  return applied("ok");
}

OpOutcome del_attr(RankState& state, const Op& op) {
  Slot slot = slot_of(state, op);
  if (!slot.missing.empty()) return skipped(slot.missing);
  if (!slot.expected->attrs.has(op.name)) return skipped("no such attribute");
  slot.expected->attrs.del(op.name);
  if (slot.actual->has(op.name)) slot.actual->del(op.name);
  return applied("ok");
}

}  // namespace zerocheck::interpreter
