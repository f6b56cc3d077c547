// Properties of the fuzz decoder (harness/scenario/bytes.h): any bytes give a valid scenario,
// the empty input gives the smallest one, and DecodeLimits only narrows what is decoded.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "engine/errors.h"
#include "harness/scenario/bytes.h"

#include <vector>

namespace zerocheck {
namespace {

Scenario decode(const std::vector<uint8_t>& bytes, const DecodeLimits& limits = {}) {
  return scenario_from_bytes(bytes.data(), bytes.size(), limits);
}

RC_GTEST_PROP(ScenarioBytes, AnyBytesDecodeToAValidScenarioThatRoundTrips, (const std::vector<uint8_t>& bytes)) {
  const Scenario s = decode(bytes);
  validate(s);  // throws ScenarioError, which fails the property with its message
  const auto json = to_json(s);
  RC_ASSERT(to_json(parse_scenario(json.dump())) == json);
  RC_ASSERT(s.tree.size() <= kMaxDecodedNodes);
  RC_ASSERT(s.ops.size() <= kMaxDecodedOps);
}

TEST(ScenarioBytes, TheEmptyInputIsTheSmallestScenario) {
  const Scenario s = decode({});
  validate(s);
  EXPECT_EQ(s.world_size, 1);
  EXPECT_EQ(s.tree.size(), 1u);
  EXPECT_LE(s.ops.size(), 1u);
}

RC_GTEST_PROP(ScenarioBytes, LimitsNarrowButReadTheSameBytes, (const std::vector<uint8_t>& bytes)) {
  DecodeLimits limits;
  limits.world = *rc::gen::inRange(1, kMaxFixedWorld + 1);  // a fixed world may be wider than the drawn ones
  limits.max_nodes = *rc::gen::inRange<size_t>(1, kMaxDecodedNodes + 1);
  limits.max_ops = *rc::gen::inRange<size_t>(0, kMaxDecodedOps + 1);
  const Scenario narrow = decode(bytes, limits);
  validate(narrow);
  RC_ASSERT(narrow.world_size == limits.world);
  RC_ASSERT(narrow.tree.size() <= limits.max_nodes);
  RC_ASSERT(narrow.ops.size() <= limits.max_ops);
  // A fixed world alone reads the same bytes: the tree and the operation kinds stay as decoded.
  DecodeLimits world_only;
  world_only.world = limits.world;
  const Scenario decoded = decode(bytes);
  const Scenario fixed = decode(bytes, world_only);
  RC_ASSERT(fixed.tree.size() == decoded.tree.size());
  RC_ASSERT(fixed.ops.size() == decoded.ops.size());
  for (size_t i = 0; i < fixed.tree.size(); ++i) RC_ASSERT(fixed.tree[i].kind == decoded.tree[i].kind);
  for (size_t i = 0; i < fixed.ops.size(); ++i) RC_ASSERT(fixed.ops[i].kind == decoded.ops[i].kind);
}

TEST(ScenarioBytes, OutOfRangeLimitsAreUsageErrorsNamingTheField) {
  const uint8_t byte = 0;
  auto message_of = [&](DecodeLimits limits) -> std::string {
    try {
      scenario_from_bytes(&byte, 1, limits);
    } catch (const zero3::UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  DecodeLimits world;
  world.world = 9;
  EXPECT_NE(message_of(world).find("world = 9"), std::string::npos) << message_of(world);
  DecodeLimits nodes;
  nodes.max_nodes = 0;
  EXPECT_NE(message_of(nodes).find("max_nodes = 0"), std::string::npos) << message_of(nodes);
  DecodeLimits ops;
  ops.max_ops = 65;
  EXPECT_NE(message_of(ops).find("max_ops = 65"), std::string::npos) << message_of(ops);
}

}  // namespace
}  // namespace zerocheck
