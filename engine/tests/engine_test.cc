// initialize's checks and the engine's promises that do not need a dense baseline.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/tests/test_configs.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

namespace zero3 {
namespace {

template <class Body>
void on_one_rank(Body&& body) {
  zerocheck::make_world(1)->run([&](Comm& comm) { body(comm); });
}

std::string mismatch_of(const std::shared_ptr<Module>& model, torch::optim::Optimizer& optimizer,
                        Comm& comm) {
  try {
    initialize(model, optimizer, Config(), comm);
  } catch (const OptimizerMismatch& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Initialize, OptimizerMustCoverExactlyTheTrainableParameters) {
  on_one_rank([](Comm& comm) {
    auto model = two_linears();
    auto params = unique_parameters(*model);

    std::vector<at::Tensor> missing(params.begin(), params.end() - 1);
    torch::optim::Adam partial(missing, torch::optim::AdamOptions(0.1));
    EXPECT_NE(mismatch_of(model, partial, comm).find("'1.bias' is trainable but not in the optimizer"),
              std::string::npos);

    auto extra = params;
    extra.push_back(at::zeros({3}).requires_grad_(true));
    torch::optim::Adam foreign(extra, torch::optim::AdamOptions(0.1));
    EXPECT_NE(mismatch_of(model, foreign, comm).find("is not a parameter of the model"),
              std::string::npos);

    auto twice = params;
    twice.push_back(params[0]);
    torch::optim::SGD duplicated(twice, torch::optim::SGDOptions(0.1));
    EXPECT_NE(mismatch_of(model, duplicated, comm).find("appears twice"), std::string::npos);

    params[0].set_requires_grad(false);
    torch::optim::Adam with_frozen(params, torch::optim::AdamOptions(0.1));
    EXPECT_NE(mismatch_of(model, with_frozen, comm).find("'0.weight') is frozen"), std::string::npos);
  });
}

TEST(Initialize, RebuildsTheUsersOptimizerKindAndOptions) {
  on_one_rank([](Comm& comm) {
    auto model = two_linears();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(0.25).momentum(0.5));
    const Config config = all_partitioned();
    auto engine = initialize(model, user, config, comm);
    auto* sgd = dynamic_cast<torch::optim::SGD*>(&engine->optimizer());
    ASSERT_NE(sgd, nullptr);
    const auto& options =
        static_cast<const torch::optim::SGDOptions&>(sgd->param_groups().at(0).options());
    EXPECT_EQ(options.lr(), 0.25);
    EXPECT_EQ(options.momentum(), 0.5);
    // It steps the engine's fp32 shards, not the user's tensors.
    const auto views = engine->params();
    const auto& stepped = sgd->param_groups().at(0).params();
    ASSERT_EQ(stepped.size(), views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      EXPECT_TRUE(stepped[i].is_same(views[i].master)) << views[i].path;
      EXPECT_FALSE(stepped[i].is_same(views[i].param)) << views[i].path;
      EXPECT_EQ(stepped[i].dim(), 1) << views[i].path;
    }
  });
}

TEST(Initialize, BadConfigIsAConfigErrorNamingTheKey) {
  on_one_rank([](Comm& comm) {
    auto model = two_linears();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    Config c = Config::parse(R"({"train_batch_size": 3})");
    try {
      initialize(model, user, c, comm);
      FAIL() << "accepted a train_batch_size that disagrees with the world";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("$.train_batch_size: 3 != ", 0), 0u) << e.what();
    }
  });
}

// A config checked after the engine has partitioned the model: the refusal gives the model its
// data back and takes its hooks off, so the user's own forward and a valid initialize still work.
TEST(Initialize, RefusedConfigLeavesTheModelAsItWas) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    auto model = two_linears();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    std::vector<at::Tensor> before;
    for (const auto& p : unique_parameters(*model)) before.push_back(p.detach().clone());
    Config bad = all_partitioned();
    bad.zero_optimization.stage = 4;
    try {
      initialize(model, user, bad, comm);
      FAIL() << "accepted zero_optimization.stage 4";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("$.zero_optimization.stage: value 4 is out of range", 0), 0u) << e.what();
    }
    const auto after = unique_parameters(*model);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_TRUE(after[i].sizes() == before[i].sizes() && at::equal(after[i].detach(), before[i]))
          << "parameter " << i << " is not as it was";
      EXPECT_TRUE(after[i].requires_grad());
    }
    EXPECT_NO_THROW((*model)(at::ones({2, 3})));
    auto engine = initialize(model, user, all_partitioned(), comm);  // the registry holds nothing of it
    EXPECT_EQ(engine->params().size(), before.size());
  });
}

TEST(Engine, ReleasedEngineRefusesWorkAndRestoresTheModel) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    auto model = two_linears();
    auto reference = two_linears();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    auto engine = initialize(model, user, all_partitioned(), comm);
    engine->release();
    EXPECT_TRUE(engine->released());
    EXPECT_THROW(engine->forward(at::ones({1, 3})), UsageError);
    auto restored = unique_parameters(*model);
    auto expected = unique_parameters(*reference);
    for (size_t i = 0; i < restored.size(); ++i) EXPECT_TRUE(at::equal(restored[i], expected[i]));
    engine->release();  // idempotent
  });
}

}  // namespace
}  // namespace zero3
