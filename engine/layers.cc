#include "engine/layers.h"

#include "engine/errors.h"
#include "engine/seeded_values.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include <unordered_set>

namespace zero3 {
namespace {

at::Tensor new_parameter(Module& owner, const std::string& name, at::IntArrayRef shape) {
  return owner.register_parameter(name, torch::zeros(shape));
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) : Module("Linear") {
  weight = new_parameter(*this, "weight", {out_features, in_features});
  if (with_bias) bias = new_parameter(*this, "bias", {out_features});
}

at::Tensor Linear::forward(const at::Tensor& input, Route&) {
  return at::linear(input, weight, bias);
}

LayerNorm::LayerNorm(int64_t features) : Module("LayerNorm"), features_(features) {
  weight = new_parameter(*this, "weight", {features});
  bias = new_parameter(*this, "bias", {features});
}

at::Tensor LayerNorm::forward(const at::Tensor& input, Route&) {
  return at::layer_norm(input, {features_}, weight, bias, 1e-5);
}

at::Tensor Tanh::forward(const at::Tensor& input, Route&) { return at::tanh(input); }

Offset::Offset(std::vector<int64_t> shape) : Module("Offset") {
  value = new_parameter(*this, "value", shape);
}

at::Tensor Offset::forward(const at::Tensor& input, Route&) { return input + value.sum(); }

void Sequential::push_back(std::shared_ptr<Module> child) {
  register_module(std::to_string(items_.size()), child);
  items_.push_back(std::move(child));
}

at::Tensor Sequential::forward(const at::Tensor& input, Route& route) {
  at::Tensor x = input;
  for (auto& item : items_) x = (*item)(x, route);
  return x;
}

Expert::Expert(int64_t in_features, int64_t out_features) : Module("Expert") {
  linear = register_module("linear", std::make_shared<Linear>(in_features, out_features));
}

at::Tensor Expert::forward(const at::Tensor& input, Route& route) { return (*linear)(input, route); }

MoE::MoE(std::vector<std::shared_ptr<Module>> expert_modules) : Module("MoE") {
  experts = register_module("experts", std::make_shared<ModuleList>());
  for (auto& e : expert_modules) experts->push_back(std::move(e));
}

at::Tensor MoE::forward_expert(const at::Tensor& input, int64_t index, Route& route) {
  if (index < 0 || index >= static_cast<int64_t>(experts->size()))
    throw UsageError("MoE: expert index " + std::to_string(index) + " is outside [0, " +
                     std::to_string(experts->size()) + ")");
  return (*experts->at(static_cast<size_t>(index)))(input, route);
}

int64_t MoE::peek_choice(const Route& route) const {
  return route.peek("MoE", static_cast<int64_t>(experts->size()));
}

at::Tensor MoE::forward(const at::Tensor& input, Route& route) {
  const int64_t index = route.next("MoE", static_cast<int64_t>(experts->size()));
  return forward_expert(input, index, route);
}

void init_parameters(Module& root, uint64_t seed) {
  at::NoGradGuard no_grad;
  // LibTorch lists parameters in pre-order, a shared one at every place: the first place is its
  // path (SCENARIO_FORMAT.md), as Python's named_parameters() names it.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second || p.numel() == 0) continue;
    const int64_t fan_in = p.dim() >= 2 ? p.size(1) : p.dim() == 1 ? p.size(0) : 1;
    fill_seeded(p, stream_base(seed, ValueStream::parameter, fnv1a64(item.key())), parameter_bound(fan_in));
  }
}

}  // namespace zero3
