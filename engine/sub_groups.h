// Sub-groups of the flat fp32 partition: DeepSpeed ZeRO-3 cuts each rank's optimizer partition
// into sub-groups of about sub_group_size elements and steps the optimizer over one sub-group at
// a time (so that offload and NVMe swap hold one sub-group's state at once).
//
// The cut is v0.14.5's _create_fp16_sub_groups (runtime/zero/stage3.py:904-927; master
// :1160-1183, the same rule): the trainable parameters in the optimizer's order, each counted by
// its partition (ceil(numel/N) elements, persistent ones too: DeepSpeed partitions them as well),
// a sub-group closed after the parameter that brings it to sub_group_size or more, and after the
// last; one sub-group when sub_group_size reaches the total. A parameter never straddles two.
//
// The step is v0.14.5's (stage3.py:2030-2057): the global gradient norm first, over every
// sub-group, then for each sub-group in turn its unscale and clip by that one norm and its
// optimizer step. This engine computes the norm once over whole tensors (engine.cc, before any
// sub-group steps), so the clip coefficient is one number for every sub-group and the knob moves
// no bit (I10). DeepSpeed's norm is per sub-group, combined by an L2 norm (v0.14.5 :2030-2031
// torch.linalg.norm; master :2617-2618 torch.linalg.vector_norm, with a non-finite sub-group norm
// read as -1 where v0.14.5 keeps NaN: docs/deepspeed-precision.md R7), which can move the norm
// by an ulp upstream. Torch's SGD, Adam and AdamW update each element from its own gradient and
// state, so stepping a sub-group at a time gives the bits of one step over all of them.
//
// Thread-safety: the rank thread that steps.
#pragma once

#include "engine/fault_seams.h"
#include "engine/partitioner.h"

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace zero3 {

// Returns the sub-groups of `params` (the engine's order, the optimizer's): the trainable
// parameters (a zero-size one too: torch's Adam counts its steps), each group non-empty.
std::vector<std::vector<const ManagedParam*>> sub_groups_of(const std::vector<std::unique_ptr<ManagedParam>>& params,
                                                            int64_t sub_group_size);

// Steps `optimizer` over each of `groups` in turn: the optimizer's other tensors have their
// gradients set aside while a group steps (torch's optimizers skip a tensor without one). One
// group, or none: one plain step. The seams decide how many times a group steps (once).
void step_sub_groups(torch::optim::Optimizer& optimizer, const std::vector<std::vector<const ManagedParam*>>& groups,
                     const FaultSeams& faults);

}  // namespace zero3
