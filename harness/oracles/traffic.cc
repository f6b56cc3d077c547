// I8: collectives, kind by kind, and the counts of reduce-scatters (one per gradient bucket) and
// all-gathers (one per module fetch, one per parameter a gather op reaches),
// against the schedule the model replayed.
#include "harness/oracles/oracles.h"

namespace zerocheck::oracles {

Result traffic(const std::string& operation, const model::Traffic& expected, const model::Traffic& measured,
               const std::string& target) {
  if (expected == measured) return std::nullopt;
  return violation("I8", target, operation, expected.to_text(), measured.to_text(),
                   "the " + operation + " moved other elements, or in another number of reduce-scatters or all-gathers, than the ZeRO-3 schedule predicts");
}

}  // namespace zerocheck::oracles
