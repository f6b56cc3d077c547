// Ranks as fibers (harness/world/fiber_world.h): what each fiber sees of LibTorch's thread-local state
// and of the engine's interceptor is its own, a peer's failure or a missing peer ends the world
// with its error, and a scenario gives the same verdict and history as on rank threads.
#include <gtest/gtest.h>

#include "engine/errors.h"
#include "engine/faults.h"
#include "engine/module.h"
#include "harness/world/world.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario/bytes.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <random>

namespace zerocheck {
namespace {

WorldOptions fibers() {
  WorldOptions o;
  o.ranks = RankKind::fibers;
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

TEST(FiberWorld, EachRankKeepsItsOwnGradModeAndInterceptorAcrossCollectives) {
  struct Tag final : zero3::ForwardInterceptor {
    at::Tensor around_forward(zero3::Module& m, const at::Tensor& x, const zero3::Route& r,
                              const std::function<at::Tensor(const at::Tensor&)>& body) override {
      return body(x);
    }
  };
  std::vector<Tag> tags(4);
  int checked = 0;
  make_world(4, fibers())->run([&](zero3::Comm& comm) {
    // Odd ranks switch gradients off, every rank installs its own interceptor, then all wait for
    // each other twice: whoever ran in between must not have changed what this rank sees.
    std::optional<at::NoGradGuard> no_grad;
    if (comm.rank() % 2 == 1) no_grad.emplace();
    zero3::InterceptorScope scope(&tags[static_cast<size_t>(comm.rank())]);
    for (int round = 0; round < 2; ++round) {
      at::Tensor t = at::ones({2});
      comm.all_reduce_sum(t);
      ASSERT_EQ(c10::GradMode::is_enabled(), comm.rank() % 2 == 0) << "rank " << comm.rank();
      ASSERT_EQ(zero3::current_forward_interceptor(), &tags[static_cast<size_t>(comm.rank())]);
      ++checked;
    }
  });
  EXPECT_EQ(checked, 8);
  EXPECT_TRUE(c10::GradMode::is_enabled()) << "the caller's grad mode leaked from a fiber";
  EXPECT_EQ(zero3::current_forward_interceptor(), nullptr) << "the caller's interceptor leaked from a fiber";
}

TEST(FiberWorld, AMissingPeerTimesOutNamingTheCollective) {
  WorldOptions o = fibers();
  o.timeout = std::chrono::milliseconds(300);
  try {
    make_world(3, o)->run([](zero3::Comm& comm) {
      if (comm.rank() != 2) comm.barrier();  // rank 2 never comes: it has already finished
    });
    FAIL() << "no timeout";
  } catch (const RankFailure& e) {
    EXPECT_NE(std::string(e.what()).find("barrier timed out after 300 ms; 2 of 3 ranks arrived"), std::string::npos)
        << e.what();
  }
}

TEST(FiberWorld, RefusesGlooAndScenariosWithABackward) {
  WorldOptions o = fibers();
  o.comm = CommKind::gloo;
  EXPECT_THROW(make_world(2, o), zero3::UsageError);
  Scenario s;
  s.tree.push_back(NodeSpec{});
  s.tree[0].kind = "Linear";
  s.ops = {Op(OpKind::initialize), Op(OpKind::forward), Op(OpKind::backward)};
  RunOptions options;
  options.world.ranks = RankKind::fibers;
  try {
    run_scenario(s, options);
    FAIL() << "a backward ran on fibers";
  } catch (const zero3::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run a backward (operation #2)"), std::string::npos) << e.what();
  }
}

// The attributes fuzzer's scenarios, on the reference engine and on faults its oracles catch:
// fibers and threads must find the same thing after the same operation, line for line.
TEST(FiberWorld, GivesTheSameVerdictAndHistoryAsRankThreads) {
  std::mt19937_64 random(11);
  int violations = 0, scenarios = 0;
  for (const zero3::Fault fault : {zero3::Fault::none, zero3::Fault::legacy_0_15_4, zero3::Fault::placed_copies_kept,
                                   zero3::Fault::accept_repeated_initialize}) {
    for (int i = 0; i < 25; ++i) {
      std::vector<uint8_t> bytes(random() % 400);
      for (auto& b : bytes) b = static_cast<uint8_t>(random());
      const Scenario s = scenario_from_bytes(bytes.data(), bytes.size(), DecodeLimits(DrawProfile::attributes));
      RunOptions options(fault);
      options.disabled_oracles = {"I3", "I4", "I6", "I8"};
      const Verdict on_threads = run_scenario(s, options);
      options.world.ranks = RankKind::fibers;
      const Verdict on_fibers = run_scenario(s, options);
      ASSERT_EQ(on_threads.history, on_fibers.history) << describe(s);
      ASSERT_EQ(on_threads.ok(), on_fibers.ok()) << describe(s);
      if (!on_threads.ok()) {
        ASSERT_EQ(on_threads.violation->to_text(), on_fibers.violation->to_text()) << describe(s);
        ++violations;
      }
      ++scenarios;
    }
  }
  EXPECT_EQ(scenarios, 100);
  EXPECT_GT(violations, 10) << "the faults were hardly ever caught: the comparison says little";
}

}  // namespace
}  // namespace zerocheck
