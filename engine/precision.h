// Mixed precision for the ZeRO-3 engine: what a step computes in which dtype, the dynamic loss
// scaler, the overflow check and the gradient clip, each following DeepSpeed's ZeRO-3 step
// (docs/deepspeed-precision.md, section 2 and rules R1-R9, which cite DeepSpeed's lines).
//
// PrecisionOptions travels in EngineOptions (engine.h); its defaults are the engine's fp32
// behaviour, bit for bit: no loss scale, no overflow check, no clip, no extra collective.
// A DeepSpeed config's precision keys reach it at initialize (precision_in_effect): today
// gradient_clipping; the dtype keys wait for bf16 shards.
//
// The contract (engine.h states it for the engine): with `check_overflow`, a step whose
// gradients hold a NaN or an infinity on any rank is skipped on every rank.
//
// Thread-safety: LossScaler is a value type owned by one rank's engine; the functions are pure.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace at {
class Tensor;
}

namespace zero3 {

struct PrecisionConfig;  // engine/config.h

// Which DeepSpeed version's scaler rule decides when a scale doubles
// (docs/deepspeed-precision.md, "The dynamic scaler"): v0.14.5 doubles after `window` clean
// steps, master after `window + 1` (runtime/fp16/loss_scaler.py:194 (v0.14.5), :293-294 (master)).
enum class ScalerRule { v0_14_5, master };

// DeepSpeed's fp16 section: `loss_scale` > 0 is a static scale; 0 is dynamic, starting at
// 2^initial_scale_power. Defaults: a static scale of 1 (DeepSpeed's for every dtype but fp16,
// runtime/fp16/loss_scaler.py:208-215 (v0.14.5)).
struct LossScalerOptions {
  double loss_scale = 1.0;
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // DeepSpeed's raise_error_at_min_scale (default true): an overflow at the minimum scale throws
  // instead of keeping the floor (runtime/fp16/loss_scaler.py:173-175 (v0.14.5)).
  bool raise_at_min_scale = true;
  ScalerRule rule = ScalerRule::v0_14_5;
  bool dynamic() const { return loss_scale <= 0; }
};

struct PrecisionOptions {
  // The dtype of the model's parameters and shards, of the accumulated gradient, and of the
  // reduce-scatter. This engine computes fp32 only today: initialize refuses any other dtype
  // with a UsageError that says so (bf16 shards with an fp32 master are issue 40 item 2's next
  // part). fp16: LibTorch 1.13 (Debian 12) has no fp16 Linear on CPU ("addmm_impl_cpu_" not
  // implemented for 'Half'); LibTorch 2.6 (Debian 13) has.
  c10::ScalarType param_dtype = c10::ScalarType::Float;
  c10::ScalarType accum_dtype = c10::ScalarType::Float;
  c10::ScalarType comm_dtype = c10::ScalarType::Float;
  // DeepSpeed's gradient_clipping: 0 is off.
  double gradient_clipping = 0.0;
  // Overflow protection: the rank-summed gradient norm is checked for NaN and infinity and
  // such a step is skipped on every rank. DeepSpeed's ZeRO-3 checks only for fp16
  // (runtime/zero/stage3.py:1968-1969 (v0.14.5)); this engine checks whenever asked.
  bool check_overflow = false;
  LossScalerOptions scaler;

  // Whether step() needs the global gradient norm (one all-reduce of one double per step).
  bool needs_norm() const { return check_overflow || gradient_clipping > 0 || scaler.dynamic() || scaler.loss_scale != 1.0; }
};

// Returns a UsageError's message for options this engine cannot run, or "" when it can.
std::string precision_refusal(const PrecisionOptions& options);

// Returns `options` with the precision keys `config` writes in effect: a DeepSpeed config is
// how a user sets them, EngineOptions::precision how code does. The fp32 engine takes
// gradient_clipping (absent: `options`' value, 0 unless code set it: v0.14.5's default, not
// master's 1.0); config validation refuses bf16/fp16.enabled, and the fp16 scaler keys are
// inert without fp16, as in DeepSpeed. Throws UsageError naming gradient_clipping when the
// config and `options` both set it, to different values.
PrecisionOptions precision_in_effect(PrecisionOptions options, const PrecisionConfig& config);

// DeepSpeed's DynamicLossScaler / LossScaler (runtime/fp16/loss_scaler.py:118-203 (v0.14.5),
// :264-299 (master)). update() is called once per optimizer step, before the unscale, so the
// unscale divides by the updated scale as DeepSpeed does (section 2, item 5).
class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = LossScalerOptions());
  double scale() const { return scale_; }
  // Applies one step's outcome. Throws UsageError ("Current loss scale already at minimum")
  // when an overflow would halve a scale that already equals min_loss_scale and
  // raise_at_min_scale is set; the scaler is unchanged then.
  void update(bool overflow);
  // The state a checkpoint keeps, and its inverse.
  struct State {
    double scale;
    int64_t iter;
    int64_t last_overflow_iter;
    int hysteresis_left;
  };
  State state() const { return {scale_, iter_, last_overflow_iter_, hysteresis_left_}; }
  void restore(const State& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int hysteresis_left_;
};

// DeepSpeed's unscale-and-clip factor (runtime/zero/stage3.py:2109-2118 (v0.14.5), :2696-2705
// (master)): with `scaled_norm` N (the global norm of the scaled gradients), scale S and clip C,
// combined = S, or max(1, ((N / S) + 1e-6) / C) * S when C > 0. The gradient is multiplied by
// 1 / combined (rounded to fp32). Not torch's clip_grad_norm_ (max_norm / (norm + 1e-6)).
double unscale_and_clip_divisor(double scaled_norm, double scale, double clip);

// Returns `full` (fp32) rounded to `dtype` to nearest even, as torch's conversion and
// DeepSpeed's copy back (stage3.py:2000-2003 (v0.14.5)) do. Truncation is not a rounding mode.
at::Tensor round_to(const at::Tensor& full, c10::ScalarType dtype);

}  // namespace zero3
