// The engine's loss scale, overflow contract (engine.h) and gradient clip at worlds 1-3: a step
// poisoned on one rank is skipped on every rank and leaves training exactly where a run that
// never saw that step would be; the clip follows DeepSpeed's formula (precision.h).
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/tests/test_configs.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <set>
#include <vector>

#include <unistd.h>

namespace zero3 {
namespace {

// A rank's micro-batch at `step`: a pure function of both, so two runs see the same data.
std::pair<at::Tensor, at::Tensor> batch(int64_t step, int rank) {
  at::Tensor base = at::arange(6, at::kFloat).reshape({2, 3});
  return {at::sin(base * (1.0 + rank) + static_cast<double>(step)),
          at::cos(at::arange(4, at::kFloat).reshape({2, 2}) + static_cast<double>(step * 3 + rank))};
}

struct StepRecord {
  std::vector<at::Tensor> masters;  // this rank's, after the step
  int64_t optimizer_steps;
  int64_t skipped_steps;
  double norm;
  double scale;
};

enum class Opt { adam, sgd };

// A checkpoint in `dir`: saved after the step at index `save_after` of the steps listed, or loaded
// before the first step when `save_after` is -1; none when `dir` is empty.
struct CheckpointAt {
  int save_after = -1;
  std::string dir;
};

// Trains `steps` (the data of the steps listed) and records each; `poison` puts an infinity in
// `poison_rank`'s input at the listed steps.
std::vector<StepRecord> train(Comm& comm, const PrecisionOptions& precision, const std::vector<int64_t>& steps,
                              const std::set<int64_t>& poison = {}, int poison_rank = -1, Opt opt = Opt::adam,
                              const CheckpointAt& checkpoint = {}, const Config& config = all_partitioned()) {
  auto model = two_linears();
  std::unique_ptr<torch::optim::Optimizer> user;
  if (opt == Opt::adam)
    user = std::make_unique<torch::optim::Adam>(unique_parameters(*model), torch::optim::AdamOptions(0.01));
  else
    user = std::make_unique<torch::optim::SGD>(unique_parameters(*model), torch::optim::SGDOptions(1.0));
  EngineOptions options;
  options.precision = precision;
  auto engine = initialize(model, *user, config, comm, options);
  if (!checkpoint.dir.empty() && checkpoint.save_after < 0) engine->load_checkpoint(checkpoint.dir);
  std::vector<StepRecord> out;
  for (int64_t step : steps) {
    auto [input, target] = batch(step, comm.rank());
    if (poison.count(step) && comm.rank() == poison_rank) input[0][1] = std::numeric_limits<float>::infinity();
    at::Tensor output = engine->forward(input);
    engine->backward((output - target).pow(2).mean());
    engine->step();
    engine->zero_grad();
    StepRecord r{{}, engine->optimizer_steps(), engine->skipped_steps(), engine->global_grad_norm(), engine->loss_scale()};
    for (const auto& v : engine->params()) r.masters.push_back(v.master.detach().clone());
    out.push_back(std::move(r));
    if (!checkpoint.dir.empty() && checkpoint.save_after == static_cast<int>(out.size()) - 1)
      engine->save_checkpoint(checkpoint.dir);
  }
  return out;
}

bool same_masters(const StepRecord& a, const StepRecord& b) {
  if (a.masters.size() != b.masters.size()) return false;
  for (size_t i = 0; i < a.masters.size(); ++i)
    if (!at::equal(a.masters[i], b.masters[i])) return false;
  return true;
}

bool all_finite(const StepRecord& r) {
  for (const auto& m : r.masters)
    if (!at::isfinite(m).all().item<bool>()) return false;
  return true;
}

PrecisionOptions protected_dynamic(int64_t window, int hysteresis) {
  PrecisionOptions p;
  p.check_overflow = true;
  p.scaler.loss_scale = 0;
  p.scaler.initial_scale_power = 4;
  p.scaler.loss_scale_window = window;
  p.scaler.hysteresis = hysteresis;
  return p;
}

class Overflow : public ::testing::TestWithParam<int> {};

// The contract of engine.h at world 1, 2 and 3, the infinity on the last rank only.
TEST_P(Overflow, PoisonedStepIsSkippedOnEveryRankAndTrainingGoesOnAsIfItNeverHappened) {
  const int world = GetParam();
  zerocheck::make_world(world)->run([&](Comm& comm) {
    const PrecisionOptions p = protected_dynamic(1000, 1);
    const auto poisoned = train(comm, p, {0, 1, 2, 3}, {1}, world - 1);
    // Skipped everywhere: masters, step count unchanged; counted; norm not finite; scale halved.
    EXPECT_TRUE(same_masters(poisoned[1], poisoned[0])) << "rank " << comm.rank();
    EXPECT_EQ(poisoned[1].optimizer_steps, 1);
    EXPECT_EQ(poisoned[1].skipped_steps, 1);
    EXPECT_FALSE(std::isfinite(poisoned[1].norm));
    EXPECT_EQ(poisoned[0].scale, 16.0);
    EXPECT_EQ(poisoned[1].scale, 8.0);
    EXPECT_TRUE(std::isfinite(poisoned[3].norm));
    EXPECT_EQ(poisoned[3].optimizer_steps, 3);
    EXPECT_TRUE(all_finite(poisoned[3]));
    // The twin that skipped the same step: its data never seen. A power-of-2 scale is undone
    // exactly, so the scale's halving changes no bit: optimizer state (Adam) included.
    const auto twin = train(comm, p, {0, 2, 3});
    EXPECT_TRUE(same_masters(poisoned[3], twin[2])) << "rank " << comm.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, Overflow, ::testing::Values(1, 2, 3));

TEST(Overflow, WithoutProtectionTheInfinityReachesTheMasters) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    const auto r = train(comm, PrecisionOptions(), {0, 1}, {1}, 1);
    EXPECT_EQ(r[1].skipped_steps, 0);
    EXPECT_EQ(r[1].optimizer_steps, 2);
    EXPECT_FALSE(all_finite(r[1]));
  });
}

// The scaler inside the engine: every rank moves it alike, by the rules LossScaler states.
TEST(Overflow, ScaleFollowsHysteresisAndWindowOnEveryRank) {
  zerocheck::make_world(3)->run([](Comm& comm) {
    const auto r = train(comm, protected_dynamic(2, 2), {0, 1, 2, 3, 4}, {0, 1}, 1);
    std::vector<double> scales, skipped;
    for (const auto& s : r) scales.push_back(s.scale), skipped.push_back(static_cast<double>(s.skipped_steps));
    EXPECT_EQ(scales, (std::vector<double>{16, 8, 8, 16, 16})) << "rank " << comm.rank();
    EXPECT_EQ(skipped, (std::vector<double>{1, 2, 2, 2, 2}));
    EXPECT_EQ(r[4].optimizer_steps, 3);
  });
}

// A checkpoint carries the scaler and the skipped steps (checkpoint_manifest.h): a run loaded
// from a save in the middle of a scale schedule goes on exactly as the run that saved, at the
// same world and resharded to another. Lost, the scale would restart at 2^4 and the counts at 0.
TEST(Overflow, ACheckpointCarriesTheScalerAndTheSkippedStepsAcrossWorlds) {
  const PrecisionOptions p = protected_dynamic(2, 2);
  const std::set<int64_t> poison{0, 1};
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("zerocheck_scaler_ckpt_" + std::to_string(::getpid()))).string();
  std::vector<std::vector<StepRecord>> straight(2);  // per rank: steps 2-4 of the run that saves
  zerocheck::make_world(2)->run([&](Comm& comm) {
    const auto r = train(comm, p, {0, 1, 2, 3, 4}, poison, 1, Opt::adam, {1, dir});
    straight[static_cast<size_t>(comm.rank())] = {r.begin() + 2, r.end()};
  });
  for (int world : {2, 3}) {
    zerocheck::make_world(world)->run([&](Comm& comm) {
      const auto resumed = train(comm, p, {2, 3, 4}, {}, -1, Opt::adam, {-1, dir});
      const auto& saved = straight[comm.rank() < 2 ? static_cast<size_t>(comm.rank()) : 0];
      for (size_t i = 0; i < resumed.size(); ++i) {
        SCOPED_TRACE("world " + std::to_string(world) + ", rank " + std::to_string(comm.rank()) + ", step " +
                     std::to_string(i + 2));
        EXPECT_EQ(resumed[i].scale, saved[i].scale);
        EXPECT_EQ(resumed[i].skipped_steps, saved[i].skipped_steps);
        EXPECT_EQ(resumed[i].optimizer_steps, saved[i].optimizer_steps);
        if (world == 2) {
          EXPECT_TRUE(same_masters(resumed[i], saved[i]));
        }
      }
    });
  }
  EXPECT_EQ(straight[0][0].scale, 8.0) << "the save must fall inside the schedule (16, 8, 8, 16, 16)";
  std::filesystem::remove_all(dir);
}

