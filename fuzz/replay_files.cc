#include "fuzz/replay_files.h"

#include "fuzz/decoded_scenarios.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

namespace zerocheck::fuzz {
namespace {

std::string safe_name(const std::string& prefix, const std::string& path) {
  std::string name = prefix;
  for (char c : std::filesystem::path(path).filename().string())
    name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return name;
}

}  // namespace

std::vector<ReplayFile> replay_files(const std::vector<std::string>& corpus,
                                     const std::vector<std::string>& regressions) {
  std::vector<ReplayFile> files;
  std::set<std::string> taken;
  auto add = [&](const std::string& prefix, const std::string& path) {
    std::string name = safe_name(prefix, path);
    for (int n = 2; !taken.insert(name).second; ++n) name = safe_name(prefix, path) + "_" + std::to_string(n);
    files.push_back({path, name});
  };
  for (const auto& path : corpus) add("corpus_", path);
  for (const auto& path : regressions) add("regression_", path);
  return files;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("error while reading '" + path + "'");
  return bytes;
}

testing::AssertionResult read_replay_file(const ReplayFile& file, std::string* bytes) {
  try {
    *bytes = read_file_bytes(file.path);
  } catch (const std::exception& e) {
    return testing::AssertionFailure() << e.what();
  }
  return testing::AssertionSuccess();
}

void expect_parse_check_holds(const ReplayFile& file, ParseCheck (*check)(std::string_view)) {
  std::string text;
  ASSERT_TRUE(read_replay_file(file, &text));
  const ParseCheck result = check(text);
  EXPECT_FALSE(result.finding) << result.finding->signature << "\n" << result.finding->details;
  if (file.test_name.rfind("corpus_valid_", 0) == 0) {
    EXPECT_TRUE(result.parsed) << "a valid_ seed was refused: " << result.refusal;
  }
  if (file.test_name.rfind("corpus_invalid_", 0) == 0) {
    EXPECT_FALSE(result.parsed) << "an invalid_ seed parsed";
  }
}

std::string replay_test_name(const testing::TestParamInfo<ReplayFile>& info) { return info.param.test_name; }

void PrintTo(const ReplayFile& file, std::ostream* out) { *out << file.path; }

void expect_reference_holds(const ScenarioTarget& target, const std::string& path, const std::string& bytes) {
  const OpsRun run =
      run_scenario_bytes(target, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), zero3::Fault::none);
  const auto finding = finding_of(target, run, zero3::Fault::none,
                                  "(not written: run build/fuzz/bin/fuzz_" + std::string(target.name) + " on " + path + ")");
  EXPECT_FALSE(finding) << path << ": " << finding->signature << "\n" << finding->details;
}

void expect_inputs_decode_to_stored_scenarios(const ScenarioTarget& target, const std::vector<std::string>& corpus,
                                              const std::vector<std::string>& regressions) {
  std::vector<std::string> inputs;
  for (const ReplayFile& file : replay_files(corpus, regressions)) {
    std::string bytes;
    ASSERT_TRUE(read_replay_file(file, &bytes));
    EXPECT_EQ(decoded_json_problem(target, file.path, bytes), "");
    inputs.push_back(file.path);
  }
  for (const auto& orphan : orphan_decoded_files(inputs)) ADD_FAILURE() << orphan << ": its input is gone; delete it";
}

}  // namespace zerocheck::fuzz
