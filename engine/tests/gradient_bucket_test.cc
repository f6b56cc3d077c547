// The gradient bucket (engine/gradient_bucket.h): how many reduce-scatters a backward issues for a
// given reduce_bucket_size, and that the bucket size changes no bit of the gradients or weights.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <mutex>

namespace zero3 {
namespace {

Config with_bucket(int64_t reduce_bucket_size) {
  Config c = all_partitioned();
  c.zero_optimization.reduce_bucket_size = reduce_bucket_size;
  return c;
}

struct OneBackward {
  int64_t reduce_scatters = 0;
  int64_t reduce_scatter_elements = 0;
  std::vector<at::Tensor> grad_shards;  // params() order
};

// One forward and backward of two_linears() on every rank of a world of `world`; rank r's input
// is r + 1 everywhere. Returns each rank's count of reduce-scatters and its shard gradients.
std::vector<OneBackward> one_backward(int world, int64_t reduce_bucket_size) {
  std::vector<OneBackward> by_rank(static_cast<size_t>(world));
  zerocheck::make_world(world)->run([&](Comm& comm) {
    auto model = two_linears();
    torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(0.1));
    auto engine = initialize(model, user, with_bucket(reduce_bucket_size), comm,
                             EngineOptions{zerocheck::fault_under_test()});
    const CommStats before = comm.stats();
    at::Tensor out = engine->forward(at::full({2, 3}, static_cast<double>(comm.rank() + 1)));
    engine->backward(out.pow(2).sum());
    OneBackward& mine = by_rank[static_cast<size_t>(comm.rank())];
    mine.reduce_scatters = comm.stats().reduce_scatters - before.reduce_scatters;
    mine.reduce_scatter_elements = comm.stats().reduce_scatter_elements - before.reduce_scatter_elements;
    for (const auto& p : engine->params()) mine.grad_shards.push_back(p.grad_shard.clone());
  });
  return by_rank;
}

// two_linears()'s gradients become ready a layer at a time, the last layer first: 1.weight (10
// elements) and 1.bias (2), then 0.weight (15) and 0.bias (5); within a layer in either order,
// which changes none of these counts. DeepSpeed's rule: a gradient that would take a non-empty
// bucket past the size flushes it first; the backward's end flushes the rest.
TEST(GradientBucket, ReduceScattersFollowDeepSpeedsBucketRule) {
  const std::vector<std::pair<int64_t, int64_t>> size_and_count = {
      {500000000, 1},  // everything in one bucket (the default)
      {32, 1},         // exactly the 32 elements
      {31, 2},         // the last gradient of the backward overflows
      {12, 3},         // the last layer fills one bucket exactly; the first layer's two do not fit together
      {11, 4},         // nothing fits together: one reduce-scatter per gradient
      {0, 4},          // 0: every gradient alone
  };
  for (int world : {1, 2, 3}) {
    const std::vector<OneBackward> alone = one_backward(world, 0);
    for (const auto& [size, count] : size_and_count) {
      const std::vector<OneBackward> got = one_backward(world, size);
      for (int r = 0; r < world; ++r) {
        const OneBackward& here = got[static_cast<size_t>(r)];
        const OneBackward& reference = alone[static_cast<size_t>(r)];
        EXPECT_EQ(here.reduce_scatters, count) << "reduce_bucket_size " << size << ", world " << world << ", rank " << r;
        // Each gradient padded to chunk*N as when reduced alone: the same elements move.
        EXPECT_EQ(here.reduce_scatter_elements, reference.reduce_scatter_elements) << "reduce_bucket_size " << size;
        ASSERT_EQ(here.grad_shards.size(), reference.grad_shards.size());
        for (size_t i = 0; i < here.grad_shards.size(); ++i)
          EXPECT_TRUE(at::equal(here.grad_shards[i], reference.grad_shards[i]))
              << "reduce_bucket_size " << size << ", world " << world << ", rank " << r << ", parameter " << i;
      }
    }
  }
}

// The odd model (a tied Linear, a zero-size and a one-element parameter, a LayerNorm) trained
// three Adam steps at world 3: every bucket size gives the same fp32 masters, bit for bit.
TEST(GradientBucket, BucketSizeChangesNoBitOfTraining) {
  auto masters_after_training = [](int64_t reduce_bucket_size) {
    std::vector<std::vector<at::Tensor>> by_rank(3);
    zerocheck::make_world(3)->run([&](Comm& comm) {
      const auto spec = zerocheck::model_spec("odd");
      auto model = spec.build(4);
      torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.05));
      Config config = with_bucket(reduce_bucket_size);
      config.zero_optimization.stage3_param_persistence_threshold = 1;  // the one-element one stays whole
      auto engine = initialize(model, user, config, comm, EngineOptions{zerocheck::fault_under_test()});
      for (int64_t s = 0; s < 3; ++s) zerocheck::train_step(*engine, spec, 9, s, comm.rank());
      for (const auto& p : engine->params()) by_rank[static_cast<size_t>(comm.rank())].push_back(p.master.clone());
    });
    return by_rank;
  };
  const auto reference = masters_after_training(500000000);
  for (int64_t size : {0, 1, 7, 13, 40, 100}) {
    const auto got = masters_after_training(size);
    for (size_t r = 0; r < got.size(); ++r)
      for (size_t i = 0; i < got[r].size(); ++i)
        EXPECT_TRUE(at::equal(got[r][i], reference[r][i])) << "reduce_bucket_size " << size << ", rank " << r << ", parameter " << i;
  }
}

}  // namespace
}  // namespace zero3
