// I6: checkpoints and the consolidated state dict.
#include "harness/oracles/oracles.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zerocheck::oracles {

Result round_trip(const std::vector<at::Tensor>& saved_masters, const at::Tensor& saved_optimizer_state,
                  const std::vector<ObservedParam>& observed_after, const at::Tensor& optimizer_state_after,
                  const std::string& target) {
  if (saved_masters.size() != observed_after.size())
    return violation("I6", target, "", fmt::format("{} shards", saved_masters.size()),
                     fmt::format("{} shards", observed_after.size()), "load changed which parameters exist");
  for (size_t i = 0; i < saved_masters.size(); ++i) {
    const at::Tensor now = observed_after[i].master.detach();
    if (now.sizes() != saved_masters[i].sizes() || !at::equal(now, saved_masters[i]))
      return violation("I6", target, observed_after[i].path, "the saved shard", difference(saved_masters[i], now),
                       "load did not restore the shard bit-exactly");
  }
  if (optimizer_state_after.sizes() != saved_optimizer_state.sizes() ||
      !at::equal(optimizer_state_after, saved_optimizer_state))
    return violation("I6", target, "optimizer", fmt::format("{} state elements", saved_optimizer_state.numel()),
                     fmt::format("{} state elements", optimizer_state_after.numel()),
                     "load did not restore the optimizer state bit-exactly");
  return std::nullopt;
}

Result consolidated(const model::Expectation& expected, const std::map<std::string, at::Tensor>& consolidated,
                    const std::vector<std::pair<std::string, at::Tensor>>& gathered, const std::string& target) {
  for (const auto& [path, p] : gathered) {
    const model::ExpectedParam* e = expected.find(path);
    if (e == nullptr)
      return violation("I6", target, path, "<no such parameter>", "gathered", "the model has no such parameter");
    if (e->owner > 0) continue;  // whole only on its owner: rank 0 cannot read it from its own model
    auto it = consolidated.find(path);
    if (it == consolidated.end())
      return violation("I6", target, path, "the gathered parameter", "<missing>",
                       "the consolidated state dict lacks a parameter");
    if (it->second.sizes() != p.sizes() || !at::equal(it->second, p.detach().cpu()))
      return violation("I6", target, path, "the gathered parameter", difference(p, it->second),
                       "the consolidated state dict differs from the gathered parameter");
  }
  for (const auto& [path, tensor] : consolidated)
    if (expected.find(path) == nullptr)
      return violation("I6", target, path, "<no such parameter>", "in the state dict",
                       "the consolidated state dict holds a parameter the model does not have");
  return std::nullopt;
}

}  // namespace zerocheck::oracles
