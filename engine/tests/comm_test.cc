// Both Comm implementations, through the same tests: results, rank-order sums, element
// accounting, and failing fast.
#include <gtest/gtest.h>

#include "engine/comm.h"
#include "engine/errors.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>

#include <chrono>
#include <thread>

namespace zero3 {
namespace {

using zerocheck::CommKind;
using zerocheck::make_world;
using zerocheck::RankFailure;
using zerocheck::RankKind;
using zerocheck::WorldOptions;

// How the ranks run: LocalComm threads, Gloo threads, or LocalComm fibers of one thread
// (harness/world/fiber_world.h).
enum class Ranks { local, gloo, local_fibers };

// A peer that waits longer than this would be waiting for the timeout, not for the abort.
constexpr std::chrono::milliseconds kCollectiveTimeout{20000};

class CommTest : public ::testing::TestWithParam<std::tuple<Ranks, int>> {
 protected:
  std::unique_ptr<zerocheck::World> world() const {
    WorldOptions o;
    o.comm = std::get<0>(GetParam()) == Ranks::gloo ? CommKind::gloo : CommKind::local;
    o.ranks = std::get<0>(GetParam()) == Ranks::local_fibers ? RankKind::fibers : RankKind::threads;
    o.timeout = kCollectiveTimeout;
    return make_world(std::get<1>(GetParam()), o);
  }
};

TEST_P(CommTest, AllGatherConcatenatesShardsInRankOrder) {
  world()->run([](Comm& comm) {
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
  world()->run([](Comm& comm) {
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
  world()->run([](Comm& comm) {
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

// Fail-fast is behaviour: the peers stop because the abort reached them, within the collective
// timeout (20 s), not because they waited it out. On this machine the whole test takes well under
// a second, so the bound leaves a margin of more than ten times.
TEST_P(CommTest, AFailingRankMakesPeersFailFastWithItsError) {
  const auto start = std::chrono::steady_clock::now();
  try {
    world()->run([](Comm& comm) {
      if (comm.rank() == comm.world_size() - 1) throw UsageError("planted failure");
      at::Tensor t = at::ones({4});
      comm.all_reduce_sum(t);  // peers wait here for the rank that never comes
    });
    FAIL() << "the world did not report the failure";
  } catch (const RankFailure& e) {
    EXPECT_EQ(e.rank(), std::get<1>(GetParam()) - 1);
    EXPECT_NE(std::string(e.what()).find("planted failure"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kCollectiveTimeout)
      << "the peers waited for the collective timeout instead of the abort";
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
  EXPECT_THROW(make_world(2)->run([](Comm& comm) {
                           at::Tensor shard = at::ones({comm.rank() + 1});
                           at::Tensor out = at::empty({2 * (comm.rank() + 1)});
                           comm.all_gather(shard, out);
                         }),
               RankFailure);
}

TEST(LocalComm, ACollectiveNobodyJoinsTimesOut) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(300);
  try {
    make_world(2, o)->run([](Comm& comm) {
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
