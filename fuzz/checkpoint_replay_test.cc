// Replays fuzz/corpus/checkpoint and fuzz/regressions/checkpoint without libFuzzer: only
// CheckpointError comes out of load_checkpoint and a refused load changes nothing. Seeds named
// valid_* (real checkpoints of the fixed model) must load; invalid_* must be refused.
#include "fuzz/checkpoint_check.h"
#include "fuzz/replay_files.h"

#include ZEROCHECK_REPLAY_FILES

#include <iostream>
#include <map>
#include <random>

namespace zerocheck::fuzz {
namespace {

TEST(CheckpointCorpus, IsNotEmpty) {
  EXPECT_FALSE(files::kCorpus.empty()) << "no seed files in " << files::kCorpusDir;
}

class CheckpointReplay : public testing::TestWithParam<ReplayFile> {};

TEST_P(CheckpointReplay, OnlyCheckpointErrorComesOut) { expect_parse_check_holds(GetParam(), check_checkpoint); }

// A seeded stand-in for the fuzzer that runs under ctest with any compiler: random byte flips in
// the real checkpoints, with the checksums refreshed so the damage reaches the unpickler and the
// structure checks. Every outcome must be a load or a CheckpointError that changed nothing.
TEST(CheckpointMutations, FlippedBytesBehindRefreshedChecksumsOnlyGiveCheckpointError) {
  std::mt19937_64 random(20261201);
  int loaded = 0, refused = 0;
  std::map<std::string, int> refusals;  // by where the reader refused
  for (const auto& path : files::kCorpus) {
    if (path.find("valid_odd") == std::string::npos) continue;
    const std::string seed = read_file_bytes(path);
    for (int i = 0; i < 150; ++i) {
      std::string bytes = seed;
      bytes[0] = 1;  // refresh the checksums
      const int flips = 1 + static_cast<int>(random() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t at = 1 + random() % (bytes.size() - 1);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (random() % 8)));
      }
      const ParseCheck check = check_checkpoint(bytes);
      ASSERT_FALSE(check.finding) << check.finding->signature << "\n" << check.finding->details;
      if (check.parsed) {
        ++loaded;
      } else {
        ++refused;
        const std::string& r = check.refusal;
        ++refusals[r.find("does not unpickle") != std::string::npos ? "rank file: the unpickler"
                   : r.find("manifest.json: $") != std::string::npos ? "manifest: the JSON reader"
                   : r.find("manifest.json") != std::string::npos   ? "manifest: against the model"
                   : r.find(".pt: ") != std::string::npos           ? "rank file: the structure checks"
                                                                    : "elsewhere: " + r.substr(0, 60)];
      }
    }
  }
  std::cout << "mutations: " << loaded << " loaded (flips in tensor data), " << refused
            << " refused with CheckpointError:\n";
  for (const auto& [where, count] : refusals) std::cout << "  " << count << " by " << where << "\n";
  EXPECT_GT(refused, 0);
}

INSTANTIATE_TEST_SUITE_P(Files, CheckpointReplay,
                         testing::ValuesIn(replay_files(files::kCorpus, files::kRegressions)), replay_test_name);

}  // namespace
}  // namespace zerocheck::fuzz
