// observe(): each parameter's tensors as they are, storage measured rather than reported.
#include "harness/oracles/observation.h"

#include "engine/optimizer_rebuild.h"

#include <unordered_set>

namespace zerocheck::oracles {
namespace {

int64_t storage_bytes(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.has_storage() && b.has_storage() &&
         a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

std::vector<ObservedParam> observe(zero3::Engine& engine, bool held_tensors) {
  std::vector<ObservedParam> out;
  const auto views = engine.params();
  out.reserve(views.size());
  torch::optim::Optimizer& optimizer = engine.optimizer();
  for (const auto& v : views) {
    ObservedParam o;
    o.path = v.path;
    o.reported_owner = v.owner;
    o.reported_persistent = v.persistent;
    o.param_elements = v.param.numel();
    o.param_bytes = storage_bytes(v.param);
    o.master_bytes = same_storage(v.master, v.param) ? 0 : storage_bytes(v.master);
    o.shard_bytes = same_storage(v.shard, v.master) || same_storage(v.shard, v.param) ? 0 : storage_bytes(v.shard);
    o.grad_shard_bytes = storage_bytes(v.grad_shard);
    const at::Tensor full_grad = v.param.grad();
    o.full_grad_bytes = same_storage(full_grad, v.grad_shard) ? 0 : storage_bytes(full_grad);
    if (held_tensors) {
      o.held = {v.param, v.master, v.shard, v.grad_shard, full_grad};
      for (auto& [name, state] : zero3::named_state_tensors_of(optimizer, v.master)) {
        o.optimizer_elements += state.numel();
        o.held.push_back(state);
      }
    } else {
      o.optimizer_elements = zero3::state_numel_of(optimizer, v.master);
    }
    o.master = v.master;
    out.push_back(std::move(o));
  }
  return out;
}

int64_t accounted_bytes(const std::vector<ObservedParam>& observed, const std::vector<at::Tensor>& also) {
  int64_t bytes = 0;
  std::unordered_set<const c10::StorageImpl*> counted;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage() || !t.device().is_cpu()) return;
    if (counted.insert(t.storage().unsafeGetStorageImpl()).second) bytes += storage_bytes(t);
  };
  for (const auto& o : observed)
    for (const auto& t : o.held) add(t);
  for (const auto& t : also) add(t);
  return bytes;
}

int64_t measured_state_bytes(zero3::Engine& engine) {
  int64_t bytes = 0;
  for (const auto& o : observe(engine))
    bytes += o.param_bytes + o.master_bytes + o.shard_bytes + o.grad_shard_bytes + o.full_grad_bytes +
             o.optimizer_elements * 4;
  return bytes;
}

}  // namespace zerocheck::oracles
