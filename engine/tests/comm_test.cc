// Both Comm implementations, through the same tests: results, rank-order sums, element
// accounting, and failing fast.
#include <gtest/gtest.h>

#include "engine/comm.h"
#include "engine/errors.h"
#include "harness/world.h"

#include <ATen/ATen.h>

#include <chrono>
#include <thread>

namespace zero3 {
namespace {

using zerocheck::CommKind;
using zerocheck::RankFailure;
using zerocheck::run_world;
using zerocheck::WorldOptions;

// How the ranks run: LocalComm threads, Gloo threads, or LocalComm fibers of one thread
// (harness/fiber_world.h).
enum class Ranks { local, gloo, local_fibers };

class CommTest : public ::testing::TestWithParam<std::tuple<Ranks, int>> {
 protected:
  WorldOptions options() const {
    WorldOptions o;
    o.comm = std::get<0>(GetParam()) == Ranks::gloo ? CommKind::gloo : CommKind::local;
    o.ranks_as_fibers = std::get<0>(GetParam()) == Ranks::local_fibers;
    o.world_size = std::get<1>(GetParam());
    o.timeout = std::chrono::milliseconds(20000);
    return o;
  }
};

TEST_P(CommTest, AllGatherConcatenatesShardsInRankOrder) {
  run_world(options(), [](Comm& comm) {
    const int n = comm.world_size();
    at::Tensor shard = at::full({3}, static_cast<float>(comm.rank() + 1));
    at::Tensor out = at::empty({3 * n});
    comm.all_gather(shard, out);
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(at::equal(out.narrow(0, 3 * r, 3), at::full({3}, static_cast<float>(r + 1))));
    ASSERT_EQ(comm.stats().all_gather_elements, 3 * n);
  });
}

TEST_P(CommTest, ReduceScatterSumsInRankOrderAndMovesOneBuffer) {
  run_world(options(), [](Comm& comm) {
    const int n = comm.world_size();
    // Values chosen so that float addition is order-sensitive: a rank-order sum is checked
    // against the same sum done locally in rank order.
    auto input_of = [&](int r) {
      return at::arange(0, 4 * n, at::kFloat).mul(0.1f).add(static_cast<float>(r) * 1e7f);
    };
    at::Tensor out = at::empty({4});
    comm.reduce_scatter_sum(input_of(comm.rank()), out);
    at::Tensor expected = input_of(0).narrow(0, 4 * comm.rank(), 4).clone();
    for (int r = 1; r < n; ++r) expected.add_(input_of(r).narrow(0, 4 * comm.rank(), 4));
    ASSERT_TRUE(at::equal(out, expected));
    // A ring reduce-scatter's worth: one buffer, never all-reduce's two.
    ASSERT_EQ(comm.stats().reduce_scatter_elements, 4 * n);
    ASSERT_EQ(comm.stats().all_reduce_elements, 0);
  });
}

TEST_P(CommTest, AllReduceAllToAllAndBroadcast) {
  run_world(options(), [](Comm& comm) {
    const int n = comm.world_size();
    at::Tensor t = at::full({5}, static_cast<float>(comm.rank()));
    comm.all_reduce_sum(t);
    ASSERT_TRUE(at::equal(t, at::full({5}, static_cast<float>(n * (n - 1) / 2))));

    at::Tensor in = at::arange(0, 2 * n, at::kFloat).add(100.0f * static_cast<float>(comm.rank()));
    at::Tensor out = at::empty({2 * n});
    comm.all_to_all(in, out);
    for (int j = 0; j < n; ++j)
      ASSERT_TRUE(at::equal(out.narrow(0, 2 * j, 2),
                            at::arange(2 * comm.rank(), 2 * comm.rank() + 2, at::kFloat)
                                .add(100.0f * static_cast<float>(j))));

    at::Tensor b = comm.rank() == n - 1 ? at::full({2}, 42.0f) : at::zeros({2});
    comm.broadcast(b, n - 1);
    ASSERT_TRUE(at::equal(b, at::full({2}, 42.0f)));
    comm.barrier();
  });
}

TEST_P(CommTest, AFailingRankMakesPeersFailFastWithItsError) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run_world(options(), [](Comm& comm) {
      if (comm.rank() == comm.world_size() - 1) throw UsageError("planted failure");
      at::Tensor t = at::ones({4});
      comm.all_reduce_sum(t);  // peers wait here for the rank that never comes
    });
    FAIL() << "the world did not report the failure";
  } catch (const RankFailure& e) {
    EXPECT_EQ(e.rank(), std::get<1>(GetParam()) - 1);
    EXPECT_NE(std::string(e.what()).find("planted failure"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

INSTANTIATE_TEST_SUITE_P(
    LocalGlooAndFibers, CommTest,
    ::testing::Combine(::testing::Values(Ranks::local, Ranks::gloo, Ranks::local_fibers), ::testing::Values(1, 2, 3, 5)),
    [](const auto& info) {
      const Ranks ranks = std::get<0>(info.param);
      const char* name = ranks == Ranks::local ? "local" : ranks == Ranks::gloo ? "gloo" : "local_fibers";
      return std::string(name) + "_world" + std::to_string(std::get<1>(info.param));
    });

TEST(LocalComm, MismatchedSizesAreAnErrorNotGarbage) {
  WorldOptions o;
  o.world_size = 2;
  EXPECT_THROW(run_world(o,
                         [](Comm& comm) {
                           at::Tensor shard = at::ones({comm.rank() + 1});
                           at::Tensor out = at::empty({2 * (comm.rank() + 1)});
                           comm.all_gather(shard, out);
                         }),
               RankFailure);
}

TEST(LocalComm, ACollectiveNobodyJoinsTimesOut) {
  WorldOptions o;
  o.world_size = 2;
  o.timeout = std::chrono::milliseconds(300);
  try {
    run_world(o, [](Comm& comm) {
      if (comm.rank() == 0) comm.barrier();
      else std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    });
    FAIL() << "no timeout";
  } catch (const RankFailure& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zero3
