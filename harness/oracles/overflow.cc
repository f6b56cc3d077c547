// I11: the overflow contract, judged against the dense twin's own decisions (oracles.h).
#include "harness/oracles/oracles.h"

#include "engine/optimizer_rebuild.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

namespace zerocheck::oracles {

OverflowReport observe_overflow(zero3::Engine& engine) {
  OverflowReport out;
  out.optimizer_steps = engine.optimizer_steps();
  out.skipped_steps = engine.skipped_steps();
  out.loss_scale = engine.loss_scale();
  out.reported_norm = engine.global_grad_norm();
  torch::optim::Optimizer& optimizer = engine.optimizer();
  for (const auto& v : engine.params()) {
    out.state.emplace_back(v.path + " weight", v.param);
    out.state.emplace_back(v.path + " master", v.master);
    out.state.emplace_back(v.path + " shard", v.shard);
    for (auto& [name, tensor] : zero3::named_state_tensors_of(optimizer, v.master))
      out.state.emplace_back(v.path + " " + name, tensor);
  }
  return out;
}

Result overflow_contract(const model::DenseTwin& twin, const OverflowReport& report, const std::string& target) {
  const auto counter = [&](const char* what, int64_t want, int64_t got) -> Result {
    if (want == got) return std::nullopt;
    return violation("I11", target, "", std::to_string(want), std::to_string(got),
                     fmt::format("{} differ from the twin's, which skips a step exactly when a gradient of its "
                                 "accumulation window is not finite", what));
  };
  if (auto v = counter("the skipped steps", twin.skipped_steps(), report.skipped_steps)) return v;
  if (auto v = counter("the applied optimizer steps", twin.applied_steps(), report.optimizer_steps)) return v;
  if (twin.loss_scale() != report.loss_scale)
    return violation("I11", target, "", fmt::format("{}", twin.loss_scale()), fmt::format("{}", report.loss_scale),
                     "the loss scale differs from the twin's scaler (DeepSpeed's rules)");
  const double want = twin.reported_norm(), got = report.reported_norm;
  if (std::isfinite(want) != std::isfinite(got))
    return violation("I11", target, "", fmt::format("{}", want), fmt::format("{}", got),
                     "the reported gradient norm is not finite exactly when the twin's is");
  for (const auto& [what, tensor] : report.state)
    if (tensor.defined() && tensor.numel() > 0 && !at::isfinite(tensor).all().item<bool>())
      return violation("I11", target, what, "finite", "NaN or infinity",
                       "a non-finite value reached the engine's state despite overflow protection");
  return std::nullopt;
}

Result reported_norm(const model::DenseTwin& twin, const OverflowReport& report, const std::string& target) {
  const double want = twin.reported_norm(), got = report.reported_norm;
  if (!std::isfinite(want) || !std::isfinite(got) || std::abs(want - got) <= 1e-9 * std::abs(want))
    return std::nullopt;  // finiteness is overflow_contract's
  return violation("I11", target, "", fmt::format("{}", want), fmt::format("{}", got),
                   "the reported gradient norm differs from the twin's");
}

}  // namespace zerocheck::oracles
