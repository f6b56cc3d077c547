#include "engine/legacy_mode.h"

#include "engine/internal/engine_state.h"
#include "engine/upstream_names.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <string>

namespace zero3 {
namespace {

struct LegacyCounters {
  std::mutex mutex;
  std::map<int, int64_t> module_count;  // upstream's `count=[0]`, one per rank "process"
  std::map<int, int64_t> param_count;
};

LegacyCounters& counters() {
  static LegacyCounters instance;
  return instance;
}

// Upstream's _register_hooks_recursively: my_count = count[0]; module.id = my_count; for each
// child: count[0] += 1, recurse.
void number_modules(Module& module, int64_t& count, const char* id_name, const std::string& owner) {
  module.attrs().set(id_name, AttrValue(count), owner);
  for (auto& [name, child] : module.named_zero3_children()) {
    count += 1;
    number_modules(*child, count, id_name, owner);
  }
}

void write_module_names(Module& module, bool is_root, const char* id_name,
                        const std::string& owner) {
  static const char* const kNames[] = {
#define ZERO3_NAME(n) n,
      ZERO3_UPSTREAM_MODULE_NAMES(ZERO3_NAME)
#undef ZERO3_NAME
  };
  for (const char* name : kNames) {
    const std::string n(name);
    if (n == "id" || n == "ds_id") continue;  // the counter owns these
    if (n == "ds_inflight_param_registry" && !is_root) continue;
    module.attrs().set(n, n == "ds_grads_remaining" || n == "applied_pre_backward_ref_cnt"
                              ? AttrValue(int64_t{0})
                              : AttrValue(),
                       owner);
  }
}

void write_param_names(ManagedParam& p, Module& owner_module, const std::string& local_name,
                       int64_t param_id, int rank, const std::string& owner) {
  AttrDict& attrs = owner_module.param_attrs(local_name);
  AttrValue::List shape;
  for (int64_t d : p.shape) shape.emplace_back(d);
  static const char* const kNames[] = {
#define ZERO3_NAME(n) n,
      ZERO3_UPSTREAM_PARAM_NAMES(ZERO3_NAME)
#undef ZERO3_NAME
  };
  for (const char* name : kNames) {
    const std::string n(name);
    AttrValue value;
    if (n == "ds_id") value = AttrValue(param_id);
    else if (n == "ds_status") value = AttrValue(to_string(p.status));
    else if (n == "ds_shape") value = AttrValue(shape);
    else if (n == "ds_numel") value = AttrValue(p.layout.numel);
    else if (n == "ds_numel_aligned" || n == "aligned_size") value = AttrValue(p.layout.padded_numel());
    else if (n == "ds_tensor") value = AttrValue(p.shard.detach());
    else if (n == "ds_persist") value = AttrValue(p.persistent);
    else if (n == "ds_zero_partition_rank") value = AttrValue(int64_t{rank});
    else if (n == "partition_numel") value = AttrValue(p.layout.chunk());
    else if (n == "padding_size") value = AttrValue(p.layout.padded_numel() - p.layout.numel);
    else if (n == "is_external_param") value = AttrValue(false);
    attrs.set(n, std::move(value), owner);
  }
}

}  // namespace

void write_legacy_module_names(EngineState& state, const char* id_name, const std::string& owner) {
  LegacyCounters& c = counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  number_modules(*state.model, c.module_count[state.comm.rank()], id_name, owner);
  for (const auto& entry : unique_modules(state.model))
    write_module_names(*entry.module, entry.path.empty(), id_name, owner);
}

void write_legacy_param_names(EngineState& state, const std::string& owner) {
  const int rank = state.comm.rank();
  LegacyCounters& c = counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (const auto& entry : unique_modules(state.model)) {
    for (const auto& item : entry.module->own_parameters()) {
      ManagedParam* p = state.param_by_impl.at(item.second.unsafeGetTensorImpl());
      write_param_names(*p, *entry.module, item.first, c.param_count[rank]++, rank, owner);
    }
  }
}

void reset_legacy_counters() {
  LegacyCounters& c = counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.module_count.clear();
  c.param_count.clear();
}

}  // namespace zero3
