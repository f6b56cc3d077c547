// The files a replay test runs: one target's seed corpus (fuzz/corpus/<target>/) and minimised
// crashes (fuzz/regressions/<target>/), listed by fuzz/CMakeLists.txt when it configures. The
// listing is a CONFIGURE_DEPENDS glob, so adding or removing a file re-lists on the next build.
#pragma once

#include "fuzz/finding.h"
#include "fuzz/scenario_target.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace zerocheck::fuzz {

struct ReplayFile {
  std::string path;
  std::string test_name;  // "corpus_<file>" or "regression_<file>", made GoogleTest-safe and unique
};

// Returns the corpus files, then the regressions, each with its test name.
std::vector<ReplayFile> replay_files(const std::vector<std::string>& corpus,
                                     const std::vector<std::string>& regressions);

// Returns the bytes of `path`. Throws std::runtime_error naming the path when it cannot be
// opened or read completely.
std::string read_file_bytes(const std::string& path);

// Reads `file` into `bytes`; the failure names the path and the reason (ASSERT_TRUE on it).
testing::AssertionResult read_replay_file(const ReplayFile& file, std::string* bytes);

// The JSON targets' replay case: `check` finds nothing on the file, corpus files named valid_*
// parse and corpus files named invalid_* are refused, so the corpus documents both sides.
void expect_parse_check_holds(const ReplayFile& file, ParseCheck (*check)(std::string_view));

// The parameter-name generator for INSTANTIATE_TEST_SUITE_P over replay_files().
std::string replay_test_name(const testing::TestParamInfo<ReplayFile>& info);

// So a failing case prints its path.
void PrintTo(const ReplayFile& file, std::ostream* out);

// The scenario targets' two checks, one definition for scenario_ops and attrs: the reference
// engine holds the target's invariants on what `bytes` decode to (a failure names the file) ...
void expect_reference_holds(const ScenarioTarget& target, const std::string& path, const std::string& bytes);
// ... and every input still decodes to the scenario stored beside it, and no stored scenario has
// lost its input (fuzz/decoded_scenarios.h).
void expect_inputs_decode_to_stored_scenarios(const ScenarioTarget& target, const std::vector<std::string>& corpus,
                                              const std::vector<std::string>& regressions);

}  // namespace zerocheck::fuzz
