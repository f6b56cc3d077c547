// DeepSpeed's memory knobs in the engine: the forward's prefetch, live-parameter limit and reuse
// distance (engine/fetch_coordinator.h) and the optimizer's sub-groups (engine/sub_groups.h).
// Each trades what a rank holds or when it gathers, never a bit of the result.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/sub_groups.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/training.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <mutex>

namespace zero3 {
namespace {

// Linear 3->5, 5->4, 4->2 in a Sequential: three module fetches a forward.
std::shared_ptr<Sequential> three_linears() {
  auto root = std::make_shared<Sequential>();
  root->push_back(std::make_shared<Linear>(3, 5));
  root->push_back(std::make_shared<Linear>(5, 4));
  root->push_back(std::make_shared<Linear>(4, 2));
  init_parameters(*root, 7);
  return root;
}

// One Linear 4->4 called twice by its Sequential: a module used again at the next step.
std::shared_ptr<Sequential> linear_used_twice() {
  auto root = std::make_shared<Sequential>();
  auto shared = std::make_shared<Linear>(4, 4);
  root->push_back(shared);
  root->push_back(shared);
  init_parameters(*root, 5);
  return root;
}

Config with_knobs(int64_t prefetch, int64_t max_live, int64_t reuse, int64_t sub_group = 1000000000) {
  Config c = all_partitioned();
  c.zero_optimization.stage3_prefetch_bucket_size = prefetch;
  c.zero_optimization.stage3_max_live_parameters = max_live;
  c.zero_optimization.stage3_max_reuse_distance = reuse;
  c.zero_optimization.sub_group_size = sub_group;
  return c;
}

// What a run leaves: by rank, every loss's bits and every fp32 master at the end.
struct RunResult {
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<at::Tensor>> masters;
};

// Three Adam steps of `build()`'s model under `config` in a world of `world` ranks.
RunResult train(int world, const Config& config, const std::function<std::shared_ptr<Sequential>()>& build,
                int64_t features) {
  RunResult result;
  result.losses.resize(static_cast<size_t>(world));
  result.masters.resize(static_cast<size_t>(world));
  std::mutex mutex;
  zerocheck::make_world(world)->run([&](Comm& comm) {
    auto model = build();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.05));
    auto engine = initialize(model, user, config, comm, EngineOptions{zerocheck::fault_under_test()});
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) {
      at::Tensor input = at::linspace(-1.0, 1.0 + comm.rank() + i, 2 * features).view({2, features});
      at::Tensor loss = engine->forward(input).pow(2).sum();
      losses.push_back(loss.item<double>());
      engine->backward(loss);
      engine->step();
    }
    std::vector<at::Tensor> masters;
    for (const auto& p : engine->params()) masters.push_back(p.master.clone());
    std::lock_guard<std::mutex> lock(mutex);
    result.losses[static_cast<size_t>(comm.rank())] = losses;
    result.masters[static_cast<size_t>(comm.rank())] = masters;
  });
  return result;
}

void expect_same_bits(const RunResult& want, const RunResult& got, const std::string& what, const char* kill_text) {
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t r = 0; r < want.losses.size(); ++r) {
    EXPECT_EQ(want.losses[r], got.losses[r]) << kill_text << ": " << what << ", rank " << r << " losses";
    ASSERT_EQ(want.masters[r].size(), got.masters[r].size());
    for (size_t i = 0; i < want.masters[r].size(); ++i)
      EXPECT_TRUE(at::equal(want.masters[r][i], got.masters[r][i]))
          << kill_text << ": " << what << ", rank " << r << " master " << i;
  }
}

// Whatever the prefetch, live and reuse knobs say (off, DeepSpeed's defaults, at and around the
// model's sizes), losses and masters keep every bit of the run without prefetch.
TEST(Knobs, PrefetchAndLimitsMoveNoBit) {
  for (int world : {1, 2, 3}) {
    const RunResult reference = train(world, with_knobs(0, 1000000000, 0), three_linears, 3);
    for (const Config& c : {with_knobs(50000000, 1000000000, 1000000000), with_knobs(1, 1000000000, 0),
                            with_knobs(15, 20, 5), with_knobs(25, 0, 1), with_knobs(1000, 1000, 1000)})
      expect_same_bits(reference, train(world, c, three_linears, 3),
                       "world " + std::to_string(world) + ", prefetch " +
                           std::to_string(c.zero_optimization.stage3_prefetch_bucket_size) + ", live " +
                           std::to_string(c.zero_optimization.stage3_max_live_parameters) + ", reuse " +
                           std::to_string(c.zero_optimization.stage3_max_reuse_distance),
                       "prefetch or limits moved a bit");
    const RunResult twice = train(world, with_knobs(0, 1000000000, 0), linear_used_twice, 4);
    expect_same_bits(twice, train(world, with_knobs(16, 1000000000, 1000000000), linear_used_twice, 4),
                     "world " + std::to_string(world) + ", a module used twice", "prefetch or limits moved a bit");
  }
}

// The all-gathers of a first and a second forward of `build()`'s model under `config`, and the
// elements they move.
struct Gathers {
  int64_t first = 0, second = 0, first_elements = 0, second_elements = 0;
};
Gathers gathers(int world, const Config& config, const std::function<std::shared_ptr<Sequential>()>& build,
                int64_t features) {
  Gathers g;
  zerocheck::make_world(world)->run([&](Comm& comm) {
    auto model = build();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(0.1));
    auto engine = initialize(model, user, config, comm, EngineOptions{zerocheck::fault_under_test()});
    const at::Tensor input = at::ones({2, features});
    const CommStats start = comm.stats();
    engine->forward(input);
    const CommStats first = comm.stats();
    engine->forward(input);
    const CommStats second = comm.stats();
    if (comm.rank() != 0) return;
    g.first = first.all_gathers - start.all_gathers;
    g.second = second.all_gathers - first.all_gathers;
    g.first_elements = first.all_gather_elements - start.all_gather_elements;
    g.second_elements = second.all_gather_elements - first.all_gather_elements;
    for (const auto& p : engine->params())  // the forward's end releases what it kept
      EXPECT_EQ(p.param.numel(), 0) << p.path << " stays gathered after the forward";
  });
  return g;
}

