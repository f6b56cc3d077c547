// The fault catalogue: named, deliberately planted faults, off by default.
//
// zerocheck proves that each oracle can fail by running the harness against the engine with one
// of these switched on: every entry must be caught, by the invariant the table names. The
// legacy modes reproduce upstream DeepSpeed's behaviour (see docs/DESIGN.md); the others are
// single faults. This table is the only list: the CLI's --engine choices and `zerocheck mutants`
// are generated from it, and the docs check holds docs/faults.md's lists to it. The engine
// reaches a fault only through the seams of engine/fault_seams.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

// X(identifier, cli name, invariant whose oracle must catch it, the test that must catch it,
//   text that test must print when it fails, description)
// The test is "binary:GoogleTest filter"; tests/fault_kill_test.cc runs it with the fault on
// (ZEROCHECK_FAULT=<cli name>) and expects it to fail printing the text, and with the fault off
// and expects a pass. `zerocheck mutants` counts a fault as killed only by its invariant.
#define ZERO3_FAULTS(X) \
  X(legacy_0_15_4, "legacy-0.15.4", "I1", "engine_integration_tests:UserAttributes.*", "now[i].get(entry.name) == entry.value", "DeepSpeed 0.15.4: writes module.id from a process-global pre-order counter that survives initialize calls, writes ds_* names on modules and parameters, no registry") \
  X(legacy_ds_id, "legacy-ds-id", "I1", "engine_integration_tests:UserAttributes.*", "now[i].get(entry.name) == entry.value", "upstream after the rename: the same global counter written to ds_id, ds_* names written, no registry") \
  X(skip_release_after_forward, "skip-release-after-forward", "I4", "engine_integration_tests:Lifecycle.FullDataOnlyWhileTheModuleRuns", "p.param.numel()", "a module's gathered parameters are not released after its forward") \
  X(shard_offset_off_by_one, "shard-offset-off-by-one", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/odd_world3", "I3 violated", "each rank's shard is cut one element late when parameters are partitioned") \
  X(wrong_gradient_divisor, "wrong-gradient-divisor", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/mlp_world2", "I3 violated", "reduced gradients are divided by N+1 instead of the world size N") \
  X(uninitialised_padding, "uninitialised-padding", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/odd_world4", "I3 violated", "shard padding is left with garbage instead of zeros, as upstream allocates it") \
  X(placement_from_engine_ids, "placement-from-engine-ids", "I2", "engine_integration_tests:Placement.ResidencyFollowsTheUsersAttributes", "here.param_elements", "expert placement is computed from engine module ids instead of the user's attributes") \
  X(accept_repeated_initialize, "accept-repeated-initialize", "I5", "engine_integration_tests:Registry.SameModelTwiceIsRejected", "a second initialize of the same model was accepted", "initialize on an already managed model or optimizer is silently accepted") \
  X(reinitialize_changes_state, "reinitialize-changes-state", "I5", "engine_integration_tests:Registry.RejectedInitializeLeavesTheFirstEngineTraining", "model->attrs() == user_attrs", "a rejected repeated initialize has already numbered the modules (writes `id`) when it throws") \
  X(stale_optimizer_tensors, "stale-optimizer-tensors", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/moe_world2", "I3 violated", "the optimizer steps over stale aliases of the fp32 shards that no gradient reaches") \
  X(reduce_scatter_wrong_shard, "reduce-scatter-wrong-shard", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/mlp_world3", "I3 violated", "the gradient reduce-scatter delivers the next rank's shard") \
  X(consolidated_from_rank0_shard, "consolidated-from-rank0-shard", "I6", "engine_integration_tests:Checkpoint.ConsolidatedStateDictEqualsTheModelAsBuilt", "consolidated.at(path)", "the consolidated state dict is built from rank 0's shard, other ranks' slices left zero") \
  X(consolidated_lists_shared_once, "consolidated-lists-shared-once", "I6", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.ConsolidatedListsSharedOnce", "I6 violated", "the consolidated state dict lists a module used at two places under its first place only (as DeepSpeed's 16-bit consolidation does): the model's own load_state_dict refuses it") \
  X(checkpoint_drops_optimizer_state, "checkpoint-drops-optimizer-state", "I6", "engine_integration_tests:Checkpoint.SaveLoadRestoresShardsAndOptimizerBitExactly", "zerocheck::train_step(*engine, spec, 9, s, comm.rank())", "a sharded checkpoint is written without the optimizer state") \
  X(partitioned_kept_persistent, "partitioned-kept-persistent", "I4", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.PartitionedKeptPersistent", "I4 violated", "every other parameter above the persistence threshold is kept whole and reported persistent: it trains exactly and holds N times its share") \
  X(placed_without_policy, "placed-without-policy", "I2", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.PlacedWithoutPolicy", "I2 violated", "with no placement policy, every expert is placed whole on the last rank anyway") \
  X(tensor_attr_changed_in_place, "tensor-attr-changed-in-place", "I1", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.TensorAttrChangedInPlace", "I1 violated", "initialize halves the user's tensor-valued module attributes in place: same object, new values") \
  X(shard_chunk_aligned, "shard-chunk-aligned", "I4", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.ShardChunkAligned", "I4 violated", "shards are cut with the chunk rounded up to a multiple of 2 and the engine reports that layout: every rank holds extra padding") \
  X(grad_shard_overallocated, "grad-shard-overallocated", "I4", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.GradShardOverallocated", "I4 violated", "the shard gradient is a c-element view of the c*N reduce buffer: the full gradient's storage stays allocated") \
  X(extra_collective_per_step, "extra-collective-per-step", "I8", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.ExtraCollectivePerStep", "I8 violated", "every backward all-reduces one extra element (a stray global check)") \
  X(bucket_flushed_one_gradient_early, "bucket-flushed-one-gradient-early", "I8", "harness_oracle_tests:CaughtOnlyByI8.BucketFlushedOneGradientEarly", "I8 violated", "the gradient bucket is flushed one gradient early: a bucket holding two or more gradients reduce-scatters the last to join it alone, after the others (the same sums, one reduce-scatter more)") \
  X(fetch_gathers_last_parameter_alone, "fetch-gathers-last-parameter-alone", "I8", "harness_oracle_tests:CaughtOnlyByI8.FetchGathersLastParameterAlone", "I8 violated", "a module fetch of two or more partitioned parameters all-gathers the last (by id) alone, after the others, instead of all of them in one coalesced all-gather (the same bits, one all-gather more)") \
  X(placed_copies_kept, "placed-copies-kept", "I2", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.PlacedCopiesKept", "I2 violated", "ranks other than a placed module's owner keep their full copy of its parameters (unused, never freed)") \
  X(repeat_refused_with_wrong_error, "repeat-refused-with-wrong-error", "I5", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.RepeatRefusedWithWrongError", "I5 violated", "a repeated initialize is refused with OptimizerMismatch (upstream: a KeyError) instead of AlreadyInitialized") \
  X(refuse_gradient_accumulation, "refuse-gradient-accumulation", "I7", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.RefuseGradientAccumulation", "I7 violated", "initialize raises ConfigError for a valid config with gradient_accumulation_steps > 1") \
  X(reshard_offset_off_by_one, "reshard-offset-off-by-one", "I6", "harness_oracle_tests:ReshardOnLoad.*", "I6 violated", "loading a checkpoint saved by another world size cuts each rank's shard (and its optimizer state) one element late: a load into the saving world is exact") \
  X(hidden_shard_copy, "hidden-shard-copy", "I4", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.HiddenShardCopy", "I4 violated", "initialize keeps a second copy of every shard in a member that params() and residency() do not list: each rank holds its share twice, and only a measurement of what the rank allocated sees it") \
  X(nan_after_step, "nan-after-step", "I3", "harness_parity_tests:ModelsAndWorlds/Parity.*/mlp_world2", "I3 violated", "every optimizer step leaves the first element of rank 0's first partitioned shard NaN: training goes on, and a comparison that drops NaN sees nothing") \
  X(load_ignores_tag, "load-ignores-tag", "I6", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.LoadIgnoresTag", "I6 violated", "a tagged load reads the checkpoint the folder's latest names, whatever tag it was given") \
  X(gathered_edit_not_published, "gathered-edit-not-published", "I3", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.GatheredEditNotPublished", "I3 violated", "a gather's publish_edits() writes each rank's own gathered copy into its shard instead of the modifier rank's broadcast: the edit lives on the modifier rank's shard only") \
  X(failed_initialize_leaves_state, "failed-initialize-leaves-state", "I5", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.FailedInitializeLeavesState", "I5 violated", "an initialize refused for its config after partitioning leaves the parameters partitioned and the gradient hooks on the model") \
  X(step_count_skipped_on_one_rank, "step-count-skipped-on-one-rank", "I9", "harness_oracle_tests:CaughtOnlyByTheSplitOracles.StepCountSkippedOnOneRank", "I9 violated", "without overflow protection (I11 compares the applied steps there), the last rank does not count its first optimizer step: every number stays right, but that rank's step counter (what a learning-rate schedule reads) is one behind the others'") \
  X(norm_squared_without_contiguous_gradients, "norm-squared-without-contiguous-gradients", "I10", "harness_oracle_tests:CaughtOnlyByI10.NormSquaredWithoutContiguousGradients", "I10 violated", "without overflow protection (I11 compares the reported norm there), with contiguous_gradients off, global_grad_norm() reports the squared gradient norm (it has one where gradient_clipping is set): the weights stay right, and only turning a knob that promises to trade memory alone shows a reported number move") \
  X(copy_back_truncates, "copy-back-truncates", "I3", "harness_oracle_tests:CaughtByBf16Parity.CopyBackTruncates", "I3 violated", "with bf16 parameters, the copy of the stepped fp32 master back into the bf16 shard truncates (drops the low 16 bits) instead of rounding to nearest even: the masters stay right, and the next forward computes with weights up to one bf16 ulp off toward zero") \
  X(overflow_flag_not_all_reduced, "overflow-flag-not-all-reduced", "I11", "harness_oracle_tests:CaughtByI11.OverflowFlagNotAllReduced", "I11 violated", "with overflow protection, each rank decides whether a step overflowed from its own share of the gradient norm, not the all-reduced one: a NaN in one rank's slice skips the step there while the other ranks apply it") \
  X(scale_doubled_one_step_early, "scale-doubled-one-step-early", "I11", "harness_oracle_tests:CaughtByI11.ScaleDoubledOneStepEarly", "I11 violated", "with a dynamic loss scale and a loss_scale_window above 1, the scale doubles one clean step early (after window - 1 clean steps, and again every window - 1)") \
  X(prefetch_released_early, "prefetch-released-early", "I3", "engine_integration_tests:Knobs.PrefetchAndLimitsMoveNoBit", "prefetch or limits moved a bit", "a prefetched parameter's gathered buffer is handed back (zeroed) before its module runs while it still reads as available: the module computes with zeros (same collectives, other numbers)") \
  X(live_limit_ignored, "live-limit-ignored", "I4", "engine_integration_tests:Knobs.LiveLimitStopsThePrefetch", "the prefetch went past stage3_max_live_parameters", "the prefetch reads no stage3_max_live_parameters: it gathers up to stage3_prefetch_bucket_size whatever is gathered already, so a rank holds more gathered parameters at once than the limit allows") \
  X(sub_group_stepped_twice, "sub-group-stepped-twice", "I3", "engine_integration_tests:SubGroups.StepLikeOneGroup", "sub-groups moved a bit", "the optimizer steps the last of two or more sub-groups of the flat fp32 partition twice") \
  X(sub_group_skipped, "sub-group-skipped", "I3", "engine_integration_tests:SubGroups.StepLikeOneGroup", "sub-groups moved a bit", "the optimizer skips the first of two or more sub-groups of the flat fp32 partition: those parameters do not move") \
  X(overflow_norm_reported_as_sentinel, "overflow-norm-reported-as-sentinel", "I11", "harness_oracle_tests:CaughtOnlyByI11.OverflowNormReportedAsSentinel", "I11 violated", "with overflow protection, a skipped step reports its gradient norm as -1 (DeepSpeed master's sentinel) instead of a non-finite number: the skip, the scale and every weight are right, only the report lies") \
  X(fp16_clip_of_scaled_norm, "fp16-clip-of-scaled-norm", "I3", "harness_oracle_tests:CaughtByFp16Parity.ClipOfScaledNorm", "I3 violated", "with fp16 parameters, gradient_clipping set and a loss scale above 1, the clip coefficient is computed from the scaled gradient norm (the loss scale not divided out before the clip): every clip binds S times harder, the reported norm and the skip decisions stay right")

