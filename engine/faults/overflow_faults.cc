// The planted faults of overflow protection: who decides a skip, when the loss scale moves, and
// what a skipped step reports (engine.h's overflow contract).
#include "engine/faults/planted.h"

#include "engine/internal/engine_state.h"

#include <cmath>

namespace zero3 {
namespace {

// Each rank decides the skip from its own share of the norm: the all-reduce still runs (the
// traffic and the reported norm are right), but a rank whose slices are finite steps while the
// rank holding the NaN skips.
class OverflowFlagNotAllReduced final : public PlantedFault {
  void overflow_decision(double rank_sum_of_squares, double, bool& overflow) const override {
    overflow = !std::isfinite(rank_sum_of_squares);
  }
};

// The dynamic scaler's window is taken one shorter: the scale doubles one clean step early, and
// again every window - 1 steps (a window of 1 cannot be shorter: as it should).
class ScaleDoubledOneStepEarly final : public PlantedFault {
  void scaler_options(LossScalerOptions& options) const override {
    if (options.loss_scale_window > 1) --options.loss_scale_window;
  }
};

// A non-finite norm is reported as -1, DeepSpeed master's sentinel before its group norm
// (docs/deepspeed-precision.md section 2, item 6): the skip is right, only the report lies.
class OverflowNormReportedAsSentinel final : public PlantedFault {
  void reported_norm(const EngineState&, double& norm) const override {
    if (!std::isfinite(norm)) norm = -1.0;
  }
};

}  // namespace

namespace planted {

const PlantedFault& overflow_flag_not_all_reduced() {
  static const OverflowFlagNotAllReduced fault;
  return fault;
}
const PlantedFault& scale_doubled_one_step_early() {
  static const ScaleDoubledOneStepEarly fault;
  return fault;
}
const PlantedFault& overflow_norm_reported_as_sentinel() {
  static const OverflowNormReportedAsSentinel fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
