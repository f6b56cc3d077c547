#include "engine/optimizer_rebuild.h"

#include "engine/errors.h"
#include "engine/internal/torch_compat.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// The state tensors of one parameter by name, in a fixed order.
std::vector<std::pair<std::string, at::Tensor>> named_tensors_of_state(const torch::optim::OptimizerParamState* state) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto keep = [&](const char* name, const at::Tensor& t) {
    if (t.defined()) out.emplace_back(name, t);
  };
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
    keep("exp_avg", s->exp_avg()), keep("exp_avg_sq", s->exp_avg_sq()), keep("max_exp_avg_sq", s->max_exp_avg_sq());
  } else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
    keep("exp_avg", s->exp_avg()), keep("exp_avg_sq", s->exp_avg_sq()), keep("max_exp_avg_sq", s->max_exp_avg_sq());
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
    keep("momentum_buffer", s->momentum_buffer());
  }
  return out;
}

// The state tensors of one parameter, in a fixed order.
std::vector<at::Tensor> tensors_of_state(const torch::optim::OptimizerParamState* state) {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_tensors_of_state(state)) out.push_back(t);
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
  auto& states = optimizer.state();
  // Before the first step there is no state: skip making the key (a string on LibTorch 1.13).
  if (!param.defined() || states.empty()) return nullptr;
  using Key = std::decay_t<decltype(states.begin()->first)>;
  auto it = states.find(compat::optimizer_state_key<Key>(param));
  return it == states.end() ? nullptr : it->second.get();
}

}  // namespace

int64_t state_numel_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  return state ? numel_of_state(state) : 0;
}

std::vector<std::pair<std::string, at::Tensor>> named_state_tensors_of(torch::optim::Optimizer& optimizer,
                                                                       const at::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  return state ? named_tensors_of_state(state) : std::vector<std::pair<std::string, at::Tensor>>{};
}

at::Tensor state_tensors_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  if (!state) return at::Tensor();
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors_of_state(state)) flat.push_back(t.detach().reshape({-1}).cpu());
  return flat.empty() ? at::Tensor() : at::cat(flat);
}

// ---- optimizer state in checkpoints ------------------------------------------------------------
//
// Options and per-parameter state are tuples of the kind's fields in a fixed order.

namespace {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;
using Elements = std::vector<c10::IValue>;

c10::IValue tensor_or_none(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }
at::Tensor tensor_of(const c10::IValue& v) { return v.isNone() ? at::Tensor() : v.toTensor(); }

// Returns the elements of a tuple that must have `size` of them.
Elements fields(const c10::IValue& value, size_t size, const char* what) {
  Elements out = value.toTuple()->elements().vec();
  if (out.size() != size)
    throw CheckpointError(std::string("optimizer ") + what + " has " + std::to_string(out.size()) +
                          " fields, expected " + std::to_string(size));
  return out;
}

template <class Options, class State>
struct AdamFields {
  static c10::IValue options(const OptimizerOptions& base) {
    const auto& o = static_cast<const Options&>(base);
    return c10::ivalue::Tuple::create(Elements{o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(),
                                               o.weight_decay(), o.amsgrad()});
  }
  static Options options_from(const c10::IValue& value) {
    const Elements f = fields(value, 6, "options");
    Options o;
    o.lr(f[0].toDouble()).betas(std::make_tuple(f[1].toDouble(), f[2].toDouble())).eps(f[3].toDouble());
    o.weight_decay(f[4].toDouble()).amsgrad(f[5].toBool());
    return o;
  }
  static c10::IValue state(const OptimizerParamState& base) {
    const auto& s = static_cast<const State&>(base);
    return c10::ivalue::Tuple::create(Elements{s.step(), tensor_or_none(s.exp_avg()), tensor_or_none(s.exp_avg_sq()),
                                               tensor_or_none(s.max_exp_avg_sq())});
  }
  static std::unique_ptr<OptimizerParamState> state_from(const c10::IValue& value) {
    const Elements f = fields(value, 4, "state");
    auto s = std::make_unique<State>();
    s->step(f[0].toInt()).exp_avg(tensor_of(f[1])).exp_avg_sq(tensor_of(f[2])).max_exp_avg_sq(tensor_of(f[3]));
    return s;
  }
};

struct SgdFields {
  static c10::IValue options(const OptimizerOptions& base) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(base);
    return c10::ivalue::Tuple::create(Elements{o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()});
  }
  static torch::optim::SGDOptions options_from(const c10::IValue& value) {
    const Elements f = fields(value, 5, "options");
    torch::optim::SGDOptions o(f[0].toDouble());
    o.momentum(f[1].toDouble()).dampening(f[2].toDouble()).weight_decay(f[3].toDouble()).nesterov(f[4].toBool());
    return o;
  }
  static c10::IValue state(const OptimizerParamState& base) {
    const auto& s = static_cast<const torch::optim::SGDParamState&>(base);
    return c10::ivalue::Tuple::create(Elements{tensor_or_none(s.momentum_buffer())});
  }
  static std::unique_ptr<OptimizerParamState> state_from(const c10::IValue& value) {
    const Elements f = fields(value, 1, "state");
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(tensor_of(f[0]));
    return s;
  }
};

}  // namespace

