// I3: the engine's copy of every parameter against the dense twin, shard by shard; the expected
// shard is cut by the spec's layout (flatten, pad with zeros to c*N, rank r holds [r*c, (r+1)*c)).
#include "harness/oracles/matching.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <optional>

namespace zerocheck::oracles {
namespace {

// Returns whether `got` holds `want`'s elements [offset, offset + got.numel()), zero past its end,
// compared element by element as same_numbers compares them; nothing when either is not a
// contiguous fp32 CPU tensor (the caller then compares with ATen). This runs for every
// parameter after every operation, and building the expected shard with ATen took a quarter of
// a fuzz input's operator calls.
std::optional<bool> holds_slice(const at::Tensor& got, const at::Tensor& want, int64_t offset) {
  auto plain = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  };
  if (!plain(got) || !plain(want)) return std::nullopt;
  const float* g = got.data_ptr<float>();
  const float* w = want.data_ptr<float>();
  const int64_t n = want.numel();
  for (int64_t i = 0, k = offset; i < got.numel(); ++i, ++k)
    if (!same_numbers(g[i], k < n ? w[k] : 0.0f)) return false;
  return true;
}

}  // namespace

Result parity(const model::Expectation& expected, const model::DenseTwin& twin,
              const std::vector<ObservedParam>& observed, int rank, int world_size, const std::string& target) {
  return for_each_pair("I3", expected, observed, target, [&](const model::ExpectedParam& e, const ObservedParam& o) -> Result {
    const at::Tensor dense = twin.param(e.path);
    if (!dense.defined())
      return violation("I3", target, e.path, "a parameter of the dense twin", "<none>", "the dense twin lacks a parameter");
    if (e.owner >= 0 && e.owner != rank) return std::nullopt;  // nothing here to compare: I2 checks it is empty
    // The common case, without a tensor operation; a difference is described by the path below.
    const bool whole = e.owner >= 0 || e.persistent;
    const int64_t expected_numel = whole ? dense.numel() : model::chunk_of(dense.numel(), world_size);
    if (o.master.numel() == expected_numel && (whole || o.master.dim() == 1) &&
        holds_slice(o.master, dense, whole ? 0 : rank * expected_numel) == std::optional<bool>(true))
      return std::nullopt;
    at::Tensor want, got = o.master.detach();
    if (e.owner >= 0 || e.persistent) {
      want = dense.detach();
      if (got.numel() == want.numel()) got = got.reshape(want.sizes());
    } else {
      want = model::expected_shard(dense.detach(), world_size, rank);
    }
    if (!same_numbers(got, want))
      return violation("I3", target, e.path, "the dense twin's values (padding zero)", difference(want, got),
                       "this rank's copy differs from the dense twin");
    return std::nullopt;
  });
}

Result loss_parity(double dense, double engine, const std::string& target) {
  if (same_numbers(dense, engine)) return std::nullopt;
  return violation("I3", target, "loss", fmt::format("{:.17g}", dense), fmt::format("{:.17g}", engine),
                   "the loss differs from the dense twin's");
}

Result released_parity(const std::vector<std::pair<std::string, at::Tensor>>& model_params,
                       const model::DenseTwin& twin, const std::string& target) {
  for (const auto& [path, p] : model_params) {
    const at::Tensor dense = twin.param(path);
    if (!dense.defined())
      return violation("I3", target, path, "<no such parameter>", "in the model", "the dense twin lacks a parameter");
    // The twin's master rounded as the engine's copy back rounds (bf16; fp32: itself).
    const at::Tensor want = zero3::round_to(dense.detach(), p.scalar_type());
    if (!same_numbers(p, want))
      return violation("I3", target, path, "the dense twin's values", difference(want, p),
                       "after release the model's parameter differs from the dense twin");
  }
  if (model_params.size() != twin.params().size())
    return violation("I3", target, "", fmt::format("{} parameters", twin.params().size()),
                     fmt::format("{} parameters", model_params.size()), "after release the model lost parameters");
  return std::nullopt;
}

}  // namespace zerocheck::oracles
