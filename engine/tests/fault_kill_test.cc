// The kill check: every fault in the catalogue is caught by the test the catalogue names.
//
// For each fault, the named test runs twice in a child process: with ZEROCHECK_FAULT=<fault> it
// must fail and print the catalogue's kill text (so it fails for the catalogued reason, not any
// reason), and without it it must pass — so it is the fault, not the test, that fails.
#include <gtest/gtest.h>

#include "engine/faults.h"
#include "engine/fp16_probe.h"

#include <array>
#include <cstdio>
#include <regex>
#include <string>
#include <sys/wait.h>

namespace zero3 {
namespace {

struct ChildRun {
  int exit_code;
  int tests_run;
  std::string output;
};

ChildRun run_test(const FaultInfo& info, bool with_fault) {
  const std::string killer(info.killer);
  const auto colon = killer.find(':');
  const std::string binary = std::string(ZEROCHECK_BIN_DIR) + "/" + killer.substr(0, colon);
  const std::string filter = killer.substr(colon + 1);
  const std::string env = with_fault ? "ZEROCHECK_FAULT='" + std::string(info.name) + "' " : "";
  const std::string command = env + binary + " --gtest_filter='" + filter + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, 0, "popen failed: " + command};
  std::string output;
  std::array<char, 4096> buffer{};
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  std::smatch match;
  int tests = 0;
  if (std::regex_search(output, match, std::regex(R"(\[==========\] (\d+) tests? from)")))
    tests = std::stoi(match[1]);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, tests, output};
}

}  // namespace

// Readable test names in ctest's listing instead of a byte dump.
void PrintTo(const FaultInfo& info, std::ostream* out) { *out << info.name; }

namespace {

class FaultKill : public ::testing::TestWithParam<FaultInfo> {};

TEST_P(FaultKill, TheNamedTestCatchesTheFaultAndPassesWithout) {
  const FaultInfo& info = GetParam();
  // Its killer skips itself here (no fp16 scenario runs), so neither run would say anything.
  if (info.fp16 && !cpu_fp16_available())
    GTEST_SKIP() << info.name << " needs fp16, and this LibTorch has no fp16 Linear on CPU: " << cpu_fp16_refusal();
  const ChildRun planted = run_test(info, /*with_fault=*/true);
  EXPECT_GT(planted.tests_run, 0) << "the filter of '" << info.killer << "' matched no test";
  EXPECT_NE(planted.exit_code, 0) << "fault '" << info.name << "' survived " << info.killer
                                  << "\n" << planted.output;
  EXPECT_NE(planted.output.find(std::string(info.kill_text)), std::string::npos)
      << info.killer << " failed under fault '" << info.name << "' without printing \"" << info.kill_text
      << "\" (caught for another reason?)\n" << planted.output;
  const ChildRun reference = run_test(info, /*with_fault=*/false);
  EXPECT_GT(reference.tests_run, 0);
  EXPECT_EQ(reference.exit_code, 0) << info.killer << " fails without the fault\n"
                                    << reference.output;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, FaultKill, ::testing::ValuesIn(fault_catalogue()),
                         [](const auto& info) {
                           std::string name(info.param.name);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace zero3
