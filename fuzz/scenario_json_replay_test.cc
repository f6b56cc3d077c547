// Replays fuzz/corpus/scenario_json and fuzz/regressions/scenario_json without libFuzzer: only
// ScenarioError comes out of parse_scenario, and parsed scenarios survive write -> read ->
// write. Seeds named valid_* must parse and seeds named invalid_* must be refused.
#include "fuzz/replay_files.h"
#include "fuzz/scenario_json_check.h"

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(ScenarioJsonCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

class ScenarioJsonReplay : public testing::TestWithParam<ReplayFile> {};

TEST_P(ScenarioJsonReplay, OnlyScenarioErrorComesOutAndScenariosRoundTrip) {
  expect_parse_check_holds(GetParam(), check_scenario_json);
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioJsonReplay,
                         testing::ValuesIn(replay_files(files::kCorpus, files::kRegressions)), replay_test_name);

}  // namespace
}  // namespace zerocheck::fuzz
