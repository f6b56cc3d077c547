// Checked-in scenario files: every malformed one is refused with the JSON path of its culprit
// (as `zerocheck replay` reports it, exit 2), every valid one holds on the reference engine.
#include <gtest/gtest.h>

#include "harness/scenario/collision_names.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario/scenario.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zerocheck {
namespace {

namespace fs = std::filesystem;
const fs::path kScenarios = fs::path(ZEROCHECK_SOURCE_DIR) / "harness/tests/scenarios";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A malformed file and the exact error both readers must give (EXPECTED.json, shared with the
// Python replay's reader: harness/deepspeed/tests/test_shared_fixtures.py).
struct MalformedCase {
  std::string file;
  std::string expected;  // "<path>: <message>", or its start when only a prefix is fixed
  bool prefix_only = false;
};

std::vector<MalformedCase> malformed_cases() {
  std::vector<MalformedCase> out;
  const auto expected = nlohmann::json::parse(read_file(kScenarios / "malformed/EXPECTED.json"));
  for (const auto& [file, entry] : expected.items()) {
    const bool prefix_only = entry.contains("message_prefix");
    const std::string message = entry.at(prefix_only ? "message_prefix" : "message").get<std::string>();
    out.push_back({file, entry.at("path").get<std::string>() + ": " + message, prefix_only});
  }
  return out;
}

TEST(ScenarioFiles, EveryMalformedFileIsListedAndThereAreAtLeastTwenty) {
  const auto cases = malformed_cases();
  EXPECT_GE(cases.size(), 20u);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(kScenarios / "malformed"))
    if (entry.path().extension() == ".json" && entry.path().filename() != "EXPECTED.json") ++files;
  EXPECT_EQ(files, cases.size()) << "a malformed scenario file has no expected message";
}

class MalformedScenario : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedScenario, IsAScenarioErrorWithTheExpectedPathAndMessage) {
  const MalformedCase& c = GetParam();
  const std::string text = read_file(kScenarios / "malformed" / c.file);
  try {
    parse_scenario(text);
    FAIL() << c.file << " was accepted";
  } catch (const ScenarioError& e) {
    const std::string got = e.what();
    if (c.prefix_only) EXPECT_EQ(got.rfind(c.expected, 0), 0u) << c.file << ": " << got;
    else EXPECT_EQ(got, c.expected) << c.file;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, MalformedScenario, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) {
                           std::string name = info.param.file.substr(0, info.param.file.size() - 5);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(CollisionNames, DictionaryNamesObeyTheRuleAndRejectedOnesBreakIt) {
  EXPECT_GE(collision_names().size(), 40u);
  for (const auto& entry : collision_names())
    EXPECT_TRUE(zero3::AttrDict::name_problem(entry.name).empty()) << entry.name;
  for (const auto& name : rejected_names()) {
    EXPECT_FALSE(zero3::AttrDict::name_problem(name).empty()) << name.size() << " bytes";
    nlohmann::json s = to_json(Scenario{});  // a rejected name must be a ScenarioError, by the same rule
    s["tree"] = {{{"kind", "Linear"}, {"attrs", {{{"name", name}, {"value", 1}}}}}};
    EXPECT_THROW(scenario_from_json(s), ScenarioError) << name.size() << " bytes";
  }
}

TEST(ScenarioFiles, ValidFilesHoldOnTheReferenceAndCatchLegacy) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(kScenarios / "valid")) {
    const Scenario s = parse_scenario(read_file(entry.path()));
    EXPECT_TRUE(run_scenario(s, RunOptions{}).ok()) << entry.path();
    RunOptions legacy;
    legacy.fault = zero3::Fault::legacy_0_15_4;
    const Verdict v = run_scenario(s, legacy);
    ASSERT_FALSE(v.ok()) << entry.path();
    EXPECT_EQ(v.violation->invariant, "I1");
    ++count;
  }
  EXPECT_GT(count, 0);
}

