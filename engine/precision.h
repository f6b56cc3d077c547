// Mixed precision for the ZeRO-3 engine: what a step computes in which dtype, the dynamic loss
// scaler, the overflow check and the gradient clip, each following DeepSpeed's ZeRO-3 step
// (docs/deepspeed-precision.md, section 2 and rules R1-R9, which cite DeepSpeed's lines).
//
// PrecisionOptions travels in EngineOptions (engine.h); its defaults are the engine's fp32
// behaviour, bit for bit: no loss scale, no overflow check, no clip, no extra collective.
// A DeepSpeed config's precision keys reach it at initialize (precision_in_effect).
//
// bf16 (param_dtype BFloat16): the model's parameters and this rank's shards are bf16, each
// shard's fp32 master is the bf16 shard widened at initialize (R1), and the gradient travels
// R3-R4 below (gradient_for_sum, summed_gradient_in_accum); unscale, clip and the optimizer step
// run on fp32 (R7-R9) and the step's result is copied back rounding to nearest even (round_to).
// Where DeepSpeed's versions differ, the engine follows v0.14.5 (R3: the reduced gradient is
// cast to the parameter dtype before it meets the accumulation buffer).
//
// fp16 (param_dtype Half, or fp16.enabled) takes the same path with fp16 for bf16, in ZeRO-3's
// fp16 order (docs/deepspeed-precision.md sections 2 and 6): parameters and shards fp16 (R1,
// stage3.py:863-867 (v0.14.5): the fp32 master is the fp16 partition widened), the loss times
// the scale in fp32 before backward (loss_scaler.py:61-63, stage3.py:2214 (v0.14.5)), gradients
// fp16 with the communication and accumulation dtypes defaulting to fp16 (runtime/engine.py:
// 857-869, 923-938 (v0.14.5)), the overflow check on every step (check_overflow is forced on:
// stage3.py:1965-1978 (v0.14.5) checks exactly when the parameters are fp16), the scaler updated
// before the unscale (stage3.py:1974-1978), the skip on every rank (:2025-2028), unscale and clip
// on fp32 (:2109-2118), the fp32 step, the copy back rounding to nearest even (:2000-2003).
// Where fp16 runs is decided by a probe, not a version: an fp16 Linear forward and backward on
// CPU (fp16_probe.h). LibTorch 1.13 (Debian 12) fails it ("addmm_impl_cpu_" not implemented for
// 'Half'), so initialize refuses fp16 there naming fp16.enabled and that message; 2.6 (Debian 13)
// passes it.
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
  // reduce-scatter: Float, BFloat16 or Half; the last two each Float or the parameter dtype
  // (Float when the first is). Half (fp16) runs only where fp16_probe.h's probe passes: LibTorch
  // 1.13 (Debian 12) has no fp16 Linear on CPU ("addmm_impl_cpu_" not implemented for 'Half'),
  // so initialize refuses it there; 2.6 (Debian 13) has one. Half parameters force
  // check_overflow on (precision_in_effect), as DeepSpeed's ZeRO-3 checks every fp16 step.
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

  // Whether parameters and shards are narrower than their fp32 master (bf16 or fp16).
  bool mixed() const { return param_dtype != c10::ScalarType::Float; }
  // Whether step() needs the global gradient norm (one all-reduce of one double per step).
  bool needs_norm() const { return check_overflow || gradient_clipping > 0 || scaler.dynamic() || scaler.loss_scale != 1.0; }
};

// Returns a UsageError's message for options this engine cannot run on any LibTorch, or "" when
// it can. A pure function: the same answer on every lane (scenario validation calls it).
std::string precision_refusal(const PrecisionOptions& options);

// Returns a UsageError's message, naming fp16.enabled and LibTorch's own message, when
// `options` asks for fp16 parameters and this LibTorch computes no fp16 Linear on CPU
// (fp16_probe.h); "" otherwise. Initialize calls it after precision_refusal; the harness calls
// it to report an fp16 scenario as not runnable here.
std::string fp16_refusal_here(const PrecisionOptions& options);