// ---- per-parameter state ---------------------------------------------------------------------

namespace {

template <class Fields>
c10::IValue param_state_as(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& states = optimizer.state();
  using Key = std::decay_t<decltype(states.begin()->first)>;
  auto it = states.find(compat::optimizer_state_key<Key>(param));
  return it == states.end() ? c10::IValue() : Fields::state(*it->second);
}

template <class Fields>
c10::IValue param_options_as(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  for (auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return Fields::options(group.options());
  return c10::IValue();
}

template <class Fields>
void replace_state_as(torch::optim::Optimizer& optimizer, const std::vector<ParamStateToLoad>& states,
                      const std::vector<c10::IValue>& group_options) {
  auto& live = optimizer.state();
  using Key = std::decay_t<decltype(live.begin()->first)>;
  using StateMap = std::decay_t<decltype(live)>;
  using Options = decltype(Fields::options_from(c10::IValue()));
  auto& groups = optimizer.param_groups();
  if (group_options.size() != groups.size())
    throw CheckpointError("optimizer options for " + std::to_string(group_options.size()) + " groups, the optimizer has " +
                          std::to_string(groups.size()));
  StateMap loaded;
  for (const auto& s : states)
    if (!s.state.isNone()) loaded[compat::optimizer_state_key<Key>(s.param)] = Fields::state_from(s.state);
  std::vector<std::optional<Options>> options;
  for (const auto& o : group_options)
    options.push_back(o.isNone() ? std::nullopt : std::optional<Options>(Fields::options_from(o)));
  // Only now, with every field decoded, does the optimizer change.
  live = std::move(loaded);
  for (size_t g = 0; g < groups.size(); ++g)
    if (options[g]) static_cast<Options&>(groups[g].options()) = *options[g];
}

template <class R>
R by_kind(torch::optim::Optimizer& optimizer, const std::function<R(const char*)>& adamw,
          const std::function<R(const char*)>& adam, const std::function<R(const char*)>& sgd) {
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return adamw("adamw");
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return adam("adam");
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return sgd("sgd");
  throw UsageError(std::string("unsupported optimizer type ") + typeid(optimizer).name() +
                   "; zerocheck's engine checkpoints Adam, AdamW and SGD");
}

using AdamWKind = AdamFields<torch::optim::AdamWOptions, torch::optim::AdamWParamState>;
using AdamKind = AdamFields<torch::optim::AdamOptions, torch::optim::AdamParamState>;

}  // namespace

std::string optimizer_kind(torch::optim::Optimizer& optimizer) {
  auto name = [](const char* kind) { return std::string(kind); };
  return by_kind<std::string>(optimizer, name, name, name);
}

c10::IValue param_state_value(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  return by_kind<c10::IValue>(
      optimizer, [&](const char*) { return param_state_as<AdamWKind>(optimizer, param); },
      [&](const char*) { return param_state_as<AdamKind>(optimizer, param); },
      [&](const char*) { return param_state_as<SgdFields>(optimizer, param); });
}

c10::IValue param_options_value(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  return by_kind<c10::IValue>(
      optimizer, [&](const char*) { return param_options_as<AdamWKind>(optimizer, param); },
      [&](const char*) { return param_options_as<AdamKind>(optimizer, param); },
      [&](const char*) { return param_options_as<SgdFields>(optimizer, param); });
}

void replace_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<ParamStateToLoad>& states,
                             const std::vector<c10::IValue>& group_options) {
  try {
    by_kind<int>(
        optimizer, [&](const char*) { return replace_state_as<AdamWKind>(optimizer, states, group_options), 0; },
        [&](const char*) { return replace_state_as<AdamKind>(optimizer, states, group_options), 0; },
        [&](const char*) { return replace_state_as<SgdFields>(optimizer, states, group_options), 0; });
  } catch (const c10::Error& e) {  // a field of the wrong type: a damaged checkpoint
    throw CheckpointError(std::string("optimizer state does not read: ") + e.what_without_backtrace());
  }
}

}  // namespace zero3
