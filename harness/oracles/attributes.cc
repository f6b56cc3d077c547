// I1: the user's attributes, compared with the ledger's deep copies.
#include "harness/oracles/oracles.h"

namespace zerocheck::oracles {
namespace {

struct AttrDiff {
  std::string name, expected, actual;
};

std::optional<AttrDiff> first_difference(const zero3::AttrDict& expected, const zero3::AttrDict& actual) {
  for (const auto& e : expected.entries()) {
    if (!actual.has(e.name)) return AttrDiff{e.name, e.value.repr(), "<missing>"};
    if (actual.get(e.name) != e.value || actual.owner(e.name) != e.owner)
      return AttrDiff{e.name, e.value.repr() + " (by " + e.owner + ")",
                      actual.get(e.name).repr() + " (by " + actual.owner(e.name) + ")"};
  }
  for (const auto& a : actual.entries())
    if (!expected.has(a.name)) return AttrDiff{a.name, "<absent>", a.value.repr() + " (added by " + a.owner + ")"};
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected.entries()[i].name != actual.entries()[i].name)
      return AttrDiff{expected.entries()[i].name, "at position " + std::to_string(i), "moved"};
  return std::nullopt;
}

}  // namespace

Result attributes(const model::AttributeLedger& ledger, const char* invariant) {
  for (const auto& entry : ledger.entries()) {
    const zero3::AttrDict* live = entry.param.empty() ? &entry.module->attrs() : entry.module->find_param_attrs(entry.param);
    const zero3::AttrDict none;
    if (auto diff = first_difference(entry.attrs, live ? *live : none)) {
      if (entry.param.empty())
        return violation(invariant, entry.module_path, diff->name, diff->expected, diff->actual,
                         "a user attribute of the module was changed");
      return violation(invariant, entry.module_path, entry.param + "." + diff->name, diff->expected, diff->actual,
                       "a user attribute of the parameter was changed");
    }
  }
  return std::nullopt;
}

}  // namespace zerocheck::oracles
