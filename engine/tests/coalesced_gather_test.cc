// The coalesced gather of a module fetch (engine/coalesced_gather.h): one all-gather per fetch,
// every gathered bit the shard's, as when each parameter was gathered alone.
#include <gtest/gtest.h>

#include "engine/coalesced_gather.h"
#include "engine/engine.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/fault_under_test.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

namespace zero3 {
namespace {

// Shards of 3, 0, 5 and 1 elements (a zero-size parameter among them), each rank's distinct:
// the coalesced gather is one collective moving the same elements as four, with the same bits,
// each parameter in storage of its own.
TEST(CoalescedGather, OneAllGatherGivesEachParameterWhatItsOwnGatherGives) {
  for (int world : {1, 2, 3, 4}) {
    zerocheck::make_world(world)->run([&](Comm& comm) {
      std::vector<at::Tensor> shards;
      for (int64_t c : {3, 0, 5, 1})
        shards.push_back(at::arange(c, at::kFloat).add(100.0 * comm.rank() + 10.0 * static_cast<double>(shards.size())));
      std::vector<at::Tensor> alone;
      const CommStats before_alone = comm.stats();
      for (const at::Tensor& s : shards) {
        at::Tensor full = at::empty({s.numel() * world});
        comm.all_gather(s, full);
        alone.push_back(full);
      }
      const CommStats before = comm.stats();
      const std::vector<at::Tensor> got = all_gather_coalesced(comm, shards);
      const CommStats after = comm.stats();
      EXPECT_EQ(after.all_gathers - before.all_gathers, 1) << "world " << world;
      EXPECT_EQ(after.all_gather_elements - before.all_gather_elements,
                before.all_gather_elements - before_alone.all_gather_elements) << "world " << world;
      ASSERT_EQ(got.size(), shards.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(at::equal(got[i], alone[i])) << "world " << world << ", parameter " << i;
        EXPECT_EQ(got[i].storage().nbytes(), static_cast<size_t>(shards[i].numel() * world * 4))
            << "world " << world << ", parameter " << i << ": a view into the flat buffer keeps all of it";
      }
    });
  }
}

// two_linears(): a Sequential without parameters around two Linears (weight and bias each,
// every one partitioned). A forward fetches each Linear once, a backward re-fetches each once:
// two all-gathers each way, whatever the world.
TEST(CoalescedGather, EachModuleFetchIsOneAllGather) {
  for (int world : {1, 2, 3}) {
    zerocheck::make_world(world)->run([&](Comm& comm) {
      auto model = two_linears();
      torch::optim::SGD user(unique_parameters(*model), torch::optim::SGDOptions(0.1));
      auto engine = initialize(model, user, all_partitioned(), comm, EngineOptions{zerocheck::fault_under_test()});
      const CommStats start = comm.stats();
      at::Tensor out = engine->forward(at::full({2, 3}, static_cast<double>(comm.rank() + 1)));
      const CommStats forward = comm.stats();
      engine->backward(out.pow(2).sum());
      const CommStats backward = comm.stats();
      EXPECT_EQ(forward.all_gathers - start.all_gathers, 2) << "forward, world " << world;
      EXPECT_EQ(backward.all_gathers - forward.all_gathers, 2) << "backward, world " << world;
    });
  }
}

}  // namespace
}  // namespace zero3
