// What a refused checkpoint load must leave exactly as it was: every shard of the
// engine, each one's optimizer state and every group's learning rate. Shared by the corruption
// test and the checkpoint fuzz target, which both load damaged bytes and compare before/after.
#pragma once

#include "engine/engine.h"

#include <ATen/ATen.h>

#include <vector>

namespace zerocheck {

// Copies of the engine's shards, optimizer state (an empty tensor where there is none) and
// learning rates, in parameter order.
std::vector<at::Tensor> engine_state_snapshot(zero3::Engine& engine);

// True when both snapshots hold the same shapes, dtypes and bits, tensor by tensor.
bool same_engine_state(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

}  // namespace zerocheck
