// The named models: small models of the shapes that break partitioning, with deterministic data.
// The engine's tests train them, and so do `zerocheck train`, `zerocheck repro seed` and the
// reshard check (harness/tools/).
//
//   mlp  - Linear/Tanh stack.
//   odd  - shapes chosen to break partitioning: 7x15, a prime numel (13), numel 1 (< N), a
//          zero-size parameter, a Linear shared at two places (tied weights) and a LayerNorm.
//   moe  - a Linear, an MoE of 4 experts routed by step (the same on every rank), a Linear.
//   moe-placed - the same tree with experts placed by their user attribute `id` mod N, each rank
//          routing to a different expert in every step.
//   frozen - Linear(8,8) frozen, Linear(8,16), Tanh, Linear(16,16) frozen, a zero-size Offset,
//          Linear(16,4): frozen parameters before and after the first trainable one.
//   seed - the bug report's model: 60 experts, each one Linear(128,128), expert i with user
//          attribute id = i, run through all experts in order.
#pragma once

#include "engine/module.h"
#include "engine/placement.h"
#include "engine/testing/training.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zero3 {
class Engine;
}

namespace zerocheck {

struct ModelSpec {
  std::string name;
  int64_t in_features;
  int64_t out_features;
  // Returns a fresh model with parameters initialised from `seed` (identical on every call).
  std::function<std::shared_ptr<zero3::Module>(uint64_t seed)> build;
  // Returns the route of `rank` in step `step`.
  std::function<zero3::Route(int64_t step, int rank)> route;
  // The user's placement policy for this model.
  zero3::PlacementSpec placement;
};

// Returns the spec of `name`. Throws zero3::UsageError listing the known names.
ModelSpec model_spec(const std::string& name);
// Returns "mlp, odd, moe, moe-placed, seed, frozen".
std::string model_names();

// Returns rank's micro-batch of `batch_size` samples for `step`: a pure function of its
// arguments, so the dense twin sees exactly what each rank saw.
Batch make_batch(const ModelSpec& spec, uint64_t seed, int64_t step, int rank, int64_t batch_size);

// Trains `engine` one step on rank's micro-batch of 4 samples (make_batch with `seed`): forward,
// backward, step, zero_grad. Returns the loss.
double train_step(zero3::Engine& engine, const ModelSpec& spec, uint64_t seed, int64_t step, int rank);

// Returns the seed model's experts in order (expert i has attrs().get("id") == i when built).
std::vector<std::shared_ptr<zero3::Module>> seed_experts(const zero3::Module& seed_model);

}  // namespace zerocheck
