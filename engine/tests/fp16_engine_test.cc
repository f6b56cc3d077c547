// fp16 parameters and shards over an fp32 master with DeepSpeed's loss scaler (precision.h), at
// worlds 1-3, against ZeRO-3's fp16 order (docs/deepspeed-precision.md, section 2 and R1-R9)
// written out by hand on one dense copy: the engine must match it bit for bit, through gradient
// accumulation and an overflow skipped on every rank. These run where LibTorch computes an fp16
// Linear on CPU (LibTorch 2.x; fp16_probe.h) and skip elsewhere, saying why; the refusal there is
// a test of its own.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/fp16_probe.h"
#include "engine/layers.h"
#include "engine/shard_layout.h"
#include "engine/tests/test_configs.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace zero3 {
namespace fp16_engine_test {  // named: a unity build joins this file with the other engine tests

constexpr double kLr = 0.5;
constexpr int64_t kScalePower = 4;  // fp16.initial_scale_power: a scale of 16

#define ZERO3_SKIP_WITHOUT_CPU_FP16()                                                                   \
  if (!cpu_fp16_available())                                                                            \
  GTEST_SKIP() << "this LibTorch computes no fp16 Linear on CPU (the engine refuses fp16 here, tested by " \
                  "Fp16.IsRefusedWhereLibTorchHasNoCpuFp16): "                                          \
               << cpu_fp16_refusal()

// A rank's micro-batch at `step`, fp32 as the data arrives; both sides cast it to fp16. At
// `poisoned` (rank 1 only) the input holds an infinity: that step's gradients are not finite.
std::pair<at::Tensor, at::Tensor> batch(int64_t step, int rank, int64_t poisoned = -1) {
  at::Tensor base = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor x = at::sin(base * (1.0 + rank) + static_cast<double>(step));
  if (step == poisoned && rank == 1) x[0][1] = std::numeric_limits<float>::infinity();
  return {x, at::cos(at::arange(4, at::kFloat).reshape({2, 2}) + static_cast<double>(step * 3 + rank))};
}

at::Tensor fp16_loss(const at::Tensor& output, const at::Tensor& target) {
  return (output - target.to(at::kHalf)).pow(2).mean();
}

struct Case {
  int world;
  c10::ScalarType accum, comm;
  int64_t gas;
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  auto short_name = [](c10::ScalarType t) { return t == at::kFloat ? std::string("fp32") : std::string("fp16"); };
  return "world" + std::to_string(c.world) + "_accum_" + short_name(c.accum) + "_comm_" + short_name(c.comm) +
         "_gas" + std::to_string(c.gas);
}

// fp16.enabled by DeepSpeed's keys, a dynamic scale of 2^kScalePower that stays put for the
// steps here (window 1000), halving at the first overflow (hysteresis 1).
Config config_of(const Case& c) {
  Config config = all_partitioned();
  config.gradient_accumulation_steps = c.gas;
  auto name = [](c10::ScalarType type) { return std::string(type == at::kFloat ? "fp32" : "fp16"); };
  config.precision.fp16_enabled = true;
  config.precision.fp16_initial_scale_power = kScalePower;
  config.precision.fp16_hysteresis = 1;
  config.precision.grad_accum_dtype = name(c.accum);
  config.precision.communication_data_type = name(c.comm);
  return config;
}

// The fp32 masters after `micro_steps` micro-steps of SGD (lr kLr), by the rules, on one copy.
// The accumulation boundary that holds micro-step `poisoned` is skipped, and the scale halves.
std::vector<at::Tensor> by_hand(const Case& c, int64_t micro_steps, int64_t poisoned = -1) {
  auto model = two_linears();
  std::vector<at::Tensor> params = unique_parameters(*model);
  std::vector<at::Tensor> masters, accum(params.size());
  for (auto& p : params) {
    at::NoGradGuard no_grad;
    p.set_data(p.detach().to(at::kHalf));          // R1: round to nearest even
    masters.push_back(p.detach().to(at::kFloat));  // and widened, exactly
  }
  double scale = std::ldexp(1.0, kScalePower);
  bool overflow = false;
  for (int64_t step = 0; step < micro_steps; ++step) {
    std::vector<at::Tensor> sum(params.size());
    for (int rank = 0; rank < c.world; ++rank) {  // each rank's gradient from its own micro-batch
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      auto [x, y] = batch(step, rank, poisoned);
      // R2: loss.float() times the scale (loss_scaler.py:61-63 (v0.14.5)), backward into fp16
      (fp16_loss((*model)(x.to(at::kHalf)), y).to(at::kFloat) * scale).backward();
      for (size_t i = 0; i < params.size(); ++i) {
        // R3: to the comm dtype, divided by W in it; the SUM in fp32, rank by rank
        at::Tensor share = params[i].grad().to(c.comm).div(c.world).to(at::kFloat);
        sum[i] = rank == 0 ? share : sum[i].add(share);
      }
    }
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      // rounded once to the comm dtype, then to the param dtype (v0.14.5), then R4
      at::Tensor reduced = sum[i].to(c.comm).to(at::kHalf).to(c.accum);
      accum[i] = accum[i].defined() ? accum[i].add_(reduced) : reduced;
    }
    overflow |= step == poisoned;
    if ((step + 1) % c.gas != 0) continue;
    if (overflow) {
      scale /= 2;  // R5-R6: skipped, the scale halved (hysteresis 1), nothing else changes
    } else {
      for (size_t i = 0; i < params.size(); ++i) {
        // R8: unscaled on fp32 by the (unchanged) scale; R9: SGD on fp32, copied back nearest even
        masters[i].add_(accum[i].to(at::kFloat).mul_(1.0 / scale), -kLr);
        params[i].set_data(masters[i].to(at::kHalf));
      }
    }
    for (auto& a : accum) a = at::Tensor();
    overflow = false;
  }
  return masters;
}

