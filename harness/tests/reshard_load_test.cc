// `load` with a world_size: a scenario says "resume this checkpoint on M ranks", and the
// interpreter proves it (a second world of M ranks loads it and must hold what the saving world
// holds, I6).
//
// ReshardOnLoad.*: the scenario of harness/tests/oracle_scenarios/reshard-on-load.json saved by N
// ranks and loaded by M, for pairs that shrink, grow, keep and cross the experts' owners, under
// the engine ZEROCHECK_FAULT names: fault_kill_tests runs it with reshard-offset-off-by-one and
// expects I6. ReshardFault.*: that fault directly, so this binary shows it bites only when the
// world size changes.
#include <gtest/gtest.h>

#include "engine/testing/fault_under_test.h"
#include "harness/interpreter/interpreter.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace zerocheck {
namespace {

namespace fs = std::filesystem;

Scenario reshard_scenario(int saved_by, int loaded_by, const std::string& optimizer = "adam") {
  std::ifstream in(fs::path(ZEROCHECK_SOURCE_DIR) / "harness/tests/oracle_scenarios/reshard-on-load.json");
  std::ostringstream text;
  text << in.rdbuf();
  Scenario s = parse_scenario(text.str());
  s.world_size = saved_by;
  s.optimizer = optimizer;
  for (Op& op : s.ops)
    if (op.kind == OpKind::load) op.world_size = loaded_by;
  return s;
}

// The load is operation 11; its outcome says whether the second world was made.
const size_t kLoadIndex = 11;

const std::vector<std::pair<int, int>> kPairs = {{1, 1}, {1, 4}, {2, 1}, {2, 3}, {3, 2}, {4, 8}, {8, 5}, {3, 3}};

TEST(ReshardOnLoad, EveryWorldSizeLoadsWhatTheSavingWorldHolds) {
  for (const auto& optimizer : {"adam", "sgd"})
    for (const auto& [from, to] : kPairs) {
      const Verdict v = run_scenario(reshard_scenario(from, to, optimizer), RunOptions{fault_under_test()});
      EXPECT_TRUE(v.ok()) << optimizer << ", saved by " << from << ", loaded by " << to << ": VIOLATION "
                          << v.violation->to_text();
      if (!v.ok()) continue;
      ASSERT_GT(v.outcomes.size(), kLoadIndex);
      EXPECT_EQ(v.outcomes[kLoadIndex].kind, OpKind::load);
      EXPECT_EQ(v.outcomes[kLoadIndex].side_world, to) << v.history[kLoadIndex];
      EXPECT_TRUE(v.outcomes[kLoadIndex].side_world_made) << v.history[kLoadIndex];
    }
}

// The policy names rank 1, which a world of one lacks: this world loads, the second is not made.
TEST(ReshardOnLoad, AWorldThatCannotPlaceTheExpertsIsNotMade) {
  Scenario s = reshard_scenario(2, 1);
  s.placement = zero3::PlacementSpec{};
  s.placement.kind = zero3::PlacementSpec::Kind::map;
  s.placement.owners["2.experts.1"] = 1;  // rank 1: a world of one has none
  const Verdict v = run_scenario(s, RunOptions{fault_under_test()});
  ASSERT_TRUE(v.ok()) << v.violation->to_text();
  ASSERT_GT(v.outcomes.size(), kLoadIndex);
  EXPECT_EQ(v.outcomes[kLoadIndex].side_world, 1) << v.history[kLoadIndex];
  EXPECT_FALSE(v.outcomes[kLoadIndex].side_world_made) << v.history[kLoadIndex];
}

TEST(ReshardFault, CaughtAsI6OnlyWhenTheWorldSizeChanges) {
  const RunOptions faulty{zero3::Fault::reshard_offset_off_by_one};
  for (const auto& [from, to] : kPairs) {
    const Verdict v = run_scenario(reshard_scenario(from, to), faulty);
    if (from == to) {
      EXPECT_TRUE(v.ok()) << from << " -> " << to << ": " << v.violation->to_text();
      continue;
    }
    ASSERT_FALSE(v.ok()) << "the fault survived " << from << " -> " << to;
    EXPECT_EQ(v.violation->invariant, "I6") << v.violation->to_text();
    EXPECT_EQ(v.violation->op_index, static_cast<int64_t>(kLoadIndex)) << v.violation->to_text();
  }
}

}  // namespace
}  // namespace zerocheck
