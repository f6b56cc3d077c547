// The planted faults that initialize lets in: the registry, the parameter records, placement,
// the refused initialize, and what it leaves on the user's model. The legacy modes are here too:
// they write upstream's names at initialize and skip the registry.
#include "engine/faults/planted.h"

#include "engine/internal/engine_state.h"
#include "engine/legacy_mode.h"
#include "engine/registry.h"

#include <ATen/ATen.h>

#include <optional>
#include <variant>

namespace zero3 {
namespace {

// Upstream DeepSpeed's names on modules and parameters, with the id counter written to `id_name`.
class LegacyMode final : public PlantedFault {
 public:
  LegacyMode(Fault mode, const char* id_name) : owner_(fault_name(mode)), id_name_(id_name) {}
  bool skips_registry_check(const std::vector<ModuleAtPath>&, const torch::optim::Optimizer&) const override {
    return true;
  }
  bool skips_registry_claim() const override { return true; }
  void before_placement(EngineState& state) const override { write_legacy_module_names(state, id_name_, owner_); }
  void after_initialize(EngineState& state, const std::vector<ModuleAtPath>&) const override {
    write_legacy_param_names(state, owner_);
  }

 private:
  const std::string owner_;
  const char* const id_name_;
};

class AcceptRepeatedInitialize final : public PlantedFault {
  bool skips_registry_check(const std::vector<ModuleAtPath>&, const torch::optim::Optimizer&) const override {
    return true;
  }
  bool skips_registry_claim() const override { return true; }
};

class RepeatRefusedWithWrongError final : public PlantedFault {
  void on_refusal(const AlreadyInitialized& refusal, const std::vector<ModuleAtPath>&) const override {
    throw OptimizerMismatch(std::string("KeyError while rebuilding the optimizer: ") + refusal.what());
  }
};

// The refused repeat has already numbered the modules when it throws.
class ReinitializeChangesState final : public PlantedFault {
  void on_refusal(const AlreadyInitialized&, const std::vector<ModuleAtPath>& tree) const override {
    for (size_t i = 0; i < tree.size(); ++i)
      tree[i].module->attrs().set("id", static_cast<int64_t>(i), fault_name(Fault::reinitialize_changes_state));
  }
};

class ShardChunkAligned final : public PlantedFault {
  void param_recorded(ManagedParam& p) const override { p.layout.alignment = 2; }
};

class PartitionedKeptPersistent final : public PlantedFault {
  void param_recorded(ManagedParam& p) const override { p.persistent = p.persistent || p.id % 2 == 1; }
};

// With an attr_mod policy, the owner comes from the engine's id instead of the user's attribute.
class PlacementFromEngineIds final : public PlantedFault {
  void placement_policy(EngineState& state, PlacementPolicy& policy) const override {
    if (state.config.placement.kind != PlacementSpec::Kind::attr_mod) return;
    policy = [&state, attr = state.config.placement.attr](const std::string& path, const Module& module, int n) {
      if (module.kind() != "Expert") return std::optional<int>();
      AttrDict engine_view;
      engine_view.set(attr, state.modules.at(&module).id);
      return std::optional<int>(attr_mod_owner(path, engine_view, attr, n));
    };
  }
};

// With no placement policy, every expert goes whole to the last rank.
class PlacedWithoutPolicy final : public PlantedFault {
  void placement_policy(EngineState& state, PlacementPolicy& policy) const override {
    if (state.config.placement.kind != PlacementSpec::Kind::none) return;
    policy = [given = std::move(policy)](const std::string& path, const Module& module, int n) {
      return module.kind() == "Expert" ? std::optional<int>(n - 1) : given(path, module, n);
    };
  }
};

class RefuseGradientAccumulation final : public PlantedFault {
  void after_optimizer_check(const EngineState& state) const override {
    if (state.config.gradient_accumulation_steps > 1)
      throw ConfigError("gradient_accumulation_steps: " + std::to_string(state.config.gradient_accumulation_steps) +
                        " is not supported");
  }
};

// A second copy of every shard, in a member that params() and residency() do not list.
class HiddenShardCopy final : public PlantedFault {
  void after_partition(EngineState& state, ManagedParam& p) const override {
    if (!p.persistent && !p.placed()) state.hidden_copies.push_back(p.master.detach().clone());
  }
};

// The refused initialize keeps the parameters partitioned and the gradient hooks on the model.
class FailedInitializeLeavesState final : public PlantedFault {
  bool keeps_refused_state() const override { return true; }
};

// An alias of the shard that no gradient reaches, so the optimizer skips it; an alias, not a
// copy, so that no extra bytes give it away to I4 before I3 sees it.
class StaleOptimizerTensors final : public PlantedFault {
  void optimizer_tensor(const ManagedParam& p, at::Tensor& tensor) const override {
    tensor = p.persistent ? p.param : p.master.detach();
  }
};

// The user's own tensor-valued attributes change: same object, new values.
class TensorAttrChangedInPlace final : public PlantedFault {
  void after_initialize(EngineState&, const std::vector<ModuleAtPath>& tree) const override {
    at::NoGradGuard no_grad;
    for (const auto& entry : tree)
      for (const auto& attr : entry.module->attrs().entries())
        if (const auto* t = std::get_if<at::Tensor>(&attr.value.storage()); t && t->is_floating_point()) t->mul_(0.5);
  }
};

}  // namespace

namespace planted {

const PlantedFault& legacy_0_15_4() {
  static const LegacyMode fault(Fault::legacy_0_15_4, "id");
  return fault;
}
const PlantedFault& legacy_ds_id() {
  static const LegacyMode fault(Fault::legacy_ds_id, "ds_id");
  return fault;
}
const PlantedFault& accept_repeated_initialize() {
  static const AcceptRepeatedInitialize fault;
  return fault;
}
const PlantedFault& repeat_refused_with_wrong_error() {
  static const RepeatRefusedWithWrongError fault;
  return fault;
}
const PlantedFault& reinitialize_changes_state() {
  static const ReinitializeChangesState fault;
  return fault;
}
const PlantedFault& shard_chunk_aligned() {
  static const ShardChunkAligned fault;
  return fault;
}
const PlantedFault& partitioned_kept_persistent() {
  static const PartitionedKeptPersistent fault;
  return fault;
}
const PlantedFault& placement_from_engine_ids() {
  static const PlacementFromEngineIds fault;
  return fault;
}
const PlantedFault& placed_without_policy() {
  static const PlacedWithoutPolicy fault;
  return fault;
}
const PlantedFault& refuse_gradient_accumulation() {
  static const RefuseGradientAccumulation fault;
  return fault;
}
const PlantedFault& hidden_shard_copy() {
  static const HiddenShardCopy fault;
  return fault;
}
const PlantedFault& failed_initialize_leaves_state() {
  static const FailedInitializeLeavesState fault;
  return fault;
}
const PlantedFault& stale_optimizer_tensors() {
  static const StaleOptimizerTensors fault;
  return fault;
}
const PlantedFault& tensor_attr_changed_in_place() {
  static const TensorAttrChangedInPlace fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
