#include "engine/optimizer_rebuild.h"

#include "engine/errors.h"
#include "engine/internal/torch_compat.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace zero3 {
namespace {

template <class Optim, class Options>
std::unique_ptr<torch::optim::Optimizer> rebuild_as(
    Optim& user, const std::function<at::Tensor(const at::Tensor&)>& replacement) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& group : user.param_groups()) {
    std::vector<at::Tensor> params;
    for (const auto& p : group.params())
      if (at::Tensor r = replacement(p); r.defined()) params.push_back(r);
    if (!params.empty()) groups.emplace_back(std::move(params), group.options().clone());
  }
  const auto& defaults = static_cast<const Options&>(user.defaults());
  return std::make_unique<Optim>(std::move(groups), defaults);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> rebuild_optimizer(
    torch::optim::Optimizer& user, const std::function<at::Tensor(const at::Tensor&)>& replacement) {
  if (auto* adamw = dynamic_cast<torch::optim::AdamW*>(&user))
    return rebuild_as<torch::optim::AdamW, torch::optim::AdamWOptions>(*adamw, replacement);
  if (auto* adam = dynamic_cast<torch::optim::Adam*>(&user))
    return rebuild_as<torch::optim::Adam, torch::optim::AdamOptions>(*adam, replacement);
  if (auto* sgd = dynamic_cast<torch::optim::SGD*>(&user))
    return rebuild_as<torch::optim::SGD, torch::optim::SGDOptions>(*sgd, replacement);
  throw UsageError(std::string("unsupported optimizer type ") + typeid(user).name() +
                   "; zerocheck's engine rebuilds Adam, AdamW and SGD");
}


namespace {

// The state tensors of one parameter, in a fixed order.
std::vector<at::Tensor> tensors_of_state(const torch::optim::OptimizerParamState* state) {
  std::vector<at::Tensor> out;
  auto keep = [&](const at::Tensor& t) {
    if (t.defined()) out.push_back(t);
  };
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
    keep(s->exp_avg()), keep(s->exp_avg_sq()), keep(s->max_exp_avg_sq());
  } else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
    keep(s->exp_avg()), keep(s->exp_avg_sq()), keep(s->max_exp_avg_sq());
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
    keep(s->momentum_buffer());
  }
  return out;
}

int64_t numel_of_state(const torch::optim::OptimizerParamState* state) {
  int64_t total = 0;
  for (const auto& t : tensors_of_state(state)) total += t.numel();
  return total;
}

}  // namespace

int64_t state_numel(torch::optim::Optimizer& optimizer) {
  int64_t total = 0;
  for (const auto& entry : optimizer.state()) total += numel_of_state(entry.second.get());
  return total;
}

namespace {

const torch::optim::OptimizerParamState* find_state(torch::optim::Optimizer& optimizer,
                                                    const at::Tensor& param) {
  if (!param.defined()) return nullptr;
  auto& states = optimizer.state();
  using Key = std::decay_t<decltype(states.begin()->first)>;
  auto it = states.find(compat::optimizer_state_key<Key>(param));
  return it == states.end() ? nullptr : it->second.get();
}

}  // namespace

int64_t state_numel_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  return state ? numel_of_state(state) : 0;
}

at::Tensor state_tensors_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  if (!state) return at::Tensor();
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors_of_state(state)) flat.push_back(t.detach().reshape({-1}).cpu());
  return flat.empty() ? at::Tensor() : at::cat(flat);
}

}  // namespace zero3
