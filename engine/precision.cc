#include "engine/precision.h"

#include "engine/config.h"
#include "engine/errors.h"
#include "engine/fp16_probe.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace zero3 {

std::string precision_refusal(const PrecisionOptions& o) {
  const auto f = c10::ScalarType::Float;
  const auto bf16 = c10::ScalarType::BFloat16;
  const auto half = c10::ScalarType::Half;
  const std::string asked = std::string(" (param_dtype ") + c10::toString(o.param_dtype) + ", accum_dtype " +
                            c10::toString(o.accum_dtype) + ", comm_dtype " + c10::toString(o.comm_dtype) + " asked)";
  for (const auto dtype : {o.param_dtype, o.accum_dtype, o.comm_dtype})
    if (dtype != f && dtype != bf16 && dtype != half)
      return "precision: each dtype must be Float, BFloat16 or Half" + asked;
  if (o.param_dtype == f && (o.accum_dtype != f || o.comm_dtype != f))
    return "precision: a 16-bit accum_dtype or comm_dtype needs 16-bit parameters" + asked;
  if (o.param_dtype != f)
    for (const auto dtype : {o.accum_dtype, o.comm_dtype})
      if (dtype != f && dtype != o.param_dtype)
        return "precision: accum_dtype and comm_dtype must each be Float or the parameter dtype" + asked;
  if (o.param_dtype == half && !o.check_overflow)
    return "precision: fp16 parameters need check_overflow (DeepSpeed's ZeRO-3 checks every fp16 step, "
           "runtime/zero/stage3.py:1968-1969 (v0.14.5))";
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

std::string fp16_refusal_here(const PrecisionOptions& o) {
  // fp16 runs where this LibTorch computes an fp16 Linear on CPU, decided by running one
  // (fp16_probe.h), never by a version number.
  if (o.param_dtype != c10::ScalarType::Half || cpu_fp16_available()) return "";
  return std::string("precision: fp16.enabled (param_dtype Half) is refused here: this LibTorch computes no fp16 "
                     "Linear on CPU, so no forward could run (its probe: ") +
         cpu_fp16_refusal() + "); use bf16.enabled, or LibTorch 2.x";
}

namespace {

// The loss scaler fp16.enabled asks for, as v0.14.5 builds it: fp16.loss_scale > 0 is a static
// scale, 0 (the default) dynamic (runtime/config.py:193-199, runtime/engine.py's
// dynamic_loss_scale(), stage3.py:386-390 → CreateLossScaler, runtime/fp16/loss_scaler.py:208-215
// (v0.14.5)). A dynamic scale takes the fp16 section's five keys only when one of them is written
// (runtime/config.py:218-240 (v0.14.5)); otherwise DynamicLossScaler's own defaults: 2^32,
// window 1000, min 1, hysteresis 1 (runtime/fp16/loss_scaler.py:118-126 (v0.14.5)). Master
// always reads the keys (precision_config.py:135-155 (master)); the engine follows v0.14.5.
// raise_at_min_scale and the doubling rule stay as code set them (not config keys).
LossScalerOptions fp16_scaler(const LossScalerOptions& code, const PrecisionConfig& c) {
  const LossScalerOptions defaults;
  if (code.loss_scale != defaults.loss_scale || code.initial_scale_power != defaults.initial_scale_power ||
      code.loss_scale_window != defaults.loss_scale_window || code.hysteresis != defaults.hysteresis ||
      code.consecutive_hysteresis != defaults.consecutive_hysteresis || code.min_loss_scale != defaults.min_loss_scale)
    throw UsageError("initialize: fp16.enabled is true, so the config's fp16 section sets the loss scaler, and "
                     "EngineOptions::precision.scaler was set too (loss_scale " + std::to_string(code.loss_scale) +
                     "); set it in one place");
  LossScalerOptions s = code;
  s.loss_scale = c.fp16_loss_scale.value_or(0.0);
  if (!s.dynamic()) return s;
  const bool keys_written = c.fp16_initial_scale_power || c.fp16_loss_scale_window || c.fp16_min_loss_scale ||
                            c.fp16_hysteresis || c.fp16_consecutive_hysteresis;
  s.initial_scale_power = keys_written ? static_cast<int>(c.fp16_initial_scale_power.value_or(16)) : 32;
  s.loss_scale_window = keys_written ? c.fp16_loss_scale_window.value_or(1000) : 1000;
  s.hysteresis = keys_written ? static_cast<int>(c.fp16_hysteresis.value_or(2)) : 1;
  s.consecutive_hysteresis = keys_written && c.fp16_consecutive_hysteresis.value_or(false);
  s.min_loss_scale = keys_written ? static_cast<double>(c.fp16_min_loss_scale.value_or(1)) : 1.0;
  return s;
}

}  // namespace

PrecisionOptions precision_in_effect(PrecisionOptions options, const PrecisionConfig& config) {
  if (const auto& clip = config.gradient_clipping) {
    if (options.gradient_clipping != 0 && options.gradient_clipping != *clip)
      throw UsageError("initialize: gradient_clipping is " + std::to_string(*clip) + " in the config and " +
                       std::to_string(options.gradient_clipping) +
                       " in EngineOptions::precision; set it in one place");
    options.gradient_clipping = *clip;
  }
  const bool fp16 = config.fp16_enabled.value_or(false);
  if (!fp16 && !config.bf16_enabled.value_or(false)) {
    // fp16 set by code alone: DeepSpeed's ZeRO-3 checks every fp16 step for overflow (R5).
    if (options.param_dtype == c10::ScalarType::Half) options.check_overflow = true;
    return options;
  }
  // Both true is a ConfigError (Config::validate); fp16 wins here only if validation was skipped.
  const c10::ScalarType wanted = fp16 ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
  const char* const enabled = fp16 ? "fp16.enabled" : "bf16.enabled";
  const bool set_by_code = options.param_dtype != c10::ScalarType::Float;
  if (set_by_code && options.param_dtype != wanted)
    throw UsageError(std::string("initialize: ") + enabled + " is true in the config and EngineOptions::precision's "
                     "param_dtype is " + c10::toString(options.param_dtype) + "; set it in one place");
  auto dtype_of = [&](const char* key, const std::optional<std::string>& name, c10::ScalarType code_value) {
    if (!name) return set_by_code ? code_value : wanted;  // absent: the parameter dtype under ZeRO (R4)
    const c10::ScalarType value = *name == "fp32" ? c10::ScalarType::Float
                                  : *name == "bf16" ? c10::ScalarType::BFloat16
                                                    : c10::ScalarType::Half;
    if (set_by_code && code_value != value)
      throw UsageError(std::string("initialize: ") + key + " is \"" + *name + "\" in the config and " +
                       c10::toString(code_value) + " in EngineOptions::precision; set it in one place");
    return value;
  };
  options.param_dtype = wanted;
  options.accum_dtype = dtype_of("data_types.grad_accum_dtype", config.grad_accum_dtype, options.accum_dtype);
  options.comm_dtype = dtype_of("communication_data_type", config.communication_data_type, options.comm_dtype);
  if (fp16) {
    // R5: ZeRO-3 checks for overflow exactly when the parameters are fp16 (stage3.py:1968-1969
    // (v0.14.5)), with the fp16 section's scaler.
    options.check_overflow = true;
    options.scaler = fp16_scaler(options.scaler, config);
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

at::Tensor gradient_for_sum(const at::Tensor& grad, const PrecisionOptions& options, int divisor) {
  // div, not div_: `grad` may be the comm dtype already, and the caller's tensor stays whole.
  return grad.to(options.comm_dtype).div(divisor).to(at::kFloat);
}

at::Tensor summed_gradient_in_accum(const at::Tensor& summed, const PrecisionOptions& options) {
  // The cast to the parameter dtype (bf16, never fp32 here) always copies.
  return summed.to(options.comm_dtype).to(options.param_dtype).to(options.accum_dtype);
}

}  // namespace zero3
