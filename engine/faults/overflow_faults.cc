// The planted faults of overflow protection and the loss scale: who decides a skip, when the
// loss scale moves, what a skipped step reports (engine.h's overflow contract), and whether the
// clip sees the scale divided out.
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

// fp16: the clip coefficient from the scaled norm, the loss scale S not divided out first
// (DeepSpeed computes ((N / S) + 1e-6) / C, stage3.py:2109-2118 (v0.14.5)): with S > 1 every
// clip binds S times harder. The gradients are still divided by S; the norm reported and the
// overflow decision are untouched.
class Fp16ClipOfScaledNorm final : public PlantedFault {
  void unscale_divisor(const EngineState& state, double scaled_norm, double& combined) const override {
    const PrecisionOptions& precision = state.options.precision;
    if (precision.param_dtype != c10::ScalarType::Half) return;
    const double scale = state.scaler.scale();
    combined = unscale_and_clip_divisor(scaled_norm * scale, scale, precision.gradient_clipping);
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
const PlantedFault& fp16_clip_of_scaled_norm() {
  static const Fp16ClipOfScaledNorm fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
