// I3: the engine's copy of every parameter against the dense twin, shard by shard; the expected
// shard is cut by the spec's layout (flatten, pad with zeros to c*N, rank r holds [r*c, (r+1)*c)).
#include "harness/oracles/matching.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zerocheck::oracles {

Result parity(const model::Expectation& expected, const model::DenseTwin& twin,
              const std::vector<ObservedParam>& observed, int rank, int world_size, const std::string& target) {
  return for_each_pair("I3", expected, observed, target, [&](const model::ExpectedParam& e, const ObservedParam& o) -> Result {
    const at::Tensor dense = twin.param(e.path);
    if (!dense.defined())
      return violation("I3", target, e.path, "a parameter of the dense twin", "<none>", "the dense twin lacks a parameter");
    if (e.owner >= 0 && e.owner != rank) return std::nullopt;  // nothing here to compare: I2 checks it is empty
    at::Tensor want, got = o.master.detach();
    if (e.owner >= 0 || e.persistent) {
      want = dense.detach();
      if (got.numel() == want.numel()) got = got.reshape(want.sizes());
    } else {
      want = model::expected_shard(dense.detach(), world_size, rank);
    }
    if (got.sizes() != want.sizes() || !at::equal(got.cpu(), want))
      return violation("I3", target, e.path, "the dense twin's values (padding zero)", difference(want, got),
                       "this rank's copy differs from the dense twin");
    return std::nullopt;
  });
}

Result loss_parity(double dense, double engine, const std::string& target) {
  if (dense == engine) return std::nullopt;
  return violation("I3", target, "loss", fmt::format("{:.17g}", dense), fmt::format("{:.17g}", engine),
                   "the loss differs from the dense twin's");
}

Result released_parity(const std::vector<std::pair<std::string, at::Tensor>>& model_params,
                       const model::DenseTwin& twin, const std::string& target) {
  for (const auto& [path, p] : model_params) {
    const at::Tensor dense = twin.param(path);
    if (!dense.defined())
      return violation("I3", target, path, "<no such parameter>", "in the model", "the dense twin lacks a parameter");
    if (p.sizes() != dense.sizes() || !at::equal(p.detach().cpu(), dense.detach()))
      return violation("I3", target, path, "the dense twin's values", difference(dense, p),
                       "after release the model's parameter differs from the dense twin");
  }
  if (model_params.size() != twin.params().size())
    return violation("I3", target, "", fmt::format("{} parameters", twin.params().size()),
                     fmt::format("{} parameters", model_params.size()), "after release the model lost parameters");
  return std::nullopt;
}

}  // namespace zerocheck::oracles
