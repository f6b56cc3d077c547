// bf16 parameters and shards over an fp32 master (precision.h), at worlds 1 and 2, against the
// casts of docs/deepspeed-precision.md rules R1-R9 written out by hand on one dense copy: the
// engine must match them bit for bit, through gradient accumulation, and across a checkpoint
// saved by one world and loaded by another.
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

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace zero3 {
namespace bf16_engine_test {  // named: a unity build joins this file with precision_engine_test.cc

constexpr double kLr = 0.5;

// A rank's micro-batch at `step`, fp32 as the data arrives; both sides cast it to bf16.
std::pair<at::Tensor, at::Tensor> batch(int64_t step, int rank) {
  at::Tensor base = at::arange(6, at::kFloat).reshape({2, 3});
  return {at::sin(base * (1.0 + rank) + static_cast<double>(step)),
          at::cos(at::arange(4, at::kFloat).reshape({2, 2}) + static_cast<double>(step * 3 + rank))};
}

at::Tensor bf16_loss(const at::Tensor& output, const at::Tensor& target) {
  return (output - target.to(at::kBFloat16)).pow(2).mean();
}

struct Case {
  int world;
  c10::ScalarType accum, comm;
  int64_t gas;
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  auto short_name = [](c10::ScalarType t) { return t == at::kFloat ? std::string("fp32") : std::string("bf16"); };
  return "world" + std::to_string(c.world) + "_accum_" + short_name(c.accum) + "_comm_" + short_name(c.comm) +
         "_gas" + std::to_string(c.gas);
}

PrecisionOptions bf16_options(const Case& c) {
  PrecisionOptions p;
  p.param_dtype = at::kBFloat16;
  p.accum_dtype = c.accum;
  p.comm_dtype = c.comm;
  return p;
}

Config config_of(const Case& c) {
  Config config = all_partitioned();
  config.gradient_accumulation_steps = c.gas;
  return config;
}

// The fp32 masters after `micro_steps` micro-steps of SGD (lr kLr), by the rules, on one copy.
std::vector<at::Tensor> by_hand(const Case& c, int64_t micro_steps) {
  auto model = two_linears();
  std::vector<at::Tensor> params = unique_parameters(*model);
  std::vector<at::Tensor> masters, accum(params.size());
  for (auto& p : params) {
    at::NoGradGuard no_grad;
    p.set_data(p.detach().to(at::kBFloat16));  // R1: round to nearest even
    masters.push_back(p.detach().to(at::kFloat));  // and widened, exactly
  }
  for (int64_t step = 0; step < micro_steps; ++step) {
    std::vector<at::Tensor> sum(params.size());
    for (int rank = 0; rank < c.world; ++rank) {  // each rank's gradient from its own micro-batch
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      auto [x, y] = batch(step, rank);
      bf16_loss((*model)(x.to(at::kBFloat16)), y).backward();
      for (size_t i = 0; i < params.size(); ++i) {
        // R3: to the comm dtype, divided by W in it; the SUM in fp32, rank by rank
        at::Tensor share = params[i].grad().to(c.comm).div(c.world).to(at::kFloat);
        sum[i] = rank == 0 ? share : sum[i].add(share);
      }
    }
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      // rounded once to the comm dtype, then to the param dtype (v0.14.5), then R4
      at::Tensor reduced = sum[i].to(c.comm).to(at::kBFloat16).to(c.accum);
      accum[i] = accum[i].defined() ? accum[i].add_(reduced) : reduced;
    }
    if ((step + 1) % c.gas != 0) continue;
    for (size_t i = 0; i < params.size(); ++i) {
      masters[i].add_(accum[i].to(at::kFloat), -kLr);   // R9: SGD on fp32
      params[i].set_data(masters[i].to(at::kBFloat16));  // copied back, nearest even
      accum[i] = at::Tensor();
    }
  }
  return masters;
}

// What a rank trains: `micro_steps` micro-steps from step `first`, loading before the first when
// `load_from` is given and saving after the last when `save_to` is; the dtypes by DeepSpeed's
// config keys (precision_in_effect) when `by_config`, else by EngineOptions.
struct Schedule {
  int64_t first = 0;
  int64_t micro_steps = 0;
  std::string load_from, save_to;
  bool by_config = false;
};

// The model, the user's optimizer and the engine over them (destroyed first).
struct Trained {
  std::shared_ptr<Sequential> model;
  std::unique_ptr<torch::optim::SGD> user;
  std::unique_ptr<Engine> engine;
};

Trained train(Comm& comm, const Case& c, const Schedule& run) {
  Trained t;
  t.model = two_linears();
  t.user = std::make_unique<torch::optim::SGD>(unique_parameters(*t.model), torch::optim::SGDOptions(kLr));
  EngineOptions options;
  Config config = config_of(c);
  if (run.by_config) {
    auto name = [](c10::ScalarType type) { return std::string(type == at::kFloat ? "fp32" : "bf16"); };
    config.precision.bf16_enabled = true;
    config.precision.grad_accum_dtype = name(c.accum);
    config.precision.communication_data_type = name(c.comm);
  } else {
    options.precision = bf16_options(c);
  }
  t.engine = initialize(t.model, *t.user, config, comm, options);
  if (!run.load_from.empty()) t.engine->load_checkpoint(run.load_from);
  for (int64_t step = run.first; step < run.first + run.micro_steps; ++step) {
    auto [x, y] = batch(step, comm.rank());
    t.engine->backward(bf16_loss(t.engine->forward(x.to(at::kBFloat16)), y));
    t.engine->step();
    if ((step + 1) % c.gas == 0) t.engine->zero_grad();
  }
  if (!run.save_to.empty()) t.engine->save_checkpoint(run.save_to);
  return t;
}

// Every master of this rank is its slice of the hand-computed one; released, the model's bf16
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
    EXPECT_EQ(params[i].scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(params[i], expected[i].to(at::kBFloat16))) << views[i].path;
  }
}

