// Replays fuzz/corpus/config_json and fuzz/regressions/config_json without libFuzzer: only
// ConfigError comes out of Config::parse, and parsed configs round-trip. Seeds named valid_*
// must parse and seeds named invalid_* must be refused, so the corpus documents both sides.
#include "fuzz/config_json_check.h"
#include "fuzz/replay_files.h"

#include ZEROCHECK_REPLAY_FILES

namespace zerocheck::fuzz {
namespace {

TEST(ConfigJsonCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

class ConfigJsonReplay : public testing::TestWithParam<ReplayFile> {};

TEST_P(ConfigJsonReplay, OnlyConfigErrorComesOut) {
  expect_parse_check_holds(GetParam(), check_config_json);
}

INSTANTIATE_TEST_SUITE_P(Files, ConfigJsonReplay,
                         testing::ValuesIn(replay_files(files::kCorpus, files::kRegressions)), replay_test_name);

}  // namespace
}  // namespace zerocheck::fuzz
