#include "engine/precision.h"

#include "engine/config.h"
#include "engine/errors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace zero3 {

std::string precision_refusal(const PrecisionOptions& o) {
  const auto f = c10::ScalarType::Float;
  if (o.param_dtype != f || o.accum_dtype != f || o.comm_dtype != f)
    return std::string("precision: this engine computes fp32 only (param_dtype ") +
           c10::toString(o.param_dtype) + ", accum_dtype " + c10::toString(o.accum_dtype) +
           ", comm_dtype " + c10::toString(o.comm_dtype) + " asked): bf16 shards are not built yet";
  if (!(o.gradient_clipping >= 0) || !std::isfinite(o.gradient_clipping))
    return "precision: gradient_clipping must be a finite number >= 0, got " + std::to_string(o.gradient_clipping);
  const LossScalerOptions& s = o.scaler;
  if (!std::isfinite(s.loss_scale) || s.loss_scale < 0)
    return "precision: loss_scale must be a finite number >= 0, got " + std::to_string(s.loss_scale);
  if (s.dynamic()) {
    if (!o.check_overflow) return "precision: a dynamic loss scale needs check_overflow";
    if (s.loss_scale_window <= 0) return "precision: loss_scale_window must be > 0 when the scale is dynamic";
    if (s.hysteresis <= 0) return "precision: hysteresis must be > 0 when the scale is dynamic";
    if (!(s.min_loss_scale > 0)) return "precision: min_loss_scale must be > 0 when the scale is dynamic";
    if (s.initial_scale_power < 0 || s.initial_scale_power > 126)
      return "precision: initial_scale_power must be in 0..126";
  }
  return "";
}

PrecisionOptions precision_in_effect(PrecisionOptions options, const PrecisionConfig& config) {
  if (const auto& clip = config.gradient_clipping) {
    if (options.gradient_clipping != 0 && options.gradient_clipping != *clip)
      throw UsageError("initialize: gradient_clipping is " + std::to_string(*clip) + " in the config and " +
                       std::to_string(options.gradient_clipping) +
                       " in EngineOptions::precision; set it in one place");
    options.gradient_clipping = *clip;
  }
  return options;
}

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options),
      scale_(options.dynamic() ? std::ldexp(1.0, options.initial_scale_power) : options.loss_scale),
      hysteresis_left_(options.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!options_.dynamic()) return;  // a static scale never moves (runtime/fp16/loss_scaler.py:78-79)
  // runtime/fp16/loss_scaler.py:170-203 (v0.14.5), :264-299 (master).
  if (overflow) {
    if (options_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == options_.min_loss_scale && options_.raise_at_min_scale)
        throw UsageError("Current loss scale already at minimum - cannot decrease scale anymore (scale " +
                         std::to_string(scale_) + ")");
      scale_ = std::max(scale_ / 2, options_.min_loss_scale);
    } else {
      --hysteresis_left_;  // halving does not refill it: the next overflows halve until a doubling
    }
    last_overflow_iter_ = iter_;
  } else {
    if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
    const int64_t since = iter_ - last_overflow_iter_;
    const bool doubles = options_.rule == ScalerRule::v0_14_5
                             ? since % options_.loss_scale_window == 0
                             : since - 1 > 0 && (since - 1) % options_.loss_scale_window == 0;
    if (doubles) {
      if (!options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
      scale_ *= 2;
    }
  }
  ++iter_;
}

void LossScaler::restore(const State& state) {
  scale_ = state.scale;
  iter_ = state.iter;
  last_overflow_iter_ = state.last_overflow_iter;
  hysteresis_left_ = state.hysteresis_left;
}

double unscale_and_clip_divisor(double scaled_norm, double scale, double clip) {
  if (!(clip > 0)) return scale;
  // torch.clamp(((N / S) + 1e-6) / C, min=1.0): a NaN stays NaN, as it does in DeepSpeed.
  const double factor = ((scaled_norm / scale) + 1e-6) / clip;
  return (std::isnan(factor) ? factor : std::max(factor, 1.0)) * scale;
}

at::Tensor round_to(const at::Tensor& full, c10::ScalarType dtype) { return full.to(dtype); }

}  // namespace zero3