// A manifest bounds its skipped steps by the step() calls alone; a load bounds them by the
// optimizer steps those calls make under the loading engine's accumulation and refuses more
// (the optimizer step count would go negative), naming the field, before anything changes.
TEST(Overflow, ALoadRefusesMoreSkippedStepsThanItsAccumulationMakesOptimizerSteps) {
  const PrecisionOptions p = protected_dynamic(2, 2);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("zerocheck_skipped_ckpt_" + std::to_string(::getpid()))).string();
  zerocheck::make_world(2)->run([&](Comm& comm) {
    const auto r = train(comm, p, {0, 1}, {0, 1}, 1, Opt::adam, {1, dir});  // both skipped, saved
    EXPECT_EQ(r[1].skipped_steps, 2);
  });
  zerocheck::make_world(2)->run([&](Comm& comm) {
    auto model = two_linears();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.01));
    Config accumulating = all_partitioned();
    accumulating.gradient_accumulation_steps = 2;  // 2 step() calls: 1 optimizer step
    EngineOptions options;
    options.precision = p;
    auto engine = initialize(model, user, accumulating, comm, options);
    std::vector<at::Tensor> before;
    for (const auto& v : engine->params()) before.push_back(v.master.detach().clone());
    try {
      engine->load_checkpoint(dir);
      ADD_FAILURE() << "2 skipped steps of 1 optimizer step loaded";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("$.precision.skipped_steps is 2"), std::string::npos) << e.what();
    }
    EXPECT_EQ(engine->skipped_steps(), 0);
    EXPECT_EQ(engine->optimizer_steps(), 0);
    const auto after = engine->params();
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(after[i].master, before[i])) << i;
  });
  std::filesystem::remove_all(dir);
}

