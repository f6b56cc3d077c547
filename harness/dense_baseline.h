// DenseBaseline: the single-copy model that ZeRO-3 training must be indistinguishable from.
//
// One step runs every rank's micro-batch through the one model in rank order, letting autograd
// accumulate the gradients ((g0 + g1) + g2 ...), divides them by the world size, and steps the
// optimizer over whole tensors. The engine's reduce-scatter sums in the same rank order and
// divides the same way, so on CPU the two agree bit for bit (tolerance 0 is asserted).
#pragma once

#include "engine/module.h"
#include "harness/models.h"

#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zerocheck {

// Builds the user's optimizer over the given parameters (the same kind and options on both sides).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// Returns a factory for Adam with learning rate `lr`.
OptimizerFactory adam_factory(double lr);
// Returns a factory for SGD with learning rate `lr` and momentum `momentum`.
OptimizerFactory sgd_factory(double lr, double momentum);

class DenseBaseline {
 public:
  DenseBaseline(std::shared_ptr<zero3::Module> model, const OptimizerFactory& make_optimizer);

  // Trains one step on `batches` (one per rank, in rank order, each with its rank's route);
  // returns each batch's loss.
  std::vector<double> step(const std::vector<Batch>& batches, const std::vector<zero3::Route>& routes);

  // Returns every parameter once, by the path where it first appears ("0.weight").
  std::map<std::string, at::Tensor> parameters_by_path() const;
  zero3::Module& model() { return *model_; }

 private:
  std::shared_ptr<zero3::Module> model_;
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// Returns the loss zerocheck trains with (mean squared error), for the engine side too.
at::Tensor training_loss(const at::Tensor& output, const at::Tensor& target);

// Returns every parameter of the tree once, with the path of its first appearance.
std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters(
    const std::shared_ptr<zero3::Module>& root);

}  // namespace zerocheck