// Returns `options` with the precision keys `config` writes in effect: a DeepSpeed config is
// how a user sets them, EngineOptions::precision how code does. Takes gradient_clipping
// (absent: `options`' value, 0 unless code set it: v0.14.5's default, not master's 1.0).
// bf16.enabled true makes the parameters bf16; then data_types.grad_accum_dtype and
// communication_data_type set the accumulation and communication dtypes, each absent meaning
// bf16 (DeepSpeed's defaults under ZeRO: the parameter dtype, runtime/engine.py:923-938
// (v0.14.5)) or, when code asked for bf16 too, EngineOptions' dtype; without bf16 those two
// keys stay inert as before. fp16.enabled true does the same with fp16 (the two absent dtypes
// fp16), turns check_overflow on and sets the scaler from the fp16 section as v0.14.5 does
// (fp16.loss_scale > 0 static, else dynamic; the five dynamic keys apply only when one is
// written, else DynamicLossScaler's defaults 2^32, window 1000, hysteresis 1, min 1:
// runtime/config.py:218-240, runtime/fp16/loss_scaler.py:118-126 (v0.14.5)); raise_at_min_scale
// and the scaler rule stay as `options` has them. Without fp16 the fp16 scaler keys are inert,
// as in DeepSpeed. Param_dtype Half set by code alone also turns check_overflow on. Throws
// UsageError naming the key when the config and `options` both set gradient_clipping, a dtype or
// (under fp16) the scaler to different values.
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

// R3's first half for one rank's gradient `grad` (in the parameter dtype), for a mixed
// precision: cast to the communication dtype, divided by `divisor` (the world size) in it
// (runtime/zero/stage3.py:1331-1333, runtime/comm/coalesced_collectives.py:124 (v0.14.5)), then
// widened to fp32, exactly, for the SUM. LibTorch 1.13's Gloo has no bf16 collective at all
// ("Invalid scalar type"), so the SUM of bf16 is the fp32 rank-order sum rounded once
// (summed_gradient_in_accum). That is what Gloo's bf16 SUM gives at world 2 (measured,
// docs/deepspeed-precision.md section 4: one fp32 addition of two bf16 values, rounded once).
// At W >= 3 Gloo rounds to bf16 after each of its W-1 additions, in its own order; this engine
// adds in fp32 and rounds once. Each bf16 rounding errs by at most half a bf16 ulp (2^-9
// relative), so per element |engine - gloo| <= (W-1) * 2^-9 * (sum of |terms|) to first order,
// plus the fp32 additions' own (W-1) * 2^-24 (sum of |terms|). fp16 takes the same path (its
// wire is fp32 too, c10d_comm.h): one fp32 addition rounded once to fp16 at world 2; at W >= 3,
// against a Gloo that rounds to fp16 after each addition, per element |engine - gloo| <=
// (W-1) * 2^-11 * (sum of |terms|) + (W-1) * 2^-24 * (sum of |terms|) (half an fp16 ulp is 2^-11
// relative), as long as no partial sum passes fp16's largest finite 65504 (an intermediate that
// does is inf in one order and maybe not in the other: an overflow either side decides). The
// dense twin adds in the same order as this engine, so engine and twin agree bit for bit at
// every world size, for bf16 and fp16 alike.
// Returns a new tensor (never `grad` itself).
at::Tensor gradient_for_sum(const at::Tensor& grad, const PrecisionOptions& options, int divisor);

// R3's second half and R4's cast, for a mixed precision: the fp32 sum rounded once to the
// communication dtype, then to the parameter dtype (v0.14.5, stage3.py:1350-1351; master casts
// straight to the accumulation dtype, stage3.py:1825-1826 (master)), then to the accumulation
// dtype. Returns a tensor with its own storage.
at::Tensor summed_gradient_in_accum(const at::Tensor& summed, const PrecisionOptions& options);

}  // namespace zero3
