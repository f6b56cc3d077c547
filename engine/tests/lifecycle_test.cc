// The schedule, observed from inside: full data exactly while a module runs forward and
// backward, empty otherwise, and GatheredParameters for reading.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/fault_under_test.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

namespace zero3 {
namespace {

// A Linear that records how many elements its weight holds when its forward runs.
class ProbeLinear final : public Module {
 public:
  ProbeLinear() : Module("ProbeLinear") {
    weight = register_parameter("weight", at::zeros({4, 4}));
  }
  at::Tensor weight;
  std::vector<int64_t> seen_numel;

 protected:
  at::Tensor forward(const at::Tensor& input, Route&) override {
    seen_numel.push_back(weight.numel());
    return at::linear(input, weight);
  }
};

// A shard's size from the spec, ceil(n/N), never from the engine's own layout.
int64_t spec_chunk(const std::vector<int64_t>& shape, int world) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return (numel + world - 1) / world;
}

TEST(Lifecycle, FullDataOnlyWhileTheModuleRuns) {
  zerocheck::make_world(3)->run([](Comm& comm) {
    auto probe = std::make_shared<ProbeLinear>();
    auto root = std::make_shared<Sequential>();
    root->push_back(probe);
    root->push_back(std::make_shared<Linear>(4, 2));
    init_parameters(*root, 5);
    torch::optim::Adam user(unique_parameters(*root), torch::optim::AdamOptions(0.1));
    auto engine = initialize(root, user, all_partitioned(), comm,
                             EngineOptions{zerocheck::fault_under_test()});
    for (const auto& p : engine->params()) {
      ASSERT_EQ(p.param.numel(), 0) << p.path;
      ASSERT_EQ(p.status, ParamStatus::NotAvailable);
      ASSERT_EQ(p.master.numel(), spec_chunk(p.shape, comm.world_size()));
    }
    at::Tensor y = engine->forward(at::ones({2, 4}));
    ASSERT_EQ(probe->seen_numel, std::vector<int64_t>{16});
    for (const auto& p : engine->params()) ASSERT_EQ(p.param.numel(), 0) << p.path;
    engine->backward(y.pow(2).sum());
    for (const auto& p : engine->params()) {
      ASSERT_EQ(p.param.numel(), 0) << p.path << " leaked past backward";
      ASSERT_FALSE(p.param.grad().defined()) << p.path << " kept its full gradient";
      ASSERT_TRUE(p.grad_shard.defined()) << p.path;
      ASSERT_EQ(p.grad_shard.numel(), spec_chunk(p.shape, comm.world_size()));
    }
    {
      GatheredParameters gathered(*engine, *probe);
      ASSERT_EQ(probe->weight.numel(), 16);
    }
    ASSERT_EQ(probe->weight.numel(), 0);
  });
}

// An edit inside a gathered scope: kept on every rank, as the modifier rank made it, only when
// published; dropped otherwise.
TEST(Lifecycle, GatheredEditsArePublishedFromTheModifierRankOrDropped) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    auto model = std::make_shared<Sequential>();
    model->push_back(std::make_shared<Linear>(4, 4));
    model->push_back(std::make_shared<Linear>(4, 2));
    init_parameters(*model, 5);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    auto engine = initialize(model, user, all_partitioned(), comm);
    auto whole = [&] {
      std::vector<at::Tensor> out;
      GatheredParameters gathered(*engine, *model);
      for (const auto& p : unique_parameters(*model)) out.push_back(p.detach().clone());
      return out;
    };
    const auto before = whole();
    {
      GatheredParameters gathered(*engine, *model);  // no modifier rank: every rank edits its own copy
      at::NoGradGuard no_grad;
      for (auto& p : unique_parameters(*model)) p.mul_(3.0);
      EXPECT_THROW(gathered.publish_edits(), UsageError);
    }
    const auto unchanged = whole();
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(unchanged[i], before[i])) << i;
    {
      GatheredParameters gathered(*engine, *model, /*modifier_rank=*/1);
      if (comm.rank() == 1) {
        at::NoGradGuard no_grad;
        for (auto& p : unique_parameters(*model)) p.mul_(2.0);
      }
      gathered.publish_edits();
      EXPECT_THROW(gathered.publish_edits(), UsageError);
    }
    for (const auto& p : engine->params()) EXPECT_EQ(p.param.numel(), 0) << p.path << " stayed gathered";
    const auto edited = whole();
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(edited[i], before[i] * 2.0)) << i;
    EXPECT_THROW(GatheredParameters(*engine, *model, 2), UsageError);
  });
}

TEST(Lifecycle, PersistentParametersStayWhole) {
  zerocheck::make_world(2)->run([](Comm& comm) {
    auto root = std::make_shared<Sequential>();
    root->push_back(std::make_shared<Linear>(4, 4));  // weight 16 > 4 partitioned, bias 4 kept
    init_parameters(*root, 1);
    torch::optim::Adam user(unique_parameters(*root), torch::optim::AdamOptions(0.1));
    Config c;
    c.zero_optimization.stage3_param_persistence_threshold = 4;
    auto engine = initialize(root, user, c, comm);
    for (const auto& p : engine->params()) {
      if (p.path == "0.bias") {
        ASSERT_TRUE(p.persistent);
        ASSERT_EQ(p.param.numel(), 4);
      } else {
        ASSERT_FALSE(p.persistent) << p.path;
        ASSERT_EQ(p.param.numel(), 0);
      }
    }
  });
}

TEST(Lifecycle, ModuleIdsComeFromAPerEngineCounterNotUserAttributes) {
  zerocheck::make_world(1)->run([](Comm& comm) {
    auto make = [] {
      auto root = std::make_shared<Sequential>();
      root->push_back(std::make_shared<Linear>(2, 2));
      root->push_back(std::make_shared<Linear>(2, 2));
      init_parameters(*root, 1);
      return root;
    };
    auto a = make(), b = make();
    torch::optim::Adam oa(unique_parameters(*a), torch::optim::AdamOptions(0.1));
    torch::optim::Adam ob(unique_parameters(*b), torch::optim::AdamOptions(0.1));
    auto ea = initialize(a, oa, Config(), comm);
    auto eb = initialize(b, ob, Config(), comm);
    ASSERT_EQ(ea->module_id(*a), 0);
    ASSERT_EQ(eb->module_id(*b), 0);  // two engines, two independent counters
    ASSERT_EQ(eb->module_id(*b->at(1)), 2);
    ASSERT_THROW(ea->module_id(*b), UsageError);
    for (auto* root : {a.get(), b.get()}) {
      ASSERT_TRUE(root->attrs().empty());
      for (const auto& [name, child] : root->named_zero3_children()) ASSERT_TRUE(child->attrs().empty());
    }
  });
}

}  // namespace
}  // namespace zero3
