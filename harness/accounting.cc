#include "harness/accounting.h"

#include "engine/shard_layout.h"

#include <unordered_set>

namespace zerocheck {
namespace {

// Calls `visit(module, parameter)` for every parameter once, with its owning module.
template <class Visit>
void for_each_owned_parameter(const std::shared_ptr<zero3::Module>& root, Visit&& visit) {
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& entry : zero3::unique_modules(root))
    for (const auto& p : entry.module->parameters(/*recurse=*/false))
      if (seen.insert(p.unsafeGetTensorImpl()).second) visit(*entry.module, p);
}

}  // namespace

at::Tensor CallCounter::around_forward(zero3::Module& module, const at::Tensor& input,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  ++calls_[&module];
  return body(input);
}

int64_t CallCounter::calls(const zero3::Module& module) const {
  auto it = calls_.find(&module);
  return it == calls_.end() ? 0 : it->second;
}

int64_t expected_elements_per_step(const std::shared_ptr<zero3::Module>& root,
                                   const CallCounter& step_calls, int world_size,
                                   int64_t persistence_threshold) {
  int64_t total = 0;
  for_each_owned_parameter(root, [&](const zero3::Module& owner, const at::Tensor& p) {
    if (p.numel() <= persistence_threshold) return;
    const int64_t calls = step_calls.calls(owner);
    const int64_t padded = zero3::ShardLayout::of(p.numel(), world_size).padded_numel();
    const int64_t backward = (calls > 0 && p.requires_grad()) ? 2 : 0;  // re-gather + reduce-scatter
    total += (calls + backward) * padded;
  });
  return total;
}

int64_t expected_state_bytes(const std::shared_ptr<zero3::Module>& root,
                             const CallCounter& calls_so_far, int world_size,
                             int64_t persistence_threshold, int64_t optimizer_states) {
  int64_t bytes = 0;
  for_each_owned_parameter(root, [&](const zero3::Module& owner, const at::Tensor& p) {
    const auto layout = zero3::ShardLayout::of(p.numel(), world_size);
    const int64_t elements = p.numel() <= persistence_threshold ? p.numel() : layout.chunk();
    const bool trained = p.requires_grad() && calls_so_far.calls(owner) > 0;
    bytes += elements * 4 * (1 + (trained ? 1 + optimizer_states : 0));
  });
  return bytes;
}

}  // namespace zerocheck
