// The planted faults of training: forward, backward, step, and the edits published from a
// gathered module.
#include "engine/faults/planted.h"

#include "engine/internal/engine_state.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace zero3 {
namespace {

// A module's gathered parameters are not released after its forward.
class SkipReleaseAfterForward final : public PlantedFault {
  bool keeps_gathered_after_forward() const override { return true; }
};

// Every backward all-reduces one extra element (a stray global check).
class ExtraCollectivePerStep final : public PlantedFault {
  void after_gradients(EngineState& state) const override {
    at::Tensor stray = at::zeros({1});
    state.comm.all_reduce_sum(stray);
  }
};

// The last rank does not count its first step; the step itself is applied. Not under overflow
// protection, where I11 compares the applied steps with the twin's: this fault is I9's to catch.
class StepCountSkippedOnOneRank final : public PlantedFault {
  void after_step(EngineState& state) const override {
    if (state.options.precision.check_overflow) return;
    if (state.optimizer_steps == 1 && state.comm.rank() == state.comm.world_size() - 1) --state.optimizer_steps;
  }
};

// Rank 0's first partitioned shard starts with NaN after every step.
class NanAfterStep final : public PlantedFault {
  void after_step(EngineState& state) const override {
    if (state.comm.rank() != 0) return;
    at::NoGradGuard no_grad;
    for (auto& p : state.params)
      if (!p->persistent && !p->placed() && p->master.numel() > 0) {
        p->master.view({-1})[0].fill_(std::numeric_limits<float>::quiet_NaN());
        return;
      }
  }
};

// The norm is all-reduced and reported as it should be, and each rank clips by its own share.
class ClipFromRankNorm final : public PlantedFault {
  void clip_norm(double rank_sum_of_squares, double& norm) const override { norm = std::sqrt(rank_sum_of_squares); }
};

// The norm is right where the clip uses it; what the engine reports depends on a memory knob.
// Not under overflow protection, where I11 compares the reported norm with the twin's: this
// fault is I10's to catch.
class NormSquaredWithoutContiguousGradients final : public PlantedFault {
  void reported_norm(const EngineState& state, double& norm) const override {
    if (state.options.precision.check_overflow) return;
    if (!state.config.zero_optimization.contiguous_gradients) norm *= norm;
  }
};

// bf16's top 16 bits are fp32's: clearing the low 16 bits and converting (then exact) truncates
// toward zero where torch's conversion rounds to nearest even.
class CopyBackTruncates final : public PlantedFault {
  void copy_back(const at::Tensor& master, at::Tensor& rounded) const override {
    const at::Tensor bits = master.contiguous().view(at::kInt);
    rounded = at::bitwise_and(bits, static_cast<int64_t>(~0xFFFF)).view(at::kFloat).to(rounded.scalar_type());
  }
};

// The broadcast goes as it should (the traffic is right) and each rank keeps its own copy.
class GatheredEditNotPublished final : public PlantedFault {
  void edit_received(const at::Tensor& own, at::Tensor& received) const override { received = own; }
};

}  // namespace

namespace planted {

const PlantedFault& skip_release_after_forward() {
  static const SkipReleaseAfterForward fault;
  return fault;
}
const PlantedFault& extra_collective_per_step() {
  static const ExtraCollectivePerStep fault;
  return fault;
}
const PlantedFault& step_count_skipped_on_one_rank() {
  static const StepCountSkippedOnOneRank fault;
  return fault;
}
const PlantedFault& nan_after_step() {
  static const NanAfterStep fault;
  return fault;
}
const PlantedFault& clip_from_rank_norm() {
  static const ClipFromRankNorm fault;
  return fault;
}
const PlantedFault& norm_squared_without_contiguous_gradients() {
  static const NormSquaredWithoutContiguousGradients fault;
  return fault;
}
const PlantedFault& copy_back_truncates() {
  static const CopyBackTruncates fault;
  return fault;
}
const PlantedFault& gathered_edit_not_published() {
  static const GatheredEditNotPublished fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
