// Fault seams: how a planted fault reaches into the engine without the engine knowing it.
//
// The catalogue (engine/faults.h, ZERO3_FAULTS and ZERO3_DEEP_FAULTS) names the faults; the seam
// table below, beside it, names the places where they reach the engine: each seam is one call
// at one place of the schedule, and the engine's code paths name no fault.
// PlantedFault has a virtual method per seam that does nothing; a fault's body (engine/faults/)
// is a PlantedFault that overrides the seams it needs. FaultSeams is what the engine holds and
// calls: for the reference engine it holds no fault, and every seam is a branch on a null
// pointer that returns false or leaves its arguments as they are.
//
// Thread safety: a PlantedFault is immutable and shared by every engine and rank; what a fault
// keeps per engine lives in EngineState.
#pragma once

#include "engine/errors.h"
#include "engine/faults.h"
#include "engine/module.h"
#include "engine/placement.h"
#include "engine/precision.h"

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

// The seams, in the order a scenario meets them: the only places where the engine lets a planted
// fault in. A seam that returns bool answers false, and one that takes a value by reference
// leaves it as it is, unless a fault says otherwise.
// X(result, seam, parameter types, where in the schedule it sits)
#define ZERO3_FAULT_SEAMS(X) \
  X(bool, skips_registry_check, (const std::vector<ModuleAtPath>& tree, const torch::optim::Optimizer& optimizer), "initialize, before it asks the registry whether the model or optimizer is managed already") \
  X(void, on_refusal, (const AlreadyInitialized& refusal, const std::vector<ModuleAtPath>& tree), "initialize, refused as a repeat by the registry: before the refusal is rethrown") \
  X(void, param_recorded, (ManagedParam& p), "initialize, once a parameter's layout and persistence are decided") \
  X(void, before_placement, (EngineState& state), "initialize, every module numbered, before the placement policy runs") \
  X(void, placement_policy, (EngineState& state, PlacementPolicy& policy), "initialize, the placement policy about to be evaluated") \
  X(void, after_placement, (EngineState& state), "initialize, once placement has decided what is partitioned") \
  X(void, scaler_options, (LossScalerOptions& options), "initialize, the loss scaler's options, before the scaler is made from them") \
  X(void, after_optimizer_check, (const EngineState& state), "initialize, the optimizer checked against the model, before anything changes") \
  X(void, after_partition, (EngineState& state, ManagedParam& p), "initialize, a parameter just partitioned") \
  X(bool, keeps_refused_state, (), "initialize, refused by config validation: true leaves the engine's changes on the model") \
  X(void, optimizer_tensor, (const ManagedParam& p, at::Tensor& tensor), "initialize, the tensor the rebuilt optimizer steps for a parameter") \
  X(void, after_initialize, (EngineState& state, const std::vector<ModuleAtPath>& tree), "initialize, the engine built, before the registry claims the model") \
  X(bool, skips_registry_claim, (), "initialize, the last step: true leaves the model and optimizer unclaimed") \
  X(bool, keeps_placed_copy, (), "partition, a parameter placed on another rank: true keeps its full data here") \
  X(void, shard_cut, (ManagedParam& p, int rank), "partition, this rank's slice just cut into the master") \
  X(void, shard_written, (ManagedParam& p, int rank), "wherever a shard is written: partition, step, publish_edits, load") \
  X(void, before_reduce_scatter, (const ManagedParam& p, at::Tensor& padded), "backward, the padded full gradient about to join the gradient bucket it is reduce-scattered with") \
  X(void, bucket_flush_split, (size_t held, size_t& first), "backward, a gradient bucket of `held` gradients flushed: how many of them, first to join, its reduce-scatter takes (all of them; the rest go in a second)") \
  X(void, reduce_buffer, (const ManagedParam& p, const at::Tensor& padded, at::Tensor& buffer), "backward, the buffer a partitioned gradient's chunk is copied into from its bucket's reduce-scatter (left undefined, the engine allocates its chunk)") \
  X(void, gradient_divisor, (const ManagedParam& p, int world, int& divisor), "backward, what a reduced gradient is divided by (the world size)") \
  X(void, fetch_split, (size_t fetched, size_t& first), "forward and backward, a module fetch of `fetched` parameters (sorted by id): how many of them, first, its all-gather takes (all of them; the rest go in a second)") \
  X(void, live_limit, (int64_t& max_live), "forward, a prefetch about to take parameters: the live-parameter limit it stays under (stage3_max_live_parameters)") \
  X(void, after_prefetch, (const std::vector<ManagedParam*>& prefetched), "forward, the parameters a prefetch just gathered for later modules") \
  X(bool, keeps_gathered_after_forward, (), "forward, a module has run: true keeps its parameters gathered") \
  X(void, after_gradients, (EngineState& state), "backward, every gradient reduced, before frozen parameters are released") \
  X(bool, keeps_gathered_after_backward, (const ManagedParam& p), "backward, the last release: true keeps the parameter gathered") \
  X(void, clip_norm, (double rank_sum_of_squares, double& norm), "step, at an accumulation boundary: the global gradient norm (all-reduced) the clip coefficient is computed from") \
  X(void, overflow_decision, (double rank_sum_of_squares, double norm, bool& overflow), "step, at an accumulation boundary with overflow protection: whether the step overflowed, decided from the all-reduced norm") \
  X(void, reported_norm, (const EngineState& state, double& norm), "step, at an accumulation boundary: the gradient norm global_grad_norm() reports") \
  X(void, unscale_divisor, (const EngineState& state, double scaled_norm, double& combined), "step, at an accumulation boundary that applies: what the fp32 gradients are divided by (the updated loss scale, times the clip coefficient from the scaled norm)") \
  X(bool, skips_optimizer_step, (EngineState& state), "step, at an accumulation boundary: true counts the step without applying it") \
  X(void, sub_group_steps, (size_t group, size_t groups, int& times), "step, sub-group `group` of `groups` of the flat fp32 partition: how many times the optimizer steps it (once)") \
  X(void, copy_back, (const at::Tensor& master, at::Tensor& rounded), "step, load and partition with bf16 parameters: a fp32 master rounded to the parameter dtype (to nearest even), about to be copied into its bf16 copy") \
  X(void, after_step, (EngineState& state), "step, applied and counted, every shard written") \
  X(void, before_zero_grad, (EngineState& state), "zero_grad, before the shard gradients are zeroed") \
  X(void, edit_received, (const at::Tensor& own, at::Tensor& received), "publish_edits, a gathered edit received from the modifier rank") \
  X(void, persistent_edit_source, (const EngineState& state, int& from), "publish_edits, the rank a persistent parameter's edit is broadcast from") \
  X(bool, builds_consolidated, (const ManagedParam& p, at::Tensor& full), "consolidated_state_dict, a partitioned parameter: true when the fault built it (no all-gather)") \
  X(bool, lists_consolidated, (const EngineState& state, const FullTensors& full_of, StateDict& out), "consolidated_state_dict, rank 0: true when the fault listed the keys") \
  X(void, state_saved, (const ManagedParam& p, c10::IValue& state), "save_checkpoint, a parameter's optimizer state about to be written") \
  X(void, shard_loaded, (const EngineState& state, int saved_world, const ManagedParam& p, const at::Tensor& full, at::Tensor& shard), "load_checkpoint, this rank's cut of a saved tensor") \
  X(void, after_load, (EngineState& state, const LoadOptions& options), "load_checkpoint, everything restored, before the closing barrier") \
  X(void, tag_to_load, (std::string& tag), "load_checkpoint_tagged, the tag asked for (empty: the folder's latest)")