// Trains `run` on every rank of a world of c.world and expects the masters `expected`.
void expect_trains_to(const Case& c, const Schedule& run, const std::vector<at::Tensor>& expected) {
  zerocheck::make_world(c.world)->run([&](Comm& comm) {
    Trained t = train(comm, c, run);
    if (run.by_config) {
      EXPECT_EQ(t.engine->precision().param_dtype, at::kBFloat16);
      EXPECT_EQ(t.engine->precision().accum_dtype, c.accum);
      EXPECT_EQ(t.engine->precision().comm_dtype, c.comm);
    }
    expect_matches(comm, t, expected);
  });
}

class Bf16Step : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Step, MatchesTheRulesByHandBitForBit) {
  const Case c = GetParam();
  expect_trains_to(c, Schedule{0, 3 * c.gas, "", ""}, by_hand(c, 3 * c.gas));
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, Bf16Step,
    ::testing::Values(Case{1, at::kFloat, at::kFloat, 1}, Case{2, at::kFloat, at::kFloat, 1},
                      Case{2, at::kBFloat16, at::kBFloat16, 2}, Case{2, at::kFloat, at::kBFloat16, 2},
                      Case{2, at::kBFloat16, at::kFloat, 2}, Case{1, at::kBFloat16, at::kBFloat16, 2}),
    name_of);

// A DeepSpeed config's bf16.enabled, grad_accum_dtype and communication_data_type train as
// EngineOptions' dtypes do.
TEST(Bf16, TheConfigsKeysTrainAsTheOptionsDo) {
  const Case c{2, at::kFloat, at::kBFloat16, 2};
  expect_trains_to(c, Schedule{0, 4, "", "", /*by_config=*/true}, by_hand(c, 4));
}

// initialize makes the model's parameters bf16, rounded to nearest even (R1), and the masters
// those values widened.
TEST(Bf16, InitializeRoundsTheParametersAndWidensTheMasters) {
  const Case c{2, at::kBFloat16, at::kBFloat16, 1};
  expect_trains_to(c, Schedule{}, by_hand(c, 0));
}

// A checkpoint keeps the fp32 masters (the bf16 shards are those rounded, always): saved at
// world 2, loaded at world 2 it resumes bit for bit; loaded at world 1 (resharded) the master
// and the bf16 parameters are the saved ones.
TEST(Bf16, ACheckpointKeepsTheMastersAndTheShardsAcrossWorlds) {
  const Case c{2, at::kBFloat16, at::kBFloat16, 1};
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("zerocheck_bf16_ckpt_" + std::to_string(::getpid()))).string();
  zerocheck::make_world(2)->run([&](Comm& comm) { train(comm, c, Schedule{0, 2, "", dir}).engine->release(); });
  expect_trains_to(c, Schedule{2, 1, dir, ""}, by_hand(c, 3));
  expect_trains_to(Case{1, at::kBFloat16, at::kBFloat16, 1}, Schedule{2, 0, dir, ""}, by_hand(c, 2));
  std::filesystem::remove_all(dir);
}

// fp16 is refused where LibTorch has no fp16 Linear on CPU, naming the key, before anything
// changes; so are 16-bit gradients over fp32 parameters and fp16 gradients of bf16 parameters.
TEST(Bf16, Fp16AndUnbuiltCombinationsAreRefusedBeforeAnythingChanges) {
  zerocheck::make_world(1)->run([](Comm& comm) {
    auto refused = [&](const PrecisionOptions& precision, const std::string& why) {
      auto model = two_linears();
      const at::Tensor before = model->parameters()[0].detach().clone();
      torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(kLr));
      EngineOptions options;
      options.precision = precision;
      try {
        initialize(model, user, all_partitioned(), comm, options);
        ADD_FAILURE() << "accepted: " << why;
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      }
      EXPECT_TRUE(at::equal(model->parameters()[0], before));
      EXPECT_EQ(model->parameters()[0].scalar_type(), at::kFloat);
      EXPECT_NO_THROW(initialize(model, user, all_partitioned(), comm));
    };
    PrecisionOptions fp16;
    fp16.param_dtype = at::kHalf;
    if (!cpu_fp16_available()) refused(fp16, "fp16.enabled");
    refused(bf16_options({1, at::kFloat, at::kHalf, 1}), "must each be Float or the parameter dtype");
    PrecisionOptions bf16_grads_only;
    bf16_grads_only.comm_dtype = at::kBFloat16;
    refused(bf16_grads_only, "needs 16-bit parameters");
  });
}

// bf16 with a placed module is refused before anything changes: its gradients are summed on the
// owner, not reduced by R3.
TEST(Bf16, PlacedModulesAreRefused) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    auto root = std::make_shared<Sequential>();
    auto expert = std::make_shared<Expert>(3, 3);
    expert->attrs().set("id", int64_t{1});
    root->push_back(expert);
    init_parameters(*root, 3);
    torch::optim::SGD user(unique_parameters(*root), torch::optim::SGDOptions(kLr));
    EngineOptions options;
    options.precision = bf16_options({2, at::kBFloat16, at::kBFloat16, 1});
    try {
      initialize(root, user, placed_by_id(), comm, options);
      ADD_FAILURE() << "bf16 with a placed expert accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("placed modules are fp32 only"), std::string::npos) << e.what();
    }
    EXPECT_EQ(root->parameters()[0].scalar_type(), at::kFloat);
    EXPECT_NO_THROW(initialize(root, user, placed_by_id(), comm));
  });
}

}  // namespace bf16_engine_test
}  // namespace zero3
