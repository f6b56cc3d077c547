// The fault catalogue: named, deliberately planted faults, off by default.
//
// zerocheck proves that each oracle can fail by running the harness against the engine with one
// of these switched on: every entry must be caught, by the invariant the table names. The
// legacy modes reproduce upstream DeepSpeed's behaviour (see shared/DESIGN.md); the others are
// single faults. This table is the only list: the CLI's --engine choices, `zerocheck mutants`
// and the docs are generated from it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

// X(identifier, cli name, invariant it breaks, the engine test that must catch it, description)
// The test is "binary:GoogleTest filter"; tests/fault_kill_test.cc runs it with the fault on
// (ZEROCHECK_FAULT=<cli name>) and expects it to fail, and with the fault off and expects a pass.
#define ZERO3_FAULTS(X)                                                                            \
  X(legacy_0_15_4, "legacy-0.15.4", "I1", "engine_integration_tests:UserAttributes.*",            \
    "DeepSpeed 0.15.4: writes module.id from a process-global pre-order counter that survives "    \
    "initialize calls, writes ds_* names on modules and parameters, no registry")                  \
  X(legacy_ds_id, "legacy-ds-id", "I1", "engine_integration_tests:UserAttributes.*",              \
    "upstream after the rename: the same global counter written to ds_id, ds_* names written, "    \
    "no registry")                                                                                 \
  X(skip_release_after_forward, "skip-release-after-forward", "I4",                                \
    "engine_integration_tests:Lifecycle.FullDataOnlyWhileTheModuleRuns",                           \
    "a module's gathered parameters are not released after its forward")                          \
  X(shard_offset_off_by_one, "shard-offset-off-by-one", "I3",                                      \
    "harness_parity_tests:ModelsAndWorlds/Parity.*/odd_world3",                                    \
    "each rank's shard is cut one element late when parameters are partitioned")                  \
  X(wrong_gradient_divisor, "wrong-gradient-divisor", "I3",                                        \
    "harness_parity_tests:ModelsAndWorlds/Parity.*/mlp_world2",                                    \
    "reduced gradients are divided by N+1 instead of the world size N")                            \
  X(uninitialised_padding, "uninitialised-padding", "I3",                                          \
    "harness_parity_tests:ModelsAndWorlds/Parity.*/odd_world4",                                    \
    "shard padding is left with garbage instead of zeros, as upstream allocates it")               \
  X(placement_from_engine_ids, "placement-from-engine-ids", "I2",                                  \
    "engine_integration_tests:Placement.ResidencyFollowsTheUsersAttributes",                       \
    "expert placement is computed from engine module ids instead of the user's attributes")        \
  X(accept_repeated_initialize, "accept-repeated-initialize", "I5",                                \
    "engine_integration_tests:Registry.SameModelTwiceIsRejected",                                  \
    "initialize on an already managed model or optimizer is silently accepted")                    \
  X(reinitialize_changes_state, "reinitialize-changes-state", "I5",                                \
    "engine_integration_tests:Registry.RejectedInitializeLeavesTheFirstEngineTraining",            \
    "a rejected repeated initialize has already numbered the modules (writes `id`) when it "      \
    "throws")                                                                                      \
  X(stale_optimizer_tensors, "stale-optimizer-tensors", "I3",                                      \
    "harness_parity_tests:ModelsAndWorlds/Parity.*/moe_world2",                                    \
    "the optimizer steps over stale copies instead of the fp32 shards")                            \
  X(reduce_scatter_wrong_shard, "reduce-scatter-wrong-shard", "I3",                                \
    "harness_parity_tests:ModelsAndWorlds/Parity.*/mlp_world3",                                    \
    "the gradient reduce-scatter delivers the next rank's shard")                                  \
  X(consolidated_from_rank0_shard, "consolidated-from-rank0-shard", "I6",                          \
    "engine_integration_tests:Checkpoint.ConsolidatedStateDictEqualsGatheredParameters",           \
    "the consolidated state dict is built from rank 0's shard, other ranks' slices left zero")     \
  X(checkpoint_drops_optimizer_state, "checkpoint-drops-optimizer-state", "I6",                    \
    "engine_integration_tests:Checkpoint.SaveLoadRestoresShardsAndOptimizerBitExactly",            \
    "a sharded checkpoint is written without the optimizer state")

enum class Fault {
  none,
#define ZERO3_FAULT_ENUM(id, name, invariant, killer, doc) id,
  ZERO3_FAULTS(ZERO3_FAULT_ENUM)
#undef ZERO3_FAULT_ENUM
};

struct FaultInfo {
  Fault fault;
  std::string_view name;       // the CLI name, e.g. "legacy-0.15.4"
  std::string_view invariant;  // "I1".."I7"
  std::string_view killer;     // "test binary:GoogleTest filter" that must catch it
  std::string_view description;
};

// Returns every catalogue entry, in table order (Fault::none excluded).
const std::vector<FaultInfo>& fault_catalogue();
// Returns the name of `fault` ("reference" for Fault::none).
std::string_view fault_name(Fault fault);
// Returns the fault named `name` ("reference" is Fault::none), or nothing for an unknown name.
std::optional<Fault> fault_by_name(std::string_view name);
// Returns the fault named `name`, or throws UsageError naming where the name came from
// (`given_as`, e.g. "--engine" or "ZEROCHECK_FAULT") and listing every engine name.
Fault engine_by_name(std::string_view name, std::string_view given_as);
// Returns "reference, legacy-0.15.4, ..." for usage messages.
std::string engine_names();

}  // namespace zero3
