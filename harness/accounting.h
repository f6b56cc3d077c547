// The exact yardsticks of shared/DESIGN.md, computed from the model's structure alone — never
// from the engine's own bookkeeping — so the engine's measured bytes and elements are checked
// against an independent prediction.
//
//  - state bytes per rank: Σ elements·4·(1 + grad + optimizer states) where elements is c =
//    ceil(n/N) for a partitioned parameter and n for a persistent one; frozen parameters and
//    parameters that never had a gradient keep only the parameter copy.
//  - elements moved per step: for each partitioned parameter, one all-gather of c·N per forward
//    call of its module, one re-gather before backward and one reduce-scatter when it is trained:
//    3·Σ c·N when every module runs once.
#pragma once

#include "engine/module.h"
#include "engine/placement.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace zerocheck {

// Counts calls per module while installed (an interceptor that gathers nothing).
class CallCounter final : public zero3::ForwardInterceptor {
 public:
  at::Tensor around_forward(zero3::Module& module, const at::Tensor& input, const zero3::Route& route,
                            const std::function<at::Tensor(const at::Tensor&)>& body) override;
  int64_t calls(const zero3::Module& module) const;
  void clear() { calls_.clear(); }

 private:
  std::unordered_map<const zero3::Module*, int64_t> calls_;
};

// The owner of every module of a placed subtree, from the user's policy applied to the user's
// attributes (the oracle's own evaluation, independent of the engine's tables).
using Owners = std::unordered_map<const zero3::Module*, int>;
Owners placement_owners(const std::shared_ptr<zero3::Module>& root, const zero3::PlacementSpec& spec,
                        int world_size);

// Returns the elements one training step moves in all-gathers and reduce-scatters, given how
// often each module ran in it (placed modules move nothing there: they are not partitioned).
int64_t expected_elements_per_step(const std::shared_ptr<zero3::Module>& root,
                                   const CallCounter& step_calls, int world_size,
                                   int64_t persistence_threshold, const Owners& owners);

// Returns `rank`'s model-state bytes after a step, given which modules have run so far, how
// many state tensors the optimizer keeps per parameter, and the placement (the owner holds a
// placed parameter whole, other ranks nothing).
int64_t expected_state_bytes(const std::shared_ptr<zero3::Module>& root,
                             const CallCounter& calls_so_far, int world_size, int rank,
                             int64_t persistence_threshold, int64_t optimizer_states,
                             const Owners& owners);

}  // namespace zerocheck