struct Trained {
  std::shared_ptr<Sequential> model;
  std::unique_ptr<torch::optim::SGD> user;
  std::unique_ptr<Engine> engine;
};

Trained train(Comm& comm, const Case& c, int64_t micro_steps, int64_t poisoned = -1) {
  Trained t;
  t.model = two_linears();
  t.user = std::make_unique<torch::optim::SGD>(unique_parameters(*t.model), torch::optim::SGDOptions(kLr));
  t.engine = initialize(t.model, *t.user, config_of(c), comm);
  for (int64_t step = 0; step < micro_steps; ++step) {
    auto [x, y] = batch(step, comm.rank(), poisoned);
    t.engine->backward(fp16_loss(t.engine->forward(x.to(at::kHalf)), y));
    t.engine->step();
    if ((step + 1) % c.gas == 0) t.engine->zero_grad();
  }
  return t;
}

// Every master of this rank is its slice of the hand-computed one; released, the model's fp16
// parameters are the hand-computed masters rounded to nearest even.
void expect_matches(Comm& comm, Trained& t, const std::vector<at::Tensor>& expected) {
  const auto views = t.engine->params();
  ASSERT_EQ(views.size(), expected.size());
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE(views[i].path + " on rank " + std::to_string(comm.rank()));
    EXPECT_EQ(views[i].master.scalar_type(), at::kFloat);
    const at::Tensor want = views[i].layout.shard_of(expected[i].reshape({-1}), comm.rank());
    EXPECT_TRUE(at::equal(views[i].master.reshape({-1}), want))
        << "max difference " << (views[i].master.reshape({-1}) - want).abs().max().item<float>();
  }
  t.engine->release();
  const std::vector<at::Tensor> params = unique_parameters(*t.model);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].scalar_type(), at::kHalf);
    EXPECT_TRUE(at::equal(params[i], expected[i].to(at::kHalf))) << views[i].path;
  }
}

class Fp16Step : public ::testing::TestWithParam<Case> {};

