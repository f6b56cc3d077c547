// Replays fuzz/corpus/checkpoint and fuzz/regressions/checkpoint without libFuzzer: only
// CheckpointError comes out of load_checkpoint and a refused load changes nothing. Seeds named
// valid_* (real checkpoints of the fixed model) must load; invalid_* must be refused.
#include "fuzz/checkpoint_check.h"
#include "fuzz/replay_files.h"

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(CheckpointCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

class CheckpointReplay : public testing::TestWithParam<ReplayFile> {};

TEST_P(CheckpointReplay, OnlyCheckpointErrorComesOut) { expect_parse_check_holds(GetParam(), check_checkpoint); }

INSTANTIATE_TEST_SUITE_P(Files, CheckpointReplay,
                         testing::ValuesIn(replay_files(files::kCorpus, files::kRegressions)), replay_test_name);

}  // namespace
}  // namespace zerocheck::fuzz
