// `zerocheck check --fp16` as a library call: the draw asks fp16 only when told, the same on
// every lane, and a check holds at worlds 1-4 where LibTorch computes an fp16 Linear on CPU;
// elsewhere every fp16 scenario is counted as not runnable here, named, never run or passed.
#include <gtest/gtest.h>

#include "engine/fp16_probe.h"
#include "harness/scenario/generators.h"
#include "harness/scenario/scenario.h"
#include "harness/tools/check.h"

#include <string>

namespace zerocheck {
namespace {

bool asks_fp16(const Scenario& s) { return s.config.precision.fp16_enabled.value_or(false); }

std::vector<Scenario> drawn(bool fp16, int cases) {
  GeneratorOptions options;
  options.fp16 = fp16;
  const auto gen = gen_scenario(options);
  std::vector<Scenario> out;
  for (int i = 0; i < cases; ++i) out.push_back(gen(rc::Random(1000003ULL + static_cast<uint64_t>(i)), i % 50 * 2 + 2).value());
  return out;
}

// The default draw never asks fp16 (the corpora and the upstream export keep their meaning);
// with fp16 on, most scenarios without a placement policy do, each valid on every lane (fp16
// neither with a placement policy nor with overflow_protection), whatever this LibTorch runs.
TEST(Fp16Draw, OnlyWhenAskedAndValidOnEveryLane) {
  for (const Scenario& s : drawn(false, 200)) EXPECT_FALSE(asks_fp16(s));
  int fp16 = 0;
  for (const Scenario& s : drawn(true, 200)) {
    if (!asks_fp16(s)) continue;
    ++fp16;
    EXPECT_EQ(s.placement.kind, zero3::PlacementSpec::Kind::none);
    EXPECT_FALSE(s.overflow_protection.has_value());
    EXPECT_FALSE(s.config.precision.bf16_enabled.value_or(false));
    EXPECT_NO_THROW(validate(s));
    EXPECT_NO_THROW(parse_scenario(to_json(s).dump()));
  }
  EXPECT_GT(fp16, 50);
}

class Fp16Check : public ::testing::TestWithParam<int> {};

TEST_P(Fp16Check, HoldsOrIsNotRunnableHere) {
  CheckOptions options;
  options.fp16 = true;
  options.fixed_world = GetParam();
  options.cases = 12;
  options.seed = 3;
  options.out_dir = ::testing::TempDir() + "/fp16_check";
  const CheckResult result = run_check(options);
  EXPECT_GT(result.with_fp16, 0);
  EXPECT_FALSE(result.finding.has_value()) << result.finding->violation.to_text();
  if (zero3::cpu_fp16_available()) {
    EXPECT_EQ(result.not_runnable, 0);
    EXPECT_EQ(result.cases_run, options.cases);
  } else {  // counted, named, and not run: neither passed nor a violation
    EXPECT_EQ(result.not_runnable, result.with_fp16);
    EXPECT_EQ(result.cases_run + result.not_runnable, options.cases);
    EXPECT_NE(result.not_runnable_reason.find("fp16.enabled"), std::string::npos) << result.not_runnable_reason;
    EXPECT_FALSE(result.not_runnable_cases.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Fp16Check, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace zerocheck
