#include "engine/precision.h"

#include "engine/config.h"
#include "engine/errors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace zero3 {

std::string precision_refusal(const PrecisionOptions& o) {
  const auto f = c10::ScalarType::Float;
  const auto bf16 = c10::ScalarType::BFloat16;
  const std::string asked = std::string(" (param_dtype ") + c10::toString(o.param_dtype) + ", accum_dtype " +
                            c10::toString(o.accum_dtype) + ", comm_dtype " + c10::toString(o.comm_dtype) + " asked)";
  for (const auto dtype : {o.param_dtype, o.accum_dtype, o.comm_dtype}) {
    if (dtype == c10::ScalarType::Half)
      return "precision: fp16 is refused" + asked +
             ": LibTorch 1.13 has no fp16 matmul on CPU (\"addmm_impl_cpu_\" not implemented for 'Half'), so no "
             "forward could run; use BFloat16";
    if (dtype != f && dtype != bf16) return "precision: each dtype must be Float or BFloat16" + asked;
  }
  if (o.param_dtype == f && (o.accum_dtype != f || o.comm_dtype != f))
    return "precision: a bf16 accum_dtype or comm_dtype needs bf16 parameters" + asked;
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
  if (!config.bf16_enabled.value_or(false)) return options;
  const auto bf16 = c10::ScalarType::BFloat16;
  const bool set_by_code = options.param_dtype != c10::ScalarType::Float;
  if (set_by_code && options.param_dtype != bf16)
    throw UsageError(std::string("initialize: bf16.enabled is true in the config and EngineOptions::precision's "
                                 "param_dtype is ") + c10::toString(options.param_dtype) + "; set it in one place");
  auto dtype_of = [&](const char* key, const std::optional<std::string>& name, c10::ScalarType code_value) {
    if (!name) return set_by_code ? code_value : bf16;  // absent: the parameter dtype under ZeRO (R4)
    const c10::ScalarType value = *name == "fp32" ? c10::ScalarType::Float
                                  : *name == "bf16" ? bf16
                                                    : c10::ScalarType::Half;
    if (set_by_code && code_value != value)
      throw UsageError(std::string("initialize: ") + key + " is \"" + *name + "\" in the config and " +
                       c10::toString(code_value) + " in EngineOptions::precision; set it in one place");
    return value;
  };
  options.param_dtype = bf16;
  options.accum_dtype = dtype_of("data_types.grad_accum_dtype", config.grad_accum_dtype, options.accum_dtype);
  options.comm_dtype = dtype_of("communication_data_type", config.communication_data_type, options.comm_dtype);
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

at::Tensor gradient_for_sum(const at::Tensor& grad, const PrecisionOptions& options, int divisor) {
  // div, not div_: `grad` may be the comm dtype already, and the caller's tensor stays whole.
  return grad.to(options.comm_dtype).div(divisor).to(at::kFloat);
}

at::Tensor summed_gradient_in_accum(const at::Tensor& summed, const PrecisionOptions& options) {
  // The cast to the parameter dtype (bf16, never fp32 here) always copies.
  return summed.to(options.comm_dtype).to(options.param_dtype).to(options.accum_dtype);
}

}  // namespace zero3