// Multiplying the loss by a power of two and the gradients by its inverse is exact: a static
// scale of 1024 trains bit-identically to none, which checks that the unscale undoes the scale.
TEST(LossScale, StaticPowerOfTwoScaleIsExactlyUndone) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    PrecisionOptions p;
    p.check_overflow = true;
    p.scaler.loss_scale = 1024;
    const auto scaled = train(comm, p, {0, 1, 2});
    const auto plain = train(comm, PrecisionOptions(), {0, 1, 2});
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(same_masters(scaled[i], plain[i])) << "step " << i;
    EXPECT_EQ(scaled[2].scale, 1024.0);
  });
}

// sqrt of the rank-summed squares of (before - after) over this rank's partitions.
double update_norm(Comm& comm, const std::vector<at::Tensor>& before, const std::vector<at::Tensor>& after) {
  at::Tensor sum = at::zeros({1}, at::kDouble);
  for (size_t i = 0; i < before.size(); ++i) sum += (before[i] - after[i]).to(at::kDouble).pow(2).sum();
  comm.all_reduce_sum(sum);
  return std::sqrt(sum.item<double>());
}

std::vector<at::Tensor> initial_masters(Comm& comm) {
  auto model = two_linears();
  torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(1.0));
  auto engine = initialize(model, user, all_partitioned(), comm);
  std::vector<at::Tensor> out;
  for (const auto& v : engine->params()) out.push_back(v.master.detach().clone());
  engine->release();
  return out;
}

// SGD with lr 1 moves the weights by the gradient itself: the update's norm is the clipped norm.
TEST(Clipping, BindsToDeepSpeedsCoefficientAndIsExactlyOffAboveTheNorm) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    const auto start = initial_masters(comm);
    PrecisionOptions measure;
    measure.check_overflow = true;
    const auto plain = train(comm, measure, {0}, {}, -1, Opt::sgd);
    const double norm = plain[0].norm;
    ASSERT_GT(norm, 0);
    // The engine's norm is the norm of the update (the fp32 subtraction rounds: 1e-6 relative).
    EXPECT_NEAR(update_norm(comm, start, plain[0].masters), norm, norm * 1e-6);

    PrecisionOptions loose = measure;
    loose.gradient_clipping = norm * 4;  // coefficient clamps to 1: not one bit moves
    EXPECT_TRUE(same_masters(train(comm, loose, {0}, {}, -1, Opt::sgd)[0], plain[0]));

    PrecisionOptions tight = measure;
    tight.gradient_clipping = norm / 4;
    const auto clipped = train(comm, tight, {0}, {}, -1, Opt::sgd);
    EXPECT_EQ(clipped[0].norm, norm);  // reported before the clip, as DeepSpeed does
    // combined = ((N / 1) + 1e-6) / C: the update's norm is C * N / (N + 1e-6).
    const double expected = tight.gradient_clipping * norm / (norm + 1e-6);
    EXPECT_NEAR(update_norm(comm, start, clipped[0].masters), expected, expected * 1e-6);
  });
}

// A DeepSpeed config's gradient_clipping is the clip EngineOptions' is (precision_in_effect);
// both set, to different values, is refused naming the key before anything changes.
TEST(Clipping, TheConfigsGradientClippingClipsAsTheOptionsDo) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    PrecisionOptions tight;
    tight.gradient_clipping = 1e-3;
    const auto by_options = train(comm, tight, {0, 1}, {}, -1, Opt::sgd);
    Config clipping = all_partitioned();
    clipping.precision.gradient_clipping = 1e-3;
    const auto by_config = train(comm, PrecisionOptions(), {0, 1}, {}, -1, Opt::sgd, {}, clipping);
    const auto unclipped = train(comm, PrecisionOptions(), {0, 1}, {}, -1, Opt::sgd);
    EXPECT_TRUE(same_masters(by_config[1], by_options[1])) << "rank " << comm.rank();
    EXPECT_FALSE(same_masters(by_config[1], unclipped[1])) << "the config's clip did not bind";

    auto model = two_linears();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(1.0));
    EngineOptions conflicting;
    conflicting.precision.gradient_clipping = 2.0;
    try {
      initialize(model, user, clipping, comm, conflicting);
      FAIL() << "two gradient_clipping values accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("gradient_clipping"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(initialize(model, user, clipping, comm));
  });
}

}  // namespace
}  // namespace zero3
