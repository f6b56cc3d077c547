// What each rank holds, measured where it is allocated (harness/world/rank_memory.h): a rank is
// charged what its body allocates, while it holds it, whether the rank is a thread or a fiber of
// a thread it shares; the harness's own work is nobody's; a free after the run credits nobody.
#include <gtest/gtest.h>

#include "harness/world/rank_memory.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>

#include <vector>

namespace zerocheck {
namespace {

TEST(RankMemory, EachRankIsChargedWhatItHoldsWhetherThreadOrFiber) {
  count_rank_memory();
  ASSERT_TRUE(counting_rank_memory());
  for (const RankKind kind : {RankKind::threads, RankKind::fibers}) {
    WorldOptions options;
    options.ranks = kind;
    std::vector<int64_t> held(3, -1), with_harness_work(3, -1), after_free(3, -1);
    make_world(3, options)->run([&](zero3::Comm& comm) {
      const auto r = static_cast<size_t>(comm.rank());
      RankAccount* mine = current_account();
      ASSERT_NE(mine, nullptr);
      const int64_t start = mine->live_bytes();
      at::Tensor t = at::empty({1000 * static_cast<int64_t>(r + 1)});  // 4000 (r + 1) bytes
      comm.barrier();  // fibers switch here: the other ranks allocate in between
      held[r] = mine->live_bytes() - start;
      {
        const NotChargedToTheRank harness;
        const at::Tensor scratch = at::empty({5000});
        comm.barrier();
        with_harness_work[r] = mine->live_bytes() - start;
      }
      t = at::Tensor();
      after_free[r] = mine->live_bytes() - start;
    });
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(held[r], 4000 * static_cast<int64_t>(r + 1)) << "rank " << r;
      EXPECT_EQ(with_harness_work[r], held[r]) << "rank " << r << " was charged the harness's bytes";
      EXPECT_EQ(after_free[r], 0) << "rank " << r;
    }
  }
}

TEST(RankMemory, WhatOutlivesItsRunIsCreditedToNobody) {
  count_rank_memory();
  at::Tensor kept;
  int64_t charged = -1;
  make_world(1)->run([&](zero3::Comm&) {
    kept = at::empty({256});
    charged = current_account()->live_bytes();
  });
  EXPECT_EQ(charged, 1024);
  EXPECT_EQ(current_account(), nullptr) << "the run's account is still current";
  int64_t fresh = -1;
  make_world(1)->run([&](zero3::Comm&) {
    kept = at::Tensor();  // freed while another run's account is current: not its bytes
    fresh = current_account()->live_bytes();
  });
  EXPECT_EQ(fresh, 0);
}

}  // namespace
}  // namespace zerocheck
