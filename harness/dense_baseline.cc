#include "harness/dense_baseline.h"

#include "harness/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <unordered_set>

namespace zerocheck {

OptimizerFactory adam_factory(double lr) {
  return [lr](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(lr));
  };
}

OptimizerFactory sgd_factory(double lr, double momentum) {
  return [lr, momentum](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(std::move(params),
                                               torch::optim::SGDOptions(lr).momentum(momentum));
  };
}

at::Tensor training_loss(const at::Tensor& output, const at::Tensor& target) {
  return at::mse_loss(output, target);
}

std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters(
    const std::shared_ptr<zero3::Module>& root) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& [path, module] : zero3::unique_modules(root))
    for (const auto& item : module->own_parameters())
      if (seen.insert(item.second.unsafeGetTensorImpl()).second)
        out.emplace_back(path.empty() ? item.first : path + "." + item.first, item.second);
  return out;
}

DenseBaseline::DenseBaseline(std::shared_ptr<zero3::Module> model,
                             const OptimizerFactory& make_optimizer)
    : model_(std::move(model)) {
  for (const auto& p : zero3::unique_parameters(*model_))
    if (p.requires_grad()) params_.push_back(p);
  optimizer_ = make_optimizer(params_);
}

std::vector<double> DenseBaseline::step(const std::vector<Batch>& batches,
                                        const std::vector<zero3::Route>& routes) {
  use_sequential_kernels();  // the same split of every reduction as the ranks (world.h)
  {
    at::NoGradGuard no_grad;
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  std::vector<double> losses;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& batch = batches[i];
    zero3::Route cursor = routes.at(i);
    at::Tensor loss = training_loss((*model_)(batch.input, cursor), batch.target);
    loss.backward();
    losses.push_back(loss.item<double>());
  }
  {
    at::NoGradGuard no_grad;
    const auto world = static_cast<int64_t>(batches.size());
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().div_(world);
  }
  optimizer_->step();
  return losses;
}

std::map<std::string, at::Tensor> DenseBaseline::parameters_by_path() const {
  std::map<std::string, at::Tensor> out;
  for (auto& [path, tensor] : unique_named_parameters(model_)) out.emplace(path, tensor.detach());
  return out;
}

}  // namespace zerocheck
