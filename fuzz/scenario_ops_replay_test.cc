// Replays fuzz/corpus/scenario_ops and fuzz/regressions/scenario_ops without libFuzzer: each
// file decodes to a scenario on which the reference engine holds every invariant.
#include "fuzz/decoded_scenarios.h"
#include "fuzz/replay_files.h"
#include "fuzz/scenario_target.h"

#include "engine/errors.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(ScenarioOpsCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

// The seed corpus is the fault-killing seeds plus what ci/fuzz-merge keeps of campaigns: over a
// thousand files. A ctest process per file costs about a second of start-up in each of CI's three
// ctest runs, and one for them all ran past 120 s under ASan; so kCorpusShards cases, each every
// kCorpusShards-th file, which ctest -j runs side by side.
constexpr int kCorpusShards = 8;

class ScenarioOpsCorpusShard : public testing::TestWithParam<int> {};

TEST_P(ScenarioOpsCorpusShard, ReferenceEngineHoldsEveryInvariant) {
  const auto corpus = replay_files(files::kCorpus, {});
  for (size_t i = static_cast<size_t>(GetParam()); i < corpus.size(); i += kCorpusShards) {
    std::string bytes;
    ASSERT_TRUE(read_replay_file(corpus[i], &bytes));
    expect_reference_holds(scenario_ops_target(), corpus[i].path, bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, ScenarioOpsCorpusShard, testing::Range(0, kCorpusShards));

// The bytes still mean the scenarios stored beside them (fuzz/decoded_scenarios.h).
TEST(ScenarioOpsCorpus, EveryInputDecodesToItsStoredScenario) {
  expect_inputs_decode_to_stored_scenarios(scenario_ops_target(), files::kCorpus, files::kRegressions);
}

// Regressions stay one named case each: a failure names the bug that came back.
class ScenarioOpsRegression : public testing::TestWithParam<ReplayFile> {};

TEST_P(ScenarioOpsRegression, ReferenceEngineHoldsEveryInvariant) {
  std::string bytes;
  ASSERT_TRUE(read_replay_file(GetParam(), &bytes));
  expect_reference_holds(scenario_ops_target(), GetParam().path, bytes);
}

// The check itself, on a scratch copy of the layout: a missing, an edited and an orphan stored
// scenario are each reported, naming what is wrong.
TEST(DecodedScenarios, MissingEditedAndOrphanStoredScenariosAreReported) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("zerocheck-decoded-" + std::to_string(::getpid()));
  const fs::path corpus = root / "fuzz/corpus/scenario_ops", decoded = root / "fuzz/decoded/corpus/scenario_ops";
  fs::create_directories(corpus);
  const std::string input = (corpus / "seed").string(), bytes(40, '\x37');
  const std::string stored = decoded_json_path(input);
  EXPECT_EQ(stored, (decoded / "seed.json").string());
  EXPECT_NE(decoded_json_problem(scenario_ops_target(), input, bytes).find("no decoded scenario stored at " + stored),
            std::string::npos);
  ::setenv("ZEROCHECK_WRITE_DECODED", "1", 1);
  EXPECT_EQ(decoded_json_problem(scenario_ops_target(), input, bytes), "");
  ::unsetenv("ZEROCHECK_WRITE_DECODED");
  EXPECT_EQ(decoded_json_problem(scenario_ops_target(), input, bytes), "") << "what was written reads back";
  nlohmann::json edited = nlohmann::json::parse(std::ifstream(stored));
  edited["seed"] = edited["seed"].get<uint64_t>() + 1;
  std::ofstream(stored) << edited.dump();
  const std::string problem = decoded_json_problem(scenario_ops_target(), input, bytes);
  EXPECT_NE(problem.find("no longer decodes to " + stored + ": they first differ at /seed"), std::string::npos)
      << problem;
  std::ofstream(decoded / "gone.json") << "{}";
  EXPECT_EQ(orphan_decoded_files({input}),
            std::vector<std::string>{(decoded / "gone.json").string()});
  EXPECT_THROW(decoded_json_path("/elsewhere/seed"), std::invalid_argument);
  fs::remove_all(root);
}

// The campaign's --world/--max-nodes/--max-ops reach the target through these variables.
TEST(ScenarioOpsLimits, ComeFromTheEnvironmentAndBadValuesNameTheVariable) {
  ::setenv("ZEROCHECK_FUZZ_WORLD", "2", 1);
  ::setenv("ZEROCHECK_FUZZ_MAX_NODES", "3", 1);
  ::setenv("ZEROCHECK_FUZZ_MAX_OPS", "8", 1);
  const DecodeLimits limits = limits_from_environment(scenario_ops_target());
  EXPECT_EQ(limits.world, 2);
  EXPECT_EQ(limits.max_nodes, 3u);
  EXPECT_EQ(limits.max_ops, 8u);
  const std::string bytes(200, '\x5a');
  const OpsRun run =
      run_scenario_bytes(scenario_ops_target(), reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                         zero3::Fault::none, limits);
  EXPECT_EQ(run.scenario.world_size, 2);
  EXPECT_LE(run.scenario.tree.size(), 3u);
  EXPECT_LE(run.scenario.ops.size(), 8u);
  for (const char* bad : {"0", "9", "2x", ""}) {
    ::setenv("ZEROCHECK_FUZZ_WORLD", bad, 1);
    if (*bad == '\0') {
      EXPECT_EQ(limits_from_environment(scenario_ops_target()).world, 0);  // empty: decoded from the input
      continue;
    }
    try {
      limits_from_environment(scenario_ops_target());
      ADD_FAILURE() << "ZEROCHECK_FUZZ_WORLD=" << bad << " was accepted";
    } catch (const zero3::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("ZEROCHECK_FUZZ_WORLD='" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
  ::unsetenv("ZEROCHECK_FUZZ_WORLD");
  ::unsetenv("ZEROCHECK_FUZZ_MAX_NODES");
  ::unsetenv("ZEROCHECK_FUZZ_MAX_OPS");
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioOpsRegression, testing::ValuesIn(replay_files({}, files::kRegressions)),
                         replay_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ScenarioOpsRegression);

}  // namespace
}  // namespace zerocheck::fuzz