// Deep faults: each bites only when three or more conditions hold together (its description
// starts with them), all within the random draw's reach (world <= 4, <= 12 nodes), as real bugs
// hide behind a conjunction. They measure what a fuzzing campaign finds that a glance does not:
// no seed of fuzz/corpus/scenario_ops is required to kill them, and `mutants` gives them their
// own time budget (--time-per-deep-fault). Same columns as ZERO3_FAULTS.
#define ZERO3_DEEP_FAULTS(X) \
  X(tied_expert_world3, "tied-expert-world3", "I3", "harness_oracle_tests:DeepFaults.TiedExpertWorld3", "I3 violated", "only at world size 3, only for a partitioned parameter of an expert that its MoE lists twice (tied), only once a backward reaches it: its reduced gradient is divided by 4 instead of 3") \
  X(frozen_reshard_rotated, "frozen-reshard-rotated", "I6", "harness_oracle_tests:DeepFaults.FrozenReshardRotated", "I6 violated", "only on a load that resumes a checkpoint on more ranks than saved it, only for a frozen parameter, only when it is partitioned and has more than one element: its shard is cut from the saved tensor rotated by one element") \
  X(third_step_after_refusal, "third-step-after-refusal", "I3", "harness_oracle_tests:DeepFaults.ThirdStepAfterRefusal", "I3 violated", "only after a repeated initialize was refused, only when that initialize targeted a submodule (not the root), only at the third optimizer step of the live engine after it: that step is counted but not applied") \
  X(fresh_optimizer_zero_size_repeat, "fresh-optimizer-zero-size-repeat", "I5", "harness_oracle_tests:DeepFaults.FreshOptimizerZeroSizeRepeat", "I5 violated", "only for a repeated initialize, only with a fresh optimizer that is Adam (not AdamW or SGD), only when its target holds a zero-size parameter, only once the live engine has applied a step: the registry is not asked, and the repeat is accepted") \
  X(accumulation_boundary_on_load, "accumulation-boundary-on-load", "I6", "harness_oracle_tests:DeepFaults.AccumulationBoundaryOnLoad", "I6 violated", "only with gradient_accumulation_steps > 1, only for a checkpoint saved between two accumulation boundaries, only on a load that restores the step counters (not module_only): the step() calls are restored rounded down to the last boundary") \
  X(module_only_load_resets_adam, "module-only-load-resets-adam", "I6", "harness_oracle_tests:DeepFaults.ModuleOnlyLoadResetsAdam", "I6 violated", "only on a module_only load, only with Adam, only in a world of 3 or more ranks, only after two or more optimizer steps: the first moments are zeroed (the matrix says the optimizer state stays as before)") \
  X(zero_grad_mid_accumulation, "zero-grad-mid-accumulation", "I9", "harness_oracle_tests:DeepFaults.ZeroGradMidAccumulation", "I9 violated", "only with gradient_accumulation_steps > 1, only for a zero_grad between two accumulation boundaries, only on the last rank of a world of 2 or more: that rank's step() count drops back to the boundary, so the ranks no longer agree on when to step") \
  X(frozen_tied_kept_gathered, "frozen-tied-kept-gathered", "I4", "harness_oracle_tests:DeepFaults.FrozenTiedKeptGathered", "I4 violated", "only for a frozen parameter, only of a module used at two places (tied), only when it is partitioned: after a backward it is not released and stays gathered whole") \
  X(persistent_edit_from_rank0, "persistent-edit-from-rank0", "I3", "harness_oracle_tests:DeepFaults.PersistentEditFromRank0", "I3 violated", "only for a gather with a modifier rank other than 0, only for a persistent parameter of the gathered module, only in a world of 3 or more ranks: the edit is broadcast from rank 0, which did not make it") \
  X(clip_from_rank_norm, "clip-from-rank-norm", "I3", "harness_oracle_tests:DeepFaults.ClipFromRankNorm", "I3 violated", "only with gradient_clipping set, only in a world of 2 or more ranks, only at a step where the clip binds: each rank computes its clip coefficient from its own share of the gradient norm, not the all-reduced one (which it still reports): the ranks clip their slices by different factors")

enum class Fault {
  none,
#define ZERO3_FAULT_ENUM(id, name, invariant, killer, kill_text, doc) id,
  ZERO3_FAULTS(ZERO3_FAULT_ENUM)
  ZERO3_DEEP_FAULTS(ZERO3_FAULT_ENUM)
#undef ZERO3_FAULT_ENUM
};

struct FaultInfo {
  Fault fault;
  std::string_view name;       // the CLI name, e.g. "legacy-0.15.4"
  std::string_view invariant;  // "I1".."I9"
  std::string_view killer;     // "test binary:GoogleTest filter" that must catch it
  std::string_view kill_text;  // what the killer prints when it catches the fault
  std::string_view description;  // a deep fault's starts with its conditions
  bool deep = false;             // from ZERO3_DEEP_FAULTS
  // Bites only under fp16 (its CLI name starts with "fp16-"): `mutants` draws fp16 for it, and
  // where this LibTorch has no fp16 Linear on CPU (fp16_probe.h) it is not runnable: `mutants`
  // and fault_kill_tests report it so, never as killed or survived.
  bool fp16 = false;
};

// Returns every catalogue entry, in table order, the deep faults last (Fault::none excluded).
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
