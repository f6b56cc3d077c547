// How zerocheck trains a model, on both sides of every comparison: the loss, the user's
// optimizers, and the parameters of a tree listed once each.
//
// The engine's tests, the dense twin (harness/model) and the harness's tools all train with
// these, so "the same training" means the same code. Thread-safety: pure functions.
#pragma once

#include "engine/module.h"

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zerocheck {

// Builds the user's optimizer over the given parameters (the same kind and options on both sides).
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// Returns a factory for Adam with learning rate `lr` (torch's other defaults).
OptimizerFactory adam_factory(double lr);
// Returns a factory for SGD with learning rate `lr` and momentum `momentum`.
OptimizerFactory sgd_factory(double lr, double momentum);

// One rank's micro-batch.
struct Batch {
  at::Tensor input;
  at::Tensor target;
};

// Returns the loss zerocheck trains with (mean squared error, in fp32 for a bf16 or fp16 output), for
// the engine side and the twin.
at::Tensor training_loss(const at::Tensor& output, const at::Tensor& target);

// Returns every parameter of the tree once, with the path of its first appearance ("0.weight").
std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters(const std::shared_ptr<zero3::Module>& root);

// Returns the parameters of the tree that require a gradient, each once: what a user's
// optimizer over the model holds.
std::vector<at::Tensor> trainable_parameters(const zero3::Module& root);

}  // namespace zerocheck
