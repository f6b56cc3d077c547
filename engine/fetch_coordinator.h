// FetchCoordinator: DeepSpeed ZeRO-3's parameter coordinator for the forward pass: a trace of
// the module order, a prefetch of the next modules' parameters (stage3_prefetch_bucket_size),
// a cap on what the prefetch may bring in (stage3_max_live_parameters) and parameters kept
// gathered when they are used again soon (stage3_max_reuse_distance).
//
// The rules are v0.14.5's runtime/zero/partitioned_param_coordinator.py, in its order:
//  - Trace (:160-241). The first forward records the modules it fetches (RECORD); at its end the
//    trace is frozen into a module order and a parameter order (each module's own parameters,
//    sorted by id, with the step that uses them) and is COMPLETE. A later forward whose module
//    at step s is not the trace's invalidates it (INVALID: no prefetch, plain releases for the
//    rest of that forward); the forward after an invalid one records again.
//  - Fetch (:259-391). A module's parameters not yet gathered: one coalesced all-gather. Then,
//    with a complete trace, the parameters that module uses are popped off the parameter queue,
//    and the prefetch pops further entries while the elements it takes stay under
//    min(max_live - available, prefetch_bucket_size) (checked before each entry, so the last
//    one may overshoot): each not-gathered one joins one more coalesced all-gather. Every entry
//    popped records the latest step the parameter was fetched for.
//  - Release (:393-402, 476-515). Without a complete trace a module's parameters are released
//    after its forward. With one, a parameter stays gathered when a prefetch fetched it for a
//    later step, or when it is used by a module within max_reuse_distance elements ahead
//    (the modules after the current step, their parameters' numel summed, the walk stopping once
//    the sum reaches the distance).
//  - `available` counts the elements (numel, unpadded) gathered by this coordinator and not yet
//    released: what max_live bounds (:447).
//
// DeepSpeed master (edaa722) keeps these rules (the prefetch budget and loop :452-476, the
// release :494-499 and the reuse walk :634-662); what it adds is outside a forward-only trace:
// recomputed parameters released in backward (:501-505) and a fast path for leaf modules.
//
// Where this engine differs, and why:
//  - The trace covers the forward only, and it ends with the forward: everything still gathered
//    is released there (release_and_reset_all, :404-421), so outside a forward nothing is
//    gathered (invariant I4) and the backward re-gathers module by module as before. DeepSpeed's
//    trace spans forward and backward and resets at the step's end.
//  - A forward that throws leaves the trace as it was before that forward (DeepSpeed's would be
//    half recorded): a refused operation changes nothing.
//  - A release is unconditional for the parameters the rules pick (DeepSpeed also waits for
//    ds_active_sub_modules to empty): the engine released a module's own parameters after its
//    forward before this class existed, and still does when the rules say release.
// None of this moves a bit of the result: a gather copies bits whenever it happens (I10).
//
// Requires: every rank calls the modules in the same order (check_moe_choices makes an unplaced
// expert every rank's), so the traces agree and the collectives match.
// Thread-safety: the rank thread that runs the forward.
#pragma once

#include "engine/fault_seams.h"
#include "engine/partitioner.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace zero3 {

struct FetchKnobs {
  int64_t prefetch_bucket_size = 0;  // stage3_prefetch_bucket_size
  int64_t max_live_parameters = 0;   // stage3_max_live_parameters
  int64_t max_reuse_distance = 0;    // stage3_max_reuse_distance
};

class FetchCoordinator {
 public:
  enum class TraceMode { record, complete, invalid };

  FetchCoordinator(Partitioner& partitioner, FaultSeams faults, FetchKnobs knobs)
      : partitioner_(partitioner), faults_(faults), knobs_(knobs) {}

  // The outermost module call of a forward begins: a fresh queue from the trace.
  void begin_forward();
  // Gathers `module`'s own parameters (`own`, every one the module registers, persistent ones
  // included: they count in the trace and the reuse walk) and prefetches. Collective.
  void fetch(const void* module, const std::vector<ManagedParam*>& own);
  // After `module`'s forward: releases what the rules say.
  void release(const std::vector<ManagedParam*>& own);
  // The outermost module call returned (`ok`) or threw: the trace moves on (or stays as it was)
  // and everything still gathered is released.
  void end_forward(bool ok, const std::vector<ManagedParam*>& all_params);

  TraceMode mode() const { return mode_; }

 private:
  struct ParamInTrace {
    ManagedParam* param;
    int64_t step;
  };
  // The entries fetch pops for the module of the current step, as :331-348.
  void pop_own(const std::vector<ManagedParam*>& own);
  void prefetch();
  bool keeps(const ManagedParam& p) const;
  void gather(const std::vector<ManagedParam*>& params);
  void drop(ManagedParam& p);
  int64_t most_recent(const ManagedParam* p) const;

  Partitioner& partitioner_;
  const FaultSeams faults_;
  const FetchKnobs knobs_;
  TraceMode mode_ = TraceMode::record;
  // The trace: the module of each step and each step's own parameters.
  std::vector<const void*> module_order_;
  std::vector<std::vector<ManagedParam*>> params_of_step_;
  // This forward.
  std::vector<const void*> recording_;
  std::vector<std::vector<ManagedParam*>> recording_params_;
  bool invalidated_ = false;
  std::deque<ParamInTrace> queue_;
  std::unordered_map<const ManagedParam*, int64_t> most_recent_step_;
  int64_t step_ = 0;
  int64_t available_ = 0;
};

}  // namespace zero3