// The model diverges to inf and then NaN on both sides alike (SGD at lr 0.3): parity compares
// as numbers, a NaN matching a NaN, so this holds (commit 12dde51's fix). Once a fuzzer input; as
// a scenario file its numbers are pinned by the seeded-values rule, and the test checks that the
// NaN it is about is still reached.
TEST(ScenarioFiles, ADivergenceToNanOnBothSidesHolds) {
  const Scenario s = parse_scenario(read_file(kScenarios / "regressions" / "nan_on_both_sides.json"));
  const Verdict v = run_scenario(s, RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  EXPECT_TRUE(std::any_of(v.history.begin(), v.history.end(),
                          [](const std::string& line) { return line.find("loss -nan") != std::string::npos ||
                                                               line.find("loss nan") != std::string::npos; }))
      << "the scenario no longer reaches a NaN loss";
}

// An engine initialized afresh loads a checkpoint whose optimizer stepped expert 1, then trains
// on expert 0 only: expert 1 must keep stepping with a zero gradient, as the twin's does (commit
// 7188cc2's fix). Once fuzzer bytes (fuzz/regressions/scenario_ops/); a change to the draw made
// them another scenario, so the case is written out as the scenario it was.
TEST(ScenarioFiles, ALoadIntoAFreshEngineKeepsSteppingWhatTheCheckpointStepped) {
  const Scenario s = parse_scenario(read_file(kScenarios / "regressions" / "load_into_fresh_engine_keeps_stepping.json"));
  const Verdict v = run_scenario(s, RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  ASSERT_EQ(v.outcomes.size(), s.ops.size());
  EXPECT_EQ(v.outcomes[10].kind, OpKind::load);
  EXPECT_EQ(v.outcomes[10].status, OpOutcome::Status::applied) << v.outcomes[10].detail;
}

// Two engine bugs the first drawn injections found (`zerocheck check --seed 11`, shrunk). Without
// protection and with gradient_clipping, an injected NaN makes the clip multiplier NaN; a Linear
// of one feature at world 2 leaves rank 1 only padding, whose zero gradient times NaN stepped it
// to NaN: the padding must stay zero (I3).
TEST(ScenarioFiles, ANanClipMultiplierLeavesThePaddingZero) {
  const Scenario s = parse_scenario(read_file(kScenarios / "regressions" / "nan_clip_keeps_padding_zero.json"));
  const Verdict v = run_scenario(s, RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  EXPECT_TRUE(std::any_of(v.history.begin(), v.history.end(), [](const std::string& line) {
    return line.find("forward: loss nan") != std::string::npos || line.find("forward: loss -nan") != std::string::npos;
  })) << "the injected NaN no longer reaches the loss";
}

// bf16 with overflow protection at world 1: a skipped step kept the masters' widened fp32
// gradients, which an applied step drops: the rank held 8 bytes no tensor accounts for (I4).
TEST(ScenarioFiles, ASkippedBf16StepDropsItsFp32Gradients) {
  const Scenario s =
      parse_scenario(read_file(kScenarios / "regressions" / "bf16_skipped_step_drops_fp32_gradients.json"));
  const Verdict v = run_scenario(s, RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  EXPECT_TRUE(std::any_of(v.history.begin(), v.history.end(),
                          [](const std::string& line) { return line.find("step: ok; 1 skipped") != std::string::npos; }))
      << "the step is no longer skipped";
}

// zerocheck-scenario/2 only added keys and an operation whose defaults are /1's meaning: every
// checked-in /1 file reads, and reads the same as its /2 rewrite.
TEST(ScenarioFiles, FormatOneIsStillRead) {
  int count = 0;
  for (const char* folder : {"valid", "regressions", "twin"})
    for (const auto& entry : fs::directory_iterator(kScenarios / folder)) {
      if (entry.path().extension() != ".json") continue;
      auto doc = nlohmann::json::parse(read_file(entry.path()));
      if (doc.at("format") != "zerocheck-scenario/1") continue;
      const nlohmann::json as_two = to_json(scenario_from_json(doc));
      EXPECT_EQ(as_two.at("format"), schema::kFormat) << entry.path();
      EXPECT_EQ(as_two, to_json(scenario_from_json(as_two))) << entry.path();
      doc["format"] = "zerocheck-scenario/2";
      EXPECT_EQ(to_json(scenario_from_json(doc)), as_two) << entry.path();
      ++count;
    }
  EXPECT_GT(count, 0) << "no zerocheck-scenario/1 file left to read";
}

// Every key version 2 added survives the writer and the reader, and a default is never written
// where absence means something else (a tag, a config error).
TEST(ScenarioFiles, FormatTwoKeysRoundTrip) {
  Scenario s;
  NodeSpec linear;
  linear.kind = "Linear";
  s.tree = {linear};
  s.construct = "zero_init";
  Op save(OpKind::save);
  save.tag = "step-\xce\xbb";
  Op load(OpKind::load);
  load.tag = save.tag;
  load.optimizer_states = false;
  Op module_only(OpKind::load);
  module_only.module_only = true;
  Op gather(OpKind::gather);
  gather.modifier_rank = 1;
  gather.scale = -0.5;
  Op gather_all(OpKind::gather);
  gather_all.scale = 2;
  Op bad(OpKind::initialize);
  bad.config_error = schema::ConfigErrorKind::zero_stage;
  s.ops = {Op(OpKind::initialize), save, load, module_only, gather, gather_all, bad};
  const nlohmann::json written = to_json(s);
  EXPECT_EQ(written, to_json(scenario_from_json(written)));
  EXPECT_FALSE(written["ops"][0].contains("config_error"));
  EXPECT_FALSE(written["ops"][3].contains("tag"));
  EXPECT_TRUE(written["ops"][5]["modifier_rank"].is_null());
  EXPECT_EQ(written["ops"][6]["config_error"], "zero_stage");
  const Scenario back = scenario_from_json(written);
  EXPECT_EQ(back.construct, "zero_init");
  EXPECT_EQ(back.ops[2].tag, save.tag);
  EXPECT_FALSE(back.ops[2].optimizer_states);
  EXPECT_TRUE(back.ops[3].module_only);
  EXPECT_EQ(back.ops[4].modifier_rank, 1);
  EXPECT_EQ(back.ops[4].scale, -0.5);
  EXPECT_FALSE(back.ops[5].modifier_rank.has_value());
  EXPECT_EQ(back.ops[6].config_error, schema::ConfigErrorKind::zero_stage);
}

// inject and overflow_protection survive the writer and the reader; a scenario without
// overflow_protection writes no such key (what it wrote before the key existed).
TEST(ScenarioFiles, InjectAndOverflowProtectionRoundTrip) {
  Scenario s;
  NodeSpec linear;
  linear.kind = "Linear";
  s.tree = {linear};
  EXPECT_FALSE(to_json(s).contains("overflow_protection"));
  Op input(OpKind::inject), gradient(OpKind::inject);
  input.rank = 1;
  input.into = "input";
  input.value = zero3::AttrValue(std::string("-inf"));
  gradient.into = "gradient";
  gradient.value = zero3::AttrValue(std::string("nan"));
  gradient.param = "bias";
  s.ops = {input, gradient};
  OverflowProtection protection;
  protection.loss_scale = 0;
  protection.initial_scale_power = 3;
  protection.loss_scale_window = 2;
  s.overflow_protection = protection;
  const nlohmann::json written = to_json(s);
  EXPECT_EQ(written, to_json(scenario_from_json(written)));
  EXPECT_FALSE(written["ops"][0].contains("param"));
  EXPECT_EQ(written["ops"][1]["param"], "bias");
  EXPECT_EQ(written["overflow_protection"]["initial_scale_power"], 3);
  const Scenario back = scenario_from_json(written);
  EXPECT_EQ(back.ops[0].rank, 1);
  EXPECT_EQ(back.ops[0].into, "input");
  EXPECT_EQ(injected_value(back.ops[0]), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(injected_value(back.ops[1])));
  ASSERT_TRUE(back.overflow_protection.has_value());
  EXPECT_EQ(*back.overflow_protection, protection);
}

// Each rule of inject and overflow_protection is a ScenarioError naming the operation's path and
// the offending value.
TEST(ScenarioFiles, InjectRulesNameTheOperationAndTheValue) {
  const auto refusal = [](const std::string& op, const std::string& extra = "") {
    const std::string text = R"({"format": "zerocheck-scenario/2", "world_size": 2, "seed": 0, "features": 2,
      "batch": 1, "optimizer": {"kind": "sgd", "lr": 0.1}, "config": {"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3}}, "tree": [{"kind": "Sequential", "children": [1]}, {"kind": "Linear"}],
      "ops": [{"op": "forward"}, )" + op + "]" + extra + "}";
    try {
      parse_scenario(text);
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 1, "into": "gradient", "value": "nan", "param": "0.weight"})"),
            "accepted");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 2, "into": "loss", "value": "nan"})"),
            "$.ops[1].rank: value 2 is out of range [0, 1]");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "gradient", "value": "inf", "param": "weight"})"),
            "$.ops[1].param: the tree has no parameter \"weight\" (parameters: 0.weight, 0.bias)");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "gradient", "value": "inf"})"),
            "$.ops[1].param: missing required key (an inject into \"gradient\" names a parameter)");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "input", "value": "inf", "param": "0.bias"})"),
            "$.ops[1].param: only an inject into \"gradient\" names a parameter");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "input", "value": "NaN"})"),
            "$.ops[1].value: unknown value \"NaN\" (expected one of: nan, inf, -inf)");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "input", "value": 1.5})"),
            "$.ops[1].value: expected a string, one of: nan, inf, -inf");
  EXPECT_EQ(refusal(R"({"op": "inject", "rank": 0, "into": "weights", "value": "nan"})"),
            "$.ops[1].into: unknown value \"weights\" (expected one of: input, loss, gradient)");
  EXPECT_EQ(refusal(R"({"op": "zero_grad"})", R"(, "overflow_protection": {"hysteresis": 0})"),
            "$.overflow_protection.hysteresis: value 0 is out of range [1, 1000]");
  EXPECT_EQ(refusal(R"({"op": "zero_grad"})", R"(, "overflow_protection": {"loss_scale": -1})"),
            "$.overflow_protection.loss_scale: expected a number in [0, 4.29497e+09], got -1");
  EXPECT_EQ(refusal(R"({"op": "zero_grad"})", R"(, "overflow_protection": {"scale": 2})"),
            "$.overflow_protection.scale: unknown key (expected one of: loss_scale, initial_scale_power, "
            "loss_scale_window, hysteresis, min_loss_scale)");
}

