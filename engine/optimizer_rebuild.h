// Rebuilding the user's optimizer over the engine's fp32 shards, as deepspeed.initialize does.
//
// Supported: torch::optim::Adam, AdamW and SGD. Each of the user's parameter groups becomes a
// group with the same options over the replacement tensors, in the same order.
#pragma once

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>

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
// Returns the number of state elements the optimizer holds for `param` (0 when none).
int64_t state_numel_of(torch::optim::Optimizer& optimizer, const at::Tensor& param);

}  // namespace zero3
