// Replays fuzz/corpus/attrs and fuzz/regressions/attrs without libFuzzer: each file decodes (the
// attributes profile) to a scenario on which the reference engine holds I1, I2, I5 and I7; and the
// target's language is what fuzz/scenario_target.h promises.
#include "fuzz/replay_files.h"
#include "fuzz/scenario_target.h"

#include "engine/errors.h"

#include <cstdlib>
#include <random>

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(AttrsCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

// The seed corpus is what ci/fuzz-merge keeps of campaigns: hundreds of files. One test runs them
// all (a few milliseconds each), since a ctest process per file costs about a second of start-up.
TEST(AttrsCorpus, ReferenceEngineHoldsTheAttributeInvariantsOnEverySeed) {
  for (const ReplayFile& file : replay_files(files::kCorpus, {})) {
    std::string bytes;
    ASSERT_TRUE(read_replay_file(file, &bytes));
    expect_reference_holds(attrs_target(), file.path, bytes);
  }
}

// The bytes still mean the scenarios stored beside them (fuzz/decoded_scenarios.h).
TEST(AttrsCorpus, EveryInputDecodesToItsStoredScenario) {
  expect_inputs_decode_to_stored_scenarios(attrs_target(), files::kCorpus, files::kRegressions);
}

// Regressions stay one named case each: a failure names the bug that came back.
class AttrsRegression : public testing::TestWithParam<ReplayFile> {};

TEST_P(AttrsRegression, ReferenceEngineHoldsTheAttributeInvariants) {
  std::string bytes;
  ASSERT_TRUE(read_replay_file(GetParam(), &bytes));
  expect_reference_holds(attrs_target(), GetParam().path, bytes);
}

// The profile's promise, over many random inputs: nothing that trains or checkpoints, worlds and
// trees up to the attributes bounds (and beyond the training profile's).
TEST(AttrsLanguage, NeverTrainsAndReachesWideWorldsAndBigTrees) {
  std::mt19937_64 random(7);
  int widest_world = 0;
  size_t most_nodes = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bytes(random() % 1024);
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    const Scenario s = scenario_from_bytes(bytes.data(), bytes.size(), DecodeLimits(DrawProfile::attributes));
    for (const Op& op : s.ops)
      ASSERT_TRUE(op.kind == OpKind::initialize || op.kind == OpKind::forward || op.kind == OpKind::set_attr ||
                  op.kind == OpKind::del_attr || op.kind == OpKind::release || op.kind == OpKind::destroy)
          << "operation " << to_string(op.kind) << " in the attributes profile";
    ASSERT_LE(s.world_size, kMaxAttributesWorld);
    ASSERT_LE(s.tree.size(), kMaxAttributesNodes);
    widest_world = std::max(widest_world, s.world_size);
    most_nodes = std::max(most_nodes, s.tree.size());
  }
  EXPECT_EQ(widest_world, kMaxAttributesWorld);
  EXPECT_GT(most_nodes, kMaxDrawnNodes) << "no tree bigger than the training profile's";
}

TEST(AttrsLimits, ComeFromTheEnvironmentWithinTheProfilesBounds) {
  ::setenv("ZEROCHECK_FUZZ_WORLD", "8", 1);
  ::setenv("ZEROCHECK_FUZZ_MAX_NODES", "64", 1);
  const DecodeLimits limits = limits_from_environment(attrs_target());
  EXPECT_EQ(limits.profile, DrawProfile::attributes);
  EXPECT_EQ(limits.world, 8);
  EXPECT_EQ(limits.max_nodes, 64u);
  EXPECT_THROW(limits_from_environment(scenario_ops_target()), zero3::UsageError);  // 8 ranks: attrs only
  ::setenv("ZEROCHECK_FUZZ_WORLD", "9", 1);
  try {
    limits_from_environment(attrs_target());
    ADD_FAILURE() << "ZEROCHECK_FUZZ_WORLD=9 was accepted";
  } catch (const zero3::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ZEROCHECK_FUZZ_WORLD='9' is not a whole number in 1..8"), std::string::npos)
        << e.what();
  }
  ::unsetenv("ZEROCHECK_FUZZ_WORLD");
  ::unsetenv("ZEROCHECK_FUZZ_MAX_NODES");
  EXPECT_THROW(run_scenario_bytes(attrs_target(), nullptr, 0, zero3::Fault::none, DecodeLimits()), zero3::UsageError);
}

INSTANTIATE_TEST_SUITE_P(Files, AttrsRegression, testing::ValuesIn(replay_files({}, files::kRegressions)),
                         replay_test_name);
// fuzz/regressions/attrs may be empty: then there is no case to instantiate.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttrsRegression);

}  // namespace
}  // namespace zerocheck::fuzz
