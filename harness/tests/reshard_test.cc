// Resharding on load: a checkpoint saved by N ranks loads into M ranks (1..8 each way) and
// training goes on exactly as the dense twin's, bit for bit: losses on every rank and step, and
// the final parameters. The models mix tied, frozen, zero-size, persistent and placed parameters.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "harness/tools/reshard_check.h"

namespace zero3 {
namespace {

using zerocheck::ReshardCase;

class Reshard : public ::testing::TestWithParam<ReshardCase> {};

TEST_P(Reshard, SavedAtNLoadsAtMAndTrainsOnLikeTheDenseTwin) {
  const ReshardCase c = GetParam();
  const std::vector<std::string> problems = zerocheck::reshard_problems(c);
  for (const auto& p : problems) ADD_FAILURE() << p;
  EXPECT_TRUE(problems.empty()) << zerocheck::describe(c);
}

// Every world size from 1 to 8 is saved from and loaded into at least once per model family.
std::vector<ReshardCase> cases() {
  std::vector<ReshardCase> out;
  const std::vector<std::pair<int, int>> pairs = {{1, 8}, {8, 1}, {2, 3}, {3, 2}, {4, 7}, {7, 4}, {5, 6}, {6, 5}};
  for (const char* model : {"odd", "frozen", "moe-placed"})
    for (const auto& [from, to] : pairs) out.push_back(ReshardCase{model, from, to, "adam", 0});
  out.push_back(ReshardCase{"mlp", 3, 5, "sgd", 0});
  out.push_back(ReshardCase{"moe-placed", 4, 3, "sgd", 0});
  out.push_back(ReshardCase{"odd", 2, 5, "adam", 20});  // small parameters persistent: whole on every rank
  out.push_back(ReshardCase{"moe", 5, 2, "adam", 0});
  out.push_back(ReshardCase{"odd", 3, 3, "adam", 0});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, Reshard, ::testing::ValuesIn(cases()), [](const auto& info) {
  return zerocheck::test_name(info.param);
});

}  // namespace
}  // namespace zero3