TEST_P(Fp16Step, MatchesZero3sFp16OrderByHandBitForBit) {
  ZERO3_SKIP_WITHOUT_CPU_FP16();
  const Case c = GetParam();
  const std::vector<at::Tensor> expected = by_hand(c, 3 * c.gas);
  zerocheck::make_world(c.world)->run([&](Comm& comm) {
    Trained t = train(comm, c, 3 * c.gas);
    const PrecisionOptions& p = t.engine->precision();
    EXPECT_EQ(p.param_dtype, at::kHalf);
    EXPECT_EQ(p.accum_dtype, c.accum);
    EXPECT_EQ(p.comm_dtype, c.comm);
    EXPECT_TRUE(p.check_overflow);  // fp16 always checks (R5)
    EXPECT_EQ(t.engine->loss_scale(), 16.0);
    EXPECT_EQ(t.engine->skipped_steps(), 0);
    EXPECT_EQ(t.engine->optimizer_steps(), 3);
    expect_matches(comm, t, expected);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, Fp16Step,
    ::testing::Values(Case{1, at::kHalf, at::kHalf, 1}, Case{2, at::kHalf, at::kHalf, 1},
                      Case{2, at::kFloat, at::kFloat, 1}, Case{2, at::kHalf, at::kHalf, 2},
                      Case{2, at::kFloat, at::kHalf, 2}, Case{2, at::kHalf, at::kFloat, 2},
                      Case{3, at::kHalf, at::kHalf, 2}),
    name_of);

// An infinity in rank 1's input at micro-step 1: every rank skips that step (masters, optimizer
// steps unchanged), skipped_steps is 1, the scale halves (16 -> 8, hysteresis 1), the reported
// norm is not finite; the next clean step equals the hand rules that skipped the same step.
TEST(Fp16, AnOverflowOnOneRankIsSkippedOnEveryRankAndHalvesTheScale) {
  ZERO3_SKIP_WITHOUT_CPU_FP16();
  const Case c{2, at::kHalf, at::kHalf, 1};
  const std::vector<at::Tensor> before = by_hand(c, 1);
  const std::vector<at::Tensor> after_skip = by_hand(c, 2, /*poisoned=*/1);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(before[i], after_skip[i]));
  zerocheck::make_world(2)->run([&](Comm& comm) {
    Trained t = train(comm, c, 2, /*poisoned=*/1);
    EXPECT_EQ(t.engine->skipped_steps(), 1);
    EXPECT_EQ(t.engine->optimizer_steps(), 1);
    EXPECT_EQ(t.engine->loss_scale(), 8.0);
    EXPECT_FALSE(std::isfinite(t.engine->global_grad_norm())) << t.engine->global_grad_norm();
    expect_matches(comm, t, before);
  });
  zerocheck::make_world(2)->run([&](Comm& comm) {
    Trained t = train(comm, c, 3, /*poisoned=*/1);
    EXPECT_EQ(t.engine->skipped_steps(), 1);
    EXPECT_EQ(t.engine->optimizer_steps(), 2);
    EXPECT_TRUE(std::isfinite(t.engine->global_grad_norm()));
    expect_matches(comm, t, by_hand(c, 3, /*poisoned=*/1));
  });
}

// EngineOptions' param_dtype Half (no config key) trains as fp16.enabled does with a static
// scale of 1, with the overflow check on.
TEST(Fp16, TheOptionsHalfDtypeTurnsTheOverflowCheckOn) {
  ZERO3_SKIP_WITHOUT_CPU_FP16();
  zerocheck::make_world(2)->run([&](Comm& comm) {
    auto model = two_linears();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(kLr));
    EngineOptions options;
    options.precision.param_dtype = at::kHalf;
    options.precision.accum_dtype = at::kHalf;
    options.precision.comm_dtype = at::kHalf;
    auto engine = initialize(model, user, all_partitioned(), comm, options);
    EXPECT_TRUE(engine->precision().check_overflow);
    EXPECT_EQ(engine->loss_scale(), 1.0);
    auto [x, y] = batch(0, comm.rank(), /*poisoned=*/0);
    engine->backward(fp16_loss(engine->forward(x.to(at::kHalf)), y));
    engine->step();
    EXPECT_EQ(engine->skipped_steps(), 1);
    EXPECT_EQ(engine->optimizer_steps(), 0);
  });
}

// Where the probe fails (LibTorch 1.13), initialize refuses fp16.enabled before anything
// changes, naming the key and LibTorch's own message; the model then trains in fp32.
TEST(Fp16, IsRefusedWhereLibTorchHasNoCpuFp16) {
  if (cpu_fp16_available()) GTEST_SKIP() << "this LibTorch computes an fp16 Linear on CPU: fp16 runs here";
  zerocheck::make_world(1)->run([](Comm& comm) {
    auto model = two_linears();
    const at::Tensor before = model->parameters()[0].detach().clone();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(kLr));
    try {
      initialize(model, user, config_of({1, at::kHalf, at::kHalf, 1}), comm);
      ADD_FAILURE() << "fp16 accepted";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("fp16.enabled"), std::string::npos) << what;
      EXPECT_NE(what.find(cpu_fp16_refusal()), std::string::npos) << what;
    }
    EXPECT_TRUE(at::equal(model->parameters()[0], before));
    EXPECT_EQ(model->parameters()[0].scalar_type(), at::kFloat);
    EXPECT_NO_THROW(initialize(model, user, all_partitioned(), comm));
  });
}

}  // namespace fp16_engine_test
}  // namespace zero3