// parameter_paths walks the specs as named_parameters walks the built tree: every distinct
// parameter once, a shared module's at its first place, an MoE's experts under `experts.i`.
TEST(ScenarioFiles, ParameterPathsAreTheBuiltTreesNamedParameters) {
  const Scenario s = parse_scenario(R"({"format": "zerocheck-scenario/2", "world_size": 1, "seed": 0,
    "features": 2, "batch": 1, "optimizer": {"kind": "sgd", "lr": 0.1},
    "config": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}},
    "tree": [{"kind": "Sequential", "children": [1, 2, 1, 5]}, {"kind": "Linear", "bias": false},
             {"kind": "MoE", "children": [3, 4, 3]}, {"kind": "Expert"}, {"kind": "Offset", "shape": [3]},
             {"kind": "LayerNorm"}, {"kind": "Linear"}],
    "ops": []})");
  std::vector<std::string> built;
  for (const auto& entry : zero3::unique_modules(build_tree(s)))
    for (const auto& item : entry.module->own_parameters())
      built.push_back(entry.path.empty() ? item.first : entry.path + "." + item.first);
  EXPECT_EQ(parameter_paths(s), built);
  EXPECT_EQ(parameter_paths(s), (std::vector<std::string>{"0.weight", "1.experts.0.linear.weight",
                                                         "1.experts.0.linear.bias", "1.experts.1.value",
                                                         "3.weight", "3.bias"}));
}

