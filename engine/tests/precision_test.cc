// The loss scaler, the unscale-and-clip divisor and the round back, against DeepSpeed's rules
// (docs/deepspeed-precision.md, "The dynamic scaler" and rules R6, R8, R9).
#include <gtest/gtest.h>

#include "engine/errors.h"
#include "engine/precision.h"
#include "engine/fp16_probe.h"

#include "engine/config.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

namespace zero3 {
namespace {

LossScalerOptions dynamic(int power, int64_t window, int hysteresis, double min_scale = 1.0) {
  LossScalerOptions o;
  o.loss_scale = 0;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  o.min_loss_scale = min_scale;
  return o;
}

std::vector<double> scales_after(LossScaler& scaler, const std::vector<bool>& overflows) {
  std::vector<double> out;
  for (bool overflow : overflows) {
    scaler.update(overflow);
    out.push_back(scaler.scale());
  }
  return out;
}

TEST(LossScaler, StaticScaleNeverMoves) {
  LossScalerOptions o;
  o.loss_scale = 128;
  LossScaler scaler(o);
  EXPECT_EQ(scales_after(scaler, {true, false, true, true, false}), std::vector<double>(5, 128.0));
}

TEST(LossScaler, HalvesOnlyAfterHysteresisOverflowsAndDoesNotRefillByHalving) {
  LossScaler scaler(dynamic(4, 1000, 2));
  EXPECT_EQ(scaler.scale(), 16.0);
  // The first overflow spends the hysteresis, each later one halves (halving does not refill).
  EXPECT_EQ(scales_after(scaler, {true, true, true}), (std::vector<double>{16, 8, 4}));
}

TEST(LossScaler, DoublesAfterTheWindowOfCleanStepsPerVersion) {
  // v0.14.5: (iter - last_overflow) % window == 0: after `window` clean steps from the start.
  LossScaler old_rule(dynamic(4, 2, 1));
  EXPECT_EQ(scales_after(old_rule, {false, false, false, false}), (std::vector<double>{16, 32, 32, 64}));
  // master: stable = iter - last_overflow - 1 > 0 and a multiple of window: one step later
  // (measured on both versions, window 2, start 16: v0.14.5 doubles at step 1, master at 2).
  LossScalerOptions m = dynamic(4, 2, 1);
  m.rule = ScalerRule::master;
  LossScaler new_rule(m);
  EXPECT_EQ(scales_after(new_rule, {false, false, false, false}), (std::vector<double>{16, 16, 32, 32}));
  // After an overflow the window counts from it, and a doubling refills the hysteresis.
  LossScaler after(dynamic(4, 2, 2));
  EXPECT_EQ(scales_after(after, {true, true, false, false, true, true}),
            (std::vector<double>{16, 8, 8, 16, 16, 8}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScalerOptions o = dynamic(4, 1000, 2);
  o.consecutive_hysteresis = true;
  LossScaler scaler(o);
  EXPECT_EQ(scales_after(scaler, {true, false, true, false, true, true}),
            (std::vector<double>{16, 16, 16, 16, 16, 8}));
}

TEST(LossScaler, FloorsAtTheMinimumAndRaisesThereAsDeepSpeedDoes) {
  LossScaler scaler(dynamic(4, 1000, 1, /*min_scale=*/6));
  EXPECT_EQ(scales_after(scaler, {true, true}), (std::vector<double>{8, 6}));
  EXPECT_THROW(scaler.update(true), UsageError);
  EXPECT_EQ(scaler.scale(), 6.0);

  LossScalerOptions o = dynamic(4, 1000, 1, 6);
  o.raise_at_min_scale = false;
  LossScaler floored(o);
  EXPECT_EQ(scales_after(floored, {true, true, true}), (std::vector<double>{8, 6, 6}));
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler a(dynamic(4, 3, 2));
  scales_after(a, {true, false, false});
  LossScaler b(dynamic(4, 3, 2));
  b.restore(a.state());
  EXPECT_EQ(scales_after(a, {false, true, true, false, false, false}),
            scales_after(b, {false, true, true, false, false, false}));
}

TEST(UnscaleAndClip, FollowsDeepSpeedsFormula) {
  EXPECT_EQ(unscale_and_clip_divisor(123.0, 64.0, 0.0), 64.0);  // clip off: the scale alone
  EXPECT_EQ(unscale_and_clip_divisor(64.0, 64.0, 10.0), 64.0);  // norm 1 under 10: clamped to 1
  // norm 5 (scaled 320), clip 2: ((320 / 64) + 1e-6) / 2 * 64
  EXPECT_EQ(unscale_and_clip_divisor(320.0, 64.0, 2.0), ((320.0 / 64.0) + 1e-6) / 2.0 * 64.0);
  EXPECT_TRUE(std::isnan(unscale_and_clip_divisor(NAN, 1.0, 1.0)));
  EXPECT_TRUE(std::isinf(unscale_and_clip_divisor(INFINITY, 1.0, 1.0)));
}

TEST(RoundBack, Bf16IsRoundToNearestEvenNotTruncation) {
  // bf16 keeps 7 mantissa bits: near 1 its ulp is 2^-7. 1 + 2^-8 lies halfway between 1 and
  // 1 + 2^-7 (goes to the even 1); 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (goes to
  // the even 1 + 2^-6, where truncation would give 1 + 2^-7); 1 + 2^-7 + 2^-9 rounds down.
  const float h = std::ldexp(1.0f, -8);
  at::Tensor full = at::tensor({1 + h, 1 + 3 * h, 1 + 2 * h + h / 2, -(1 + 3 * h)}, at::kFloat);
  at::Tensor back = round_to(full, at::kBFloat16).to(at::kFloat);
  EXPECT_EQ(back[0].item<float>(), 1.0f);
  EXPECT_EQ(back[1].item<float>(), 1 + 4 * h);
  EXPECT_EQ(back[2].item<float>(), 1 + 2 * h);
  EXPECT_EQ(back[3].item<float>(), -(1 + 4 * h));
}

TEST(PrecisionOptions, DefaultsAreTheFp32EngineAndOthersAreRefusedWithTheReason) {
  PrecisionOptions o;
  EXPECT_FALSE(o.needs_norm());
  EXPECT_EQ(precision_refusal(o), "");
  o.param_dtype = c10::ScalarType::BFloat16;
  EXPECT_EQ(precision_refusal(o), "");
  o.accum_dtype = o.comm_dtype = c10::ScalarType::BFloat16;
  EXPECT_EQ(precision_refusal(o), "");
  // fp16 is refused by precision_refusal (the same on every lane) only in combination: fp16
  // parameters need the overflow check, and bf16 gradients do not go with them.
  o.param_dtype = c10::ScalarType::Half;
  EXPECT_NE(precision_refusal(o).find("must each be Float or the parameter dtype"), std::string::npos);
  o.accum_dtype = o.comm_dtype = c10::ScalarType::Half;
  EXPECT_NE(precision_refusal(o).find("need check_overflow"), std::string::npos);
  o.check_overflow = true;
  EXPECT_EQ(precision_refusal(o), "");
  // Whether it runs here is the probe's (fp16_probe.h): refused naming the key where it fails.
  EXPECT_EQ(fp16_refusal_here(o).empty(), cpu_fp16_available());
  if (!cpu_fp16_available()) {
    EXPECT_NE(fp16_refusal_here(o).find("fp16.enabled"), std::string::npos);
  }
  o.param_dtype = c10::ScalarType::Double;
  EXPECT_NE(precision_refusal(o).find("Float, BFloat16 or Half"), std::string::npos);
  PrecisionOptions d;
  d.scaler.loss_scale = 0;
  EXPECT_NE(precision_refusal(d).find("needs check_overflow"), std::string::npos);
  d.check_overflow = true;
  EXPECT_EQ(precision_refusal(d), "");
  d.scaler.loss_scale_window = 0;
  EXPECT_NE(precision_refusal(d).find("loss_scale_window"), std::string::npos);
}

// bf16.enabled makes the parameters bf16 with the accumulation and communication dtypes the
// config writes, bf16 where absent (DeepSpeed's defaults under ZeRO); without it those keys stay
// inert; a dtype set differently in the config and in code is refused naming the key.
TEST(PrecisionInEffect, Bf16KeysSetTheDtypes) {
  const auto f = c10::ScalarType::Float, bf16 = c10::ScalarType::BFloat16;
  PrecisionConfig config;
  config.grad_accum_dtype = "fp32";
  PrecisionOptions o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_EQ(o.param_dtype, f);
  EXPECT_EQ(o.accum_dtype, f);
  config.bf16_enabled = true;
  o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_EQ(o.param_dtype, bf16);
  EXPECT_EQ(o.accum_dtype, f);
  EXPECT_EQ(o.comm_dtype, bf16);
  config.grad_accum_dtype.reset();
  config.communication_data_type = "fp32";
  o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_EQ(o.accum_dtype, bf16);
  EXPECT_EQ(o.comm_dtype, f);
  config.communication_data_type = "fp16";
  EXPECT_NE(precision_refusal(precision_in_effect(PrecisionOptions(), config)).find("Float or the parameter dtype"),
            std::string::npos);
  PrecisionOptions code;
  code.param_dtype = bf16;
  code.comm_dtype = bf16;
  config.communication_data_type = "fp32";
  try {
    precision_in_effect(code, config);
    ADD_FAILURE() << "two communication dtypes accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("communication_data_type"), std::string::npos) << e.what();
  }
}

// fp16.enabled makes the parameters fp16 (the absent dtypes fp16 too), turns the overflow check
// on, and builds v0.14.5's scaler from the fp16 section: loss_scale > 0 static; else dynamic,
// with the five keys only when one is written (runtime/config.py:218-240 (v0.14.5)), else
// DynamicLossScaler's defaults (runtime/fp16/loss_scaler.py:118-126): 2^32, window 1000,
// hysteresis 1, min 1. Code and config setting the scaler both are refused.
TEST(PrecisionInEffect, Fp16KeysSetTheDtypesTheCheckAndV0145sScaler) {
  const auto half = c10::ScalarType::Half, f = c10::ScalarType::Float;
  PrecisionConfig config;
  config.fp16_enabled = true;
  PrecisionOptions o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_EQ(o.param_dtype, half);
  EXPECT_EQ(o.accum_dtype, half);
  EXPECT_EQ(o.comm_dtype, half);
  EXPECT_TRUE(o.check_overflow);
  EXPECT_TRUE(o.scaler.dynamic());
  EXPECT_EQ(o.scaler.initial_scale_power, 32);
  EXPECT_EQ(o.scaler.hysteresis, 1);
  EXPECT_EQ(o.scaler.loss_scale_window, 1000);
  EXPECT_EQ(o.scaler.min_loss_scale, 1.0);
  EXPECT_EQ(precision_refusal(o), "");
  config.fp16_hysteresis = 3;  // one key written: the section's defaults for the others
  o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_EQ(o.scaler.initial_scale_power, 16);
  EXPECT_EQ(o.scaler.hysteresis, 3);
  config.fp16_loss_scale = 8;
  config.grad_accum_dtype = "fp32";
  o = precision_in_effect(PrecisionOptions(), config);
  EXPECT_FALSE(o.scaler.dynamic());
  EXPECT_EQ(o.scaler.loss_scale, 8.0);
  EXPECT_EQ(o.accum_dtype, f);
  EXPECT_EQ(o.comm_dtype, half);
  PrecisionOptions code;
  code.scaler.raise_at_min_scale = false;  // not a config key: kept
  EXPECT_FALSE(precision_in_effect(code, config).scaler.raise_at_min_scale);
  code.scaler.loss_scale = 4;
  EXPECT_THROW(precision_in_effect(code, config), UsageError);
  PrecisionOptions bf16_code;
  bf16_code.param_dtype = c10::ScalarType::BFloat16;
  try {
    precision_in_effect(bf16_code, config);
    ADD_FAILURE() << "fp16.enabled over bf16 code accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("fp16.enabled"), std::string::npos) << e.what();
  }
  // fp16 by code alone: the check turns on, as DeepSpeed's ZeRO-3 checks every fp16 step.
  PrecisionOptions half_code;
  half_code.param_dtype = half_code.accum_dtype = half_code.comm_dtype = half;
  EXPECT_TRUE(precision_in_effect(half_code, PrecisionConfig()).check_overflow);
}

}  // namespace
}  // namespace zero3
