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
    if (!same_bits(now, saved_masters[i]))
      return violation("I6", target, observed_after[i].path, "the saved shard", difference(saved_masters[i], now),
                       "load did not restore the shard bit-exactly");
  }
  if (!same_bits(optimizer_state_after, saved_optimizer_state))
    return violation("I6", target, "optimizer", fmt::format("{} state elements", saved_optimizer_state.numel()),
                     fmt::format("{} state elements", optimizer_state_after.numel()),
                     "load did not restore the optimizer state bit-exactly");
  return std::nullopt;
}

Result step_counter(int64_t expected_micro_steps, int64_t micro_steps_after, const std::string& target) {
  if (micro_steps_after == expected_micro_steps) return std::nullopt;
  return violation("I6", target, "step counter", fmt::format("{} step() calls", expected_micro_steps),
                   fmt::format("{} step() calls", micro_steps_after),
                   "load left the engine's step counter other than its options say");
}

Result resharded(const std::vector<WholeParam>& here, const std::vector<WholeParam>& there, int from, int to,
                 const std::string& target) {
  const std::string loaded_by = fmt::format("loaded into a world of {}", to);
  const std::string saved_by = fmt::format("this world of {}", from);
  if (here.size() != there.size())
    return violation("I6", target, "", fmt::format("{} parameters", here.size()),
                     fmt::format("{} parameters", there.size()),
                     fmt::format("the checkpoint {} has other parameters than {}", loaded_by, saved_by));
  for (size_t i = 0; i < here.size(); ++i) {
    const WholeParam& a = here[i];
    const WholeParam& b = there[i];
    for (const WholeParam* p : {&a, &b})
      if (!p->problem.empty())
        return violation("I6", target, p->path, "a parameter gathered whole", p->problem,
                         fmt::format("cannot gather the state of the world {} ranks", p == &a ? from : to));
    if (a.path != b.path)
      return violation("I6", target, a.path, a.path, b.path,
                       fmt::format("parameter {} {} is another one", i, loaded_by));
    if (!same_bits(a.value, b.value))
      return violation("I6", target, a.path, "the parameter " + saved_by + " loaded", difference(a.value, b.value),
                       fmt::format("the checkpoint {} differs from the one {} loaded", loaded_by, saved_by));
    if (a.has_state != b.has_state || a.state.size() != b.state.size())
      return violation("I6", target, a.path,
                       fmt::format("{} optimizer state fields", a.has_state ? a.state.size() : 0),
                       fmt::format("{} optimizer state fields", b.has_state ? b.state.size() : 0),
                       fmt::format("the optimizer state {} differs from the one {} loaded", loaded_by, saved_by));
    for (size_t f = 0; f < a.state.size(); ++f) {
      const at::Tensor& x = a.state[f];
      const at::Tensor& y = b.state[f];
      if (!same_bits(x, y))
        return violation("I6", target, a.path, fmt::format("optimizer state field {}", f),
                         x.defined() && y.defined() ? difference(x, y) : (y.defined() ? "present" : "<none>"),
                         fmt::format("the optimizer state {} differs from the one {} loaded", loaded_by, saved_by));
    }
  }
  return std::nullopt;
}

Result consolidated(const model::Expectation& expected, const std::map<std::string, at::Tensor>& consolidated,
                    const model::DenseTwin& twin, const std::string& target) {
  for (const auto& e : expected.params) {
    const at::Tensor dense = twin.param(e.path);
    if (!dense.defined())
      return violation("I6", target, e.path, "a parameter of the dense twin", "<none>", "the dense twin lacks a parameter");
    for (const auto& key : e.state_dict_keys) {
      auto it = consolidated.find(key);
      if (it == consolidated.end())
        return violation("I6", target, key, "the dense twin's parameter", "<missing>",
                         "the consolidated state dict lacks a key of the model's state dict");
      // A consolidated state dict holds the parameter-dtype copies: the twin's masters rounded.
      const at::Tensor want = zero3::round_to(dense.detach(), it->second.scalar_type());
      if (!same_numbers(it->second, want))
        return violation("I6", target, key, "the dense twin's values", difference(want, it->second),
                         "the consolidated state dict differs from the dense twin");
    }
  }
  for (const auto& [key, tensor] : consolidated)
    if (expected.find_state_dict_key(key) == nullptr)
      return violation("I6", target, key, "<no such key>", "in the state dict",
                       "the consolidated state dict holds a key the model's state dict does not have");
  return std::nullopt;
}

}  // namespace zerocheck::oracles
