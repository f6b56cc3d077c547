#include "engine/testing/training.h"

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
    return std::make_unique<torch::optim::SGD>(std::move(params), torch::optim::SGDOptions(lr).momentum(momentum));
  };
}

at::Tensor training_loss(const at::Tensor& output, const at::Tensor& target) {
  // A 16-bit (bf16 or fp16) output's loss is taken in fp32, as the upstream replay takes it
  // (F.mse_loss(out.float(), y)); its gradient flows back through the cast as bf16 or fp16.
  // LibTorch 1.13 has no bf16 mse_loss on CPU ("mse_cpu" not implemented for 'BFloat16'), and an
  // fp16 output against the fp32 target forwards in 2.6 (promoted) but its backward refuses the
  // mix (mse_loss_backward: "Found dtype Float but expected Half").
  if (output.scalar_type() == at::kBFloat16 || output.scalar_type() == at::kHalf)
    return at::mse_loss(output.to(at::kFloat), target.to(at::kFloat));
  return at::mse_loss(output, target);
}

std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters(const std::shared_ptr<zero3::Module>& root) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& [path, module] : zero3::unique_modules(root))
    for (const auto& item : module->own_parameters())
      if (seen.insert(item.second.unsafeGetTensorImpl()).second)
        out.emplace_back(path.empty() ? item.first : path + "." + item.first, item.second);
  return out;
}

std::vector<at::Tensor> trainable_parameters(const zero3::Module& root) {
  std::vector<at::Tensor> out;
  for (const auto& p : zero3::unique_parameters(root))
    if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace zerocheck
