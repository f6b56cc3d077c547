// The module kinds zerocheck's trees are built from.
//
// Leaves own parameters: Linear, LayerNorm, Offset (a free-form parameter of any shape,
// including zero-size or prime numel, added as its sum); Tanh has none. Containers: Sequential
// and ModuleList run their items in order; Expert wraps one Linear; MoE routes its input to the
// expert the Route picks. Parameters start at zero: init_parameters() fills them from a seed, so
// every rank and the dense baseline build bit-identical models without a global RNG.
#pragma once

#include "engine/module.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zero3 {

class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  at::Tensor weight, bias;  // bias undefined when constructed without it

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;
};

class LayerNorm final : public Module {
 public:
  explicit LayerNorm(int64_t features);
  at::Tensor weight, bias;

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;

 private:
  int64_t features_;
};

class Tanh final : public Module {
 public:
  Tanh() : Module("Tanh") {}

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;
};

// y = x + sum(p): a parameter of arbitrary shape that still takes part in training.
class Offset final : public Module {
 public:
  explicit Offset(std::vector<int64_t> shape);
  at::Tensor value;

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;
};

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  // Appends `child` under the name of its position; the same child may be pushed twice (tied).
  void push_back(std::shared_ptr<Module> child);
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& at(size_t i) const { return items_.at(i); }

 protected:
  explicit Sequential(std::string kind) : Module(std::move(kind)) {}
  at::Tensor forward(const at::Tensor& input, Route& route) override;

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Like Python's nn.ModuleList, but callable (items in order) so every node of a tree can run.
class ModuleList final : public Sequential {
 public:
  ModuleList() : Sequential("ModuleList") {}
};

class Expert final : public Module {
 public:
  Expert(int64_t in_features, int64_t out_features);
  std::shared_ptr<Linear> linear;

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;
};

// Routes its input to experts[route.next()]. Requires: every expert maps features -> features.
class MoE final : public Module {
 public:
  explicit MoE(std::vector<std::shared_ptr<Module>> experts);
  std::shared_ptr<ModuleList> experts;

  // Calls expert `index` directly. Throws UsageError when index is out of range.
  at::Tensor forward_expert(const at::Tensor& input, int64_t index, Route& route);
  // Returns the expert index this layer will take from `route` (without consuming it).
  int64_t peek_choice(const Route& route) const;

 protected:
  at::Tensor forward(const at::Tensor& input, Route& route) override;
};

// Fills every parameter of the tree once (shared ones at their first path in pre-order) with the
// seeded values of its path (engine/seeded_values.h), in [-1, 1) / sqrt(fan-in). The same bits in
// every thread, process, LibTorch version and in the Python replay.
void init_parameters(Module& root, uint64_t seed);

}  // namespace zero3
