// I2: placement, from the owners the model derived from the user's attributes.
#include "harness/oracles/matching.h"

#include <fmt/format.h>

namespace zerocheck::oracles {

Result placement(const model::Expectation& expected, const std::vector<ObservedParam>& observed, int rank,
                 const std::string& target) {
  auto where = [](int owner) { return owner < 0 ? std::string("not placed") : fmt::format("placed on rank {}", owner); };
  return for_each_pair("I2", expected, observed, target, [&](const model::ExpectedParam& e, const ObservedParam& o) -> Result {
    if (o.reported_owner != e.owner)
      return violation("I2", e.module_path, e.path, where(e.owner), where(o.reported_owner),
                       e.owner < 0 ? "a module the policy does not place was placed"
                                   : "a placed module is reported on the wrong rank");
    if (e.owner < 0) return std::nullopt;
    if (rank == e.owner && o.param_elements != e.numel)
      return violation("I2", e.module_path, e.path, fmt::format("{} elements here (the owner)", e.numel),
                       fmt::format("{} elements", o.param_elements), "a placed parameter is not whole on its owner");
    const int64_t held = o.param_bytes + o.master_bytes + o.grad_shard_bytes + o.full_grad_bytes + o.optimizer_elements;
    if (rank != e.owner && held != 0)
      return violation("I2", e.module_path, e.path, fmt::format("nothing here (owner is rank {})", e.owner),
                       fmt::format("{} bytes and {} optimizer elements", held - o.optimizer_elements, o.optimizer_elements),
                       "a placed parameter has storage off its owner");
    return std::nullopt;
  });
}

}  // namespace zerocheck::oracles
