#include "engine/sub_groups.h"

#include <unordered_set>

namespace zero3 {

std::vector<std::vector<const ManagedParam*>> sub_groups_of(const std::vector<std::unique_ptr<ManagedParam>>& params,
                                                            int64_t sub_group_size) {
  std::vector<const ManagedParam*> stepped;
  int64_t total = 0;
  for (const auto& p : params)
    if (p->trainable && p->master.defined()) {
      stepped.push_back(p.get());
      total += p->layout.chunk();
    }
  std::vector<std::vector<const ManagedParam*>> groups;
  if (stepped.empty()) return groups;
  if (sub_group_size >= total) return {stepped};
  std::vector<const ManagedParam*> group;
  int64_t size = 0;
  for (const ManagedParam* p : stepped) {
    group.push_back(p);
    size += p->layout.chunk();
    if (size >= sub_group_size || p == stepped.back()) {
      groups.push_back(std::move(group));
      group.clear();
      size = 0;
    }
  }
  return groups;
}

void step_sub_groups(torch::optim::Optimizer& optimizer, const std::vector<std::vector<const ManagedParam*>>& groups,
                     const FaultSeams& faults) {
  if (groups.size() <= 1) {
    int times = 1;
    faults.sub_group_steps(size_t{0}, groups.size(), times);
    for (int i = 0; i < times; ++i) optimizer.step();
    return;
  }
  std::vector<at::Tensor> tensors;
  for (auto& group : optimizer.param_groups())
    for (auto& t : group.params()) tensors.push_back(t);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::unordered_set<const c10::TensorImpl*> in_group;
    for (const ManagedParam* p : groups[g]) in_group.insert(p->master.unsafeGetTensorImpl());
    // Set the other sub-groups' gradients aside while this one steps.
    std::vector<std::pair<at::Tensor, at::Tensor>> aside;
    for (at::Tensor& t : tensors)
      if (!in_group.count(t.unsafeGetTensorImpl()) && t.grad().defined()) {
        aside.emplace_back(t, t.grad());
        t.mutable_grad() = at::Tensor();
      }
    int times = 1;
    faults.sub_group_steps(g, groups.size(), times);
    try {
      for (int i = 0; i < times; ++i) optimizer.step();
    } catch (...) {
      for (auto& [t, grad] : aside) t.mutable_grad() = grad;
      throw;
    }
    for (auto& [t, grad] : aside) t.mutable_grad() = grad;
  }
}

}  // namespace zero3