// World 3, a persistent bias and partitioned weights, accumulation 2, Adam: an infinity in one
// rank's gradient of a persistent parameter, a NaN in another rank's input, a -inf loss factor.
std::string poisoned_scenario(const std::string& protection) {
  return R"({"format": "zerocheck-scenario/2", "world_size": 3, "seed": 5, "features": 4, "batch": 2,
    "optimizer": {"kind": "adam", "lr": 0.01}, "config": {"train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 4}},
    "tree": [{"kind": "Sequential", "children": [1, 2, 3]}, {"kind": "Linear"}, {"kind": "Tanh"}, {"kind": "Linear"}],
    "ops": [{"op": "initialize", "optimizer": "same", "target": ""},
      {"op": "inject", "rank": 2, "into": "gradient", "value": "inf", "param": "0.bias"},
      {"op": "forward"}, {"op": "backward"}, {"op": "step"}, {"op": "forward"}, {"op": "backward"}, {"op": "step"},
      {"op": "zero_grad"}, {"op": "forward"}, {"op": "backward"}, {"op": "step"},
      {"op": "inject", "rank": 1, "into": "input", "value": "nan"},
      {"op": "inject", "rank": 0, "into": "loss", "value": "-inf"},
      {"op": "forward"}, {"op": "backward"}, {"op": "step"}, {"op": "forward"}, {"op": "backward"}, {"op": "step"},
      {"op": "forward"}, {"op": "backward"}, {"op": "step"}])" + protection + "}";
}