// The first forward records the trace and fetches each Linear alone; the second prefetches all
// three Linears' parameters at its first step (the root, which has none): one all-gather of the
// same elements.
TEST(Knobs, PrefetchGathersTheNextModulesAhead) {
  for (int world : {1, 2, 3}) {
    const Gathers off = gathers(world, with_knobs(0, 1000000000, 0), three_linears, 3);
    const Gathers on = gathers(world, with_knobs(50000000, 1000000000, 0), three_linears, 3);
    EXPECT_EQ(off.first, 3) << "world " << world;
    EXPECT_EQ(off.second, 3) << "world " << world;
    EXPECT_EQ(on.first, 3) << "world " << world << ": the first forward has no trace";
    EXPECT_EQ(on.second, 1) << "world " << world;
    EXPECT_EQ(on.second_elements, off.second_elements) << "world " << world << ": a prefetch moves the same elements";
  }
}

// With stage3_max_live_parameters 0 the prefetch takes nothing: three fetches, as without it.
// Just above the first Linear's 20 elements, it takes that Linear (15 + 5 elements; the check is
// before each entry, so the weight alone brings it to 15 and the bias still joins) and stops.
TEST(Knobs, LiveLimitStopsThePrefetch) {
  for (int world : {1, 2, 3}) {
    const Gathers none = gathers(world, with_knobs(50000000, 0, 0), three_linears, 3);
    EXPECT_EQ(none.second, 3) << "the prefetch went past stage3_max_live_parameters: world " << world;
    const Gathers one = gathers(world, with_knobs(50000000, 16, 0), three_linears, 3);
    // root: prefetch weight 0 (15 < 16: go on) and bias 0 (20): one all-gather; Linear 0: its
    // own are there, the budget 16 - 20 < 0; Linear 1 and 2: one fetch each.
    EXPECT_EQ(one.second, 3) << "the prefetch went past stage3_max_live_parameters: world " << world;
    EXPECT_EQ(one.second_elements, none.second_elements) << "world " << world;
  }
}

// A Linear called twice in a row: within the reuse distance it stays gathered for its second
// call (one all-gather), at distance 0 it is released and gathered again (two). The first
// forward, with no trace, always releases.
TEST(Knobs, ReuseDistanceKeepsAModuleUsedAgain) {
  for (int world : {1, 2, 3}) {
    const Gathers near = gathers(world, with_knobs(0, 1000000000, 1000000000), linear_used_twice, 4);
    const Gathers far = gathers(world, with_knobs(0, 1000000000, 0), linear_used_twice, 4);
    EXPECT_EQ(near.first, 2) << "world " << world;
    EXPECT_EQ(near.second, 1) << "world " << world;
    EXPECT_EQ(far.second, 2) << "world " << world;
    EXPECT_EQ(2 * near.second_elements, far.second_elements) << "world " << world;
  }
}

// Every sub-group size, one element up to all of them: Adam's steps a sub-group at a time give
// the bits of one step over the whole partition.
TEST(SubGroups, StepLikeOneGroup) {
  for (int world : {1, 2, 3}) {
    const RunResult whole = train(world, with_knobs(0, 1000000000, 0), three_linears, 3);
    for (int64_t size : {1, 4, 5, 20})
      expect_same_bits(whole, train(world, with_knobs(0, 1000000000, 0, size), three_linears, 3),
                       "world " + std::to_string(world) + ", sub_group_size " + std::to_string(size),
                       "sub-groups moved a bit");
  }
}

// DeepSpeed's cut (stage3.py:904-927 (v0.14.5)): a sub-group closes after the parameter that
// brings it to sub_group_size partition elements, and after the last; one group when the size
// reaches the total.
TEST(SubGroups, CutAfterTheParameterThatReachesTheSize) {
  std::vector<std::unique_ptr<ManagedParam>> params;
  for (int64_t chunk : {3, 2, 4, 1}) {
    auto p = std::make_unique<ManagedParam>();
    p->layout = ShardLayout::of(chunk * 2, 2);  // chunk elements per rank
    p->trainable = true;
    p->master = at::zeros({chunk});
    params.push_back(std::move(p));
  }
  auto sizes = [&](int64_t sub_group_size) {
    std::vector<size_t> out;
    for (const auto& g : sub_groups_of(params, sub_group_size)) out.push_back(g.size());
    return out;
  };
  EXPECT_EQ(sizes(1), (std::vector<size_t>{1, 1, 1, 1}));
  EXPECT_EQ(sizes(5), (std::vector<size_t>{2, 2}));
  EXPECT_EQ(sizes(6), (std::vector<size_t>{3, 1}));
  EXPECT_EQ(sizes(10), (std::vector<size_t>{4}));
  EXPECT_EQ(sizes(1000), (std::vector<size_t>{4}));
  params[1]->trainable = false;  // a frozen parameter steps in no sub-group
  EXPECT_EQ(sizes(1), (std::vector<size_t>{1, 1, 1}));
}

}  // namespace
}  // namespace zero3
