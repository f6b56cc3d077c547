#include "engine/fp16_probe.h"

#include <torch/torch.h>

#include <exception>

namespace zero3 {
namespace {

// A one-row fp16 Linear forward (addmm) and its backward (two more matmuls), the operations
// every module of the engine's models runs; anything LibTorch throws is the answer.
std::string probe() {
  try {
    torch::AutoGradMode grad_on(true);
    const auto half = torch::TensorOptions().dtype(torch::kHalf);
    torch::Tensor weight = torch::ones({2, 2}, half).requires_grad_();
    torch::Tensor bias = torch::zeros({2}, half).requires_grad_();
    torch::Tensor input = torch::ones({1, 2}, half).requires_grad_();
    torch::linear(input, weight, bias).sum().backward();
    if (!weight.grad().defined() || weight.grad().scalar_type() != torch::kHalf)
      return "an fp16 Linear's backward gave no fp16 weight gradient";
    return "";
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

const std::string& cpu_fp16_refusal() {
  static const std::string refusal = probe();
  return refusal;
}

}  // namespace zero3