bool history_has(const Verdict& v, const std::string& text) {
  return std::any_of(v.history.begin(), v.history.end(),
                     [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

// Without protection the poison flows into the reduction, the masters and the weights, and the
// twin, poisoned alike, follows it exactly (I3: a NaN equals a NaN, an infinity only itself).
TEST(Injections, FlowIntoTheWeightsAlikeWithoutProtection) {
  const Verdict v = run_scenario(parse_scenario(poisoned_scenario("")), RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  EXPECT_TRUE(history_has(v, "#9 forward: loss nan") || history_has(v, "#9 forward: loss -nan"))
      << "the infinity no longer reaches the weights";
}

// With protection, the poisoned accumulation window is skipped on every rank (the next clean one,
// after zero_grad, applies), and so is the second; I11 and I3 hold against the twin.
TEST(Injections, SkipTheirStepOnEveryRankWithProtection) {
  const Verdict v = run_scenario(
      parse_scenario(poisoned_scenario(R"(, "overflow_protection": {"initial_scale_power": 8, "loss_scale_window": 1})")),
      RunOptions{});
  EXPECT_TRUE(v.ok()) << v.violation->to_text();
  EXPECT_TRUE(history_has(v, "#7 step: ok; 1 skipped, loss scale 256, norm inf")) << "the first window is not skipped";
  EXPECT_TRUE(history_has(v, "#11 step: ok; 1 skipped")) << "the clean window after zero_grad is skipped";
  EXPECT_TRUE(history_has(v, "#19 step: ok; 2 skipped")) << "the second poisoned window is not skipped";
}

// The tag rule names the tag and what is wrong with it; a valid tag has no problem.
TEST(ScenarioFiles, TagRule) {
  EXPECT_EQ(zero3::tag_problem("global_step7"), "");
  EXPECT_EQ(zero3::tag_problem("a.b"), "");
  EXPECT_EQ(zero3::tag_problem(std::string(64, 't')), "");
  EXPECT_EQ(zero3::tag_problem(std::string(65, 't')), "tag \"" + std::string(65, 't') + "\" has 65 bytes, expected 1..64");
  EXPECT_EQ(zero3::tag_problem("a/b"), "tag \"a/b\" contains \"/\"");
  EXPECT_EQ(zero3::tag_problem(".."), "tag \"..\" contains \"..\"");
  EXPECT_EQ(zero3::tag_problem(std::string("a\0b", 3)), "tag \"a\\u0000b\" contains \"\\u0000\"");
  EXPECT_EQ(zero3::tag_problem("."), "tag \".\" is reserved (the checkpoint folder, or a file beside the tags)");
  for (const auto& reserved : zero3::reserved_tags()) EXPECT_NE(zero3::tag_problem(reserved), "") << reserved;
}

}  // namespace
}  // namespace zerocheck
