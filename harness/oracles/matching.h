// Pairs the model's parameters with the engine's by path, for the oracles that compare them
// one by one. Internal to harness/oracles.
#pragma once

#include "harness/oracles/oracles.h"

namespace zerocheck::oracles {

// Returns a violation of `invariant` when a parameter is on one side only; otherwise calls
// `compare(expected, observed)` for each pair and returns its first violation.
template <class Compare>
Result for_each_pair(const char* invariant, const model::Expectation& expected,
                     const std::vector<ObservedParam>& observed, const std::string& target, Compare&& compare) {
  for (const auto& e : expected.params) {
    const ObservedParam* found = nullptr;
    for (const auto& o : observed)
      if (o.path == e.path) found = &o;
    if (found == nullptr)
      return violation(invariant, target, e.path, "a managed parameter", "<not reported by the engine>",
                       "the engine does not account for a parameter of the model");
    if (auto v = compare(e, *found)) return v;
  }
  for (const auto& o : observed)
    if (expected.find(o.path) == nullptr)
      return violation(invariant, target, o.path, "<no such parameter>", "reported by the engine",
                       "the engine reports a parameter the model does not have");
  return std::nullopt;
}

}  // namespace zerocheck::oracles
