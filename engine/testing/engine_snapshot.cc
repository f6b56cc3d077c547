#include "engine/testing/engine_snapshot.h"

#include "engine/optimizer_rebuild.h"

#include <cstring>

namespace zerocheck {

std::vector<at::Tensor> engine_state_snapshot(zero3::Engine& engine) {
  std::vector<at::Tensor> out;
  for (const auto& p : engine.params()) {
    out.push_back(p.master.detach().clone());
    at::Tensor state = zero3::state_tensors_of(engine.optimizer(), p.master);
    out.push_back(state.defined() ? state.clone() : at::zeros({0}));
  }
  for (auto& group : engine.optimizer().param_groups()) out.push_back(at::tensor(group.options().get_lr()));
  return out;
}

// Bits, not values: a load that succeeded earlier may have put a NaN in (a flipped byte in tensor
// data or a learning rate), and NaN != NaN would call an untouched engine changed.
bool same_engine_state(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type()) return false;
    const at::Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace zerocheck
