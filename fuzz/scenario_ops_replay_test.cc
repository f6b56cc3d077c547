// Replays fuzz/corpus/scenario_ops and fuzz/regressions/scenario_ops without libFuzzer: each
// file decodes to a scenario on which the reference engine holds every invariant.
#include "fuzz/replay_files.h"
#include "fuzz/scenario_ops_check.h"

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(ScenarioOpsCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

class ScenarioOpsReplay : public testing::TestWithParam<ReplayFile> {};

TEST_P(ScenarioOpsReplay, ReferenceEngineHoldsEveryInvariant) {
  std::string bytes;
  ASSERT_TRUE(read_replay_file(GetParam(), &bytes));
  const OpsRun run =
      run_scenario_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), zero3::Fault::none);
  const auto finding = finding_of(run, zero3::Fault::none, "(not written: run build/fuzz/bin/fuzz_scenario_ops on " +
                                                               GetParam().path + ")");
  EXPECT_FALSE(finding) << finding->signature << "\n" << finding->details;
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioOpsReplay,
                         testing::ValuesIn(replay_files(files::kCorpus, files::kRegressions)), replay_test_name);

}  // namespace
}  // namespace zerocheck::fuzz
