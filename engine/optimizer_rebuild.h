// Rebuilding the user's optimizer over the engine's fp32 shards, as deepspeed.initialize does.
//
// Supported: torch::optim::Adam, AdamW and SGD. Each of the user's parameter groups becomes a
// group with the same options over the replacement tensors, in the same order.
//
// The optimizer's state travels in checkpoints as plain IValues, per parameter (param_state_value)
// so a checkpoint can cut and re-join it for another world size. LibTorch's own Optimizer::save
// writes a TorchScript archive whose reading compiles a class per nested archive, which made a
// checkpoint cost more than the training step it saves.
#pragma once

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero3 {

// Returns a new optimizer of `user`'s type and per-group options whose parameters are
// `replacement(p)` for each of the user's parameters p; an undefined replacement leaves p out
// (a group left with no parameters is dropped).
// Throws UsageError naming the type when the optimizer kind is not supported.
std::unique_ptr<torch::optim::Optimizer> rebuild_optimizer(
    torch::optim::Optimizer& user, const std::function<at::Tensor(const at::Tensor&)>& replacement);

// Returns the number of elements held in the optimizer's per-parameter state tensors.
int64_t state_numel(torch::optim::Optimizer& optimizer);
// Returns every state tensor the optimizer holds for `param`, flattened and concatenated in a
// fixed order (undefined when it holds none): an exact fingerprint for round-trip checks.
at::Tensor state_tensors_of(torch::optim::Optimizer& optimizer, const at::Tensor& param);
// Returns every state tensor the optimizer holds for `param` with its name ("exp_avg",
// "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"), in the same fixed order; empty when none.
std::vector<std::pair<std::string, at::Tensor>> named_state_tensors_of(torch::optim::Optimizer& optimizer,
                                                                       const at::Tensor& param);
// Returns the number of state elements the optimizer holds for `param` (0 when none).
int64_t state_numel_of(torch::optim::Optimizer& optimizer, const at::Tensor& param);

// ---- per-parameter state, for checkpoints that do not depend on how parameters are cut -------
//
// A parameter's state is a tuple of the kind's fields in a fixed order (Adam/AdamW: step,
// exp_avg, exp_avg_sq, max_exp_avg_sq or None; SGD: momentum_buffer or None): its tensors are
// per element, so a checkpoint can cut and re-join them like the parameter itself. Its group's
// options are a tuple too (Adam/AdamW: lr, beta1, beta2, eps, weight_decay, amsgrad; SGD: lr,
// momentum, dampening, weight_decay, nesterov).

// Returns "adam", "adamw" or "sgd". Throws UsageError for another kind.
std::string optimizer_kind(torch::optim::Optimizer& optimizer);
// Returns the state tuple the optimizer holds for `param`, or None (no state, or not its parameter).
c10::IValue param_state_value(torch::optim::Optimizer& optimizer, const at::Tensor& param);
// Returns the options tuple of the group that holds `param`, or None when no group does.
c10::IValue param_options_value(torch::optim::Optimizer& optimizer, const at::Tensor& param);

// The state to install for one parameter of the optimizer (None: no state).
struct ParamStateToLoad {
  at::Tensor param;
  c10::IValue state;
};

// Replaces the optimizer's whole state by `states` and each group's options by `group_options`
// (one tuple per group, in order; None keeps the group's options). Everything is decoded first:
// throws CheckpointError saying which field does not read, and changes nothing then.
void replace_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<ParamStateToLoad>& states,
                             const std::vector<c10::IValue>& group_options);

}  // namespace zero3