namespace zero3 {

struct EngineState;
struct LoadOptions;
struct ManagedParam;

// consolidated_state_dict's full tensors, by parameter, and what it returns.
using FullTensors = std::unordered_map<const ManagedParam*, at::Tensor>;
using StateDict = std::map<std::string, at::Tensor>;

class PlantedFault {
 public:
  virtual ~PlantedFault() = default;
#define ZERO3_SEAM_DEFAULT(result, seam, parameters, where) \
  virtual result seam parameters const { return result(); }
  ZERO3_FAULT_SEAMS(ZERO3_SEAM_DEFAULT)
#undef ZERO3_SEAM_DEFAULT
};

// Returns the body of `fault`, or nullptr for Fault::none (the reference engine).
const PlantedFault* planted_fault(Fault fault);

class FaultSeams {
 public:
  explicit FaultSeams(Fault fault) : planted_(planted_fault(fault)) {}

#define ZERO3_SEAM_CALL(result, seam, parameters, where)                          \
  template <typename... Args>                                                     \
  result seam(Args&&... args) const {                                             \
    return planted_ == nullptr ? result() : planted_->seam(std::forward<Args>(args)...); \
  }
  ZERO3_FAULT_SEAMS(ZERO3_SEAM_CALL)
#undef ZERO3_SEAM_CALL

 private:
  const PlantedFault* planted_;
};

}  // namespace zero3
