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
                                       const zero3::Route&,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  ++calls_[&module];
  return body(input);
}

int64_t CallCounter::calls(const zero3::Module& module) const {
  auto it = calls_.find(&module);
  return it == calls_.end() ? 0 : it->second;
}

Owners placement_owners(const std::shared_ptr<zero3::Module>& root, const zero3::PlacementSpec& spec,
                        int world_size) {
  Owners owners;
  const auto policy = zero3::make_placement_policy(spec);
  std::function<void(const std::string&, const std::shared_ptr<zero3::Module>&, int)> visit =
      [&](const std::string& path, const std::shared_ptr<zero3::Module>& module, int inherited) {
        if (owners.count(module.get())) return;
        int owner = inherited;
        if (owner < 0)
          if (auto decided = policy(path, *module, world_size)) owner = *decided;
        owners[module.get()] = owner;
        for (const auto& [name, child] : module->named_zero3_children())
          visit(path.empty() ? name : path + "." + name, child, owner);
      };
  visit("", root, -1);
  return owners;
}

namespace {

int owner_of(const Owners& owners, const zero3::Module& module) {
  auto it = owners.find(&module);
  return it == owners.end() ? -1 : it->second;
}

}  // namespace

int64_t expected_elements_per_step(const std::shared_ptr<zero3::Module>& root,
                                   const CallCounter& step_calls, int world_size,
                                   int64_t persistence_threshold, const Owners& owners) {
  int64_t total = 0;
  for_each_owned_parameter(root, [&](const zero3::Module& owner, const at::Tensor& p) {
    if (p.numel() <= persistence_threshold || owner_of(owners, owner) >= 0) return;
    const int64_t calls = step_calls.calls(owner);
    const int64_t padded = zero3::ShardLayout::of(p.numel(), world_size).padded_numel();
    const int64_t backward = (calls > 0 && p.requires_grad()) ? 2 : 0;  // re-gather + reduce-scatter
    total += (calls + backward) * padded;
  });
  return total;
}

int64_t expected_state_bytes(const std::shared_ptr<zero3::Module>& root,
                             const CallCounter& calls_so_far, int world_size, int rank,
                             int64_t persistence_threshold, int64_t optimizer_states,
                             const Owners& owners) {
  int64_t bytes = 0;
  for_each_owned_parameter(root, [&](const zero3::Module& owner, const at::Tensor& p) {
    const int placed_on = owner_of(owners, owner);
    if (placed_on >= 0 && placed_on != rank) return;
    const auto layout = zero3::ShardLayout::of(p.numel(), world_size);
    const bool whole = placed_on >= 0 || p.numel() <= persistence_threshold;
    const int64_t elements = whole ? p.numel() : layout.chunk();
    const bool trained = p.requires_grad() && calls_so_far.calls(owner) > 0;
    bytes += elements * 4 * (1 + (trained ? 1 + optimizer_states : 0));
  });
  return bytes;
}

}  // namespace zerocheck
