// The `inject` operation and the taking of armed injections (internal/injections.h).
#include "harness/interpreter/internal/injections.h"

#include "engine/testing/training.h"

#include <fmt/format.h>

namespace zerocheck::interpreter {
namespace {

std::vector<ArmedInjections>& armed_of(RankState& state) {
  state.armed.resize(static_cast<size_t>(state.comm.world_size()));
  return state.armed;
}

// The user's tensor of the parameter at `path` in the whole tree, or an undefined tensor.
at::Tensor parameter_at(const std::shared_ptr<zero3::Module>& root, const std::string& path) {
  for (auto& [name, p] : unique_named_parameters(root))
    if (name == path) return p;
  return at::Tensor();
}

// Whether the expectation places the parameter at `path` (of the whole tree) on an owner: found
// by identity among the live engine's target's parameters, whose paths the expectation uses.
bool placed(RankState& state, const std::string& path) {
  const at::Tensor p = parameter_at(state.model, path);
  const Subtree* target = state.subtree_at(state.engine_target);
  if (!p.defined() || target == nullptr) return false;
  for (auto& [relative, q] : unique_named_parameters(target->root))
    if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) {
      const model::ExpectedParam* expected = state.expectation->find(relative);
      return expected != nullptr && expected->owner >= 0;
    }
  return false;
}

}  // namespace

OpOutcome inject(RankState& state, const Op& op) {
  ArmedInjections& armed = armed_of(state).at(static_cast<size_t>(op.rank));
  const float value = injected_value(op);
  if (op.into == "input") armed.input = value;
  else if (op.into == "loss") armed.backward.loss = value;
  else {
    armed.backward.param = op.param;
    armed.backward.gradient = value;
  }
  return applied(fmt::format("armed {} on rank {}'s {}{}", std::get<std::string>(op.value.storage()), op.rank,
                             op.into, op.param.empty() ? "" : " of " + op.param));
}

std::vector<std::optional<float>> take_input_injections(RankState& state) {
  std::vector<std::optional<float>> out;
  for (ArmedInjections& armed : armed_of(state)) out.push_back(std::exchange(armed.input, std::nullopt));
  return out;
}

std::vector<model::BackwardInjection> take_backward_injections(RankState& state) {
  std::vector<model::BackwardInjection> out;
  for (ArmedInjections& armed : armed_of(state)) {
    out.push_back(std::exchange(armed.backward, model::BackwardInjection()));
    if (!out.back().param.empty() && placed(state, out.back().param)) out.back().param.clear();
  }
  return out;
}

GradientPoison::GradientPoison(RankState& state, const model::BackwardInjection& injection) {
  if (injection.param.empty()) return;
  param_ = parameter_at(state.model, injection.param);
  if (!param_.defined() || !param_.requires_grad()) return;  // a frozen parameter gets no gradient
  // A hook on the leaf sees this rank's whole gradient of the parameter for this backward,
  // before it is accumulated and before the engine's hook on the gradient accumulator reduces it.
  hook_ = param_.register_hook(
      [value = injection.gradient](const at::Tensor& g) { return model::poison_gradient(g, value); });
}

GradientPoison::~GradientPoison() {
  if (hook_) param_.remove_hook(*hook_);
}

}  // namespace zerocheck::interpreter
