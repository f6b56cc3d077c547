// Properties over random scenarios: the reference engine holds every invariant, and the
// generator reaches the shapes that matter (tied weights, frozen and zero-size parameters,
// experts, placement), shown with RC_CLASSIFY.
//
// ctest pins seeds and budgets through RC_PARAMS (properties/CMakeLists.txt); run the binary
// unpinned to explore: RC_PARAMS="max_success=5000" build/dev/bin/property_tests.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "engine/testing/fault_under_test.h"
#include "harness/scenario/generators.h"
#include "harness/interpreter/interpreter.h"

namespace zerocheck {
namespace {

std::string failure_report(const Scenario& s, const Verdict& v) {
  std::string out = v.violation->to_text() + "\nscenario:\n" + describe(s) + "history (rank 0):\n";
  for (const auto& line : v.history) out += "  " + line + "\n";
  out += "as JSON (save it and run `zerocheck replay FILE`):\n" + to_json(s).dump() + "\n";
  return out;
}

RC_GTEST_PROP(ScenarioProperties, ReferenceEngineHoldsEveryInvariant, ()) {
  const Scenario s = *gen_scenario(GeneratorOptions{});
  const ScenarioShape shape = shape_of(s);
  RC_CLASSIFY(shape.tied, "tied weights");
  RC_CLASSIFY(shape.frozen, "frozen parameters");
  RC_CLASSIFY(shape.zero_size, "zero-size parameter");
  RC_CLASSIFY(shape.experts, "experts");
  RC_CLASSIFY(s.placement.kind != zero3::PlacementSpec::Kind::none, "placement policy");
  RunOptions options;
  options.fault = fault_under_test();  // the reference unless ZEROCHECK_FAULT plants one
  const Verdict v = run_scenario(s, options);
  if (!v.ok()) RC_FAIL(failure_report(s, v));
}

RC_GTEST_PROP(ScenarioProperties, ScenarioJsonRoundTrips, ()) {
  const Scenario s = *gen_scenario(GeneratorOptions{});
  const auto json = to_json(s);
  RC_ASSERT(to_json(parse_scenario(json.dump())) == json);
}

RC_GTEST_PROP(ScenarioProperties, Legacy0154IsCaughtWheneverItInitializes, ()) {
  const Scenario s = *gen_scenario(GeneratorOptions{});
  RunOptions legacy;
  legacy.fault = zero3::Fault::legacy_0_15_4;
  const Verdict v = run_scenario(s, legacy);
  const bool initializes = std::any_of(s.ops.begin(), s.ops.end(), [](const Op& op) {
    return op.kind == OpKind::initialize;
  });
  RC_CLASSIFY(initializes, "initializes");
  if (initializes && v.ok()) RC_FAIL("legacy-0.15.4 went unnoticed:\n" + describe(s));
  // By I1 (its id writes), or by I2 when the user's own attributes cannot satisfy the policy and
  // the written ids made initialize accept it, or by I5 when the initialize is refused for its
  // config: legacy-0.15.4 numbers the modules first, and a refused initialize must change nothing.
  const bool refused_for_config = !v.ok() && v.violation->op_index >= 0 &&
                                  static_cast<size_t>(v.violation->op_index) < s.ops.size() &&
                                  s.ops[static_cast<size_t>(v.violation->op_index)].config_error !=
                                      schema::ConfigErrorKind::none;
  if (initializes && v.violation->invariant != "I1" &&
      !(v.violation->invariant == "I2" && v.violation->expected == "PlacementError") &&
      !(v.violation->invariant == "I5" && refused_for_config))
    RC_FAIL("caught, but by neither I1 nor a wrongly accepted placement:\n" + v.violation->to_text());
  if (!initializes) RC_ASSERT(v.ok());
}

}  // namespace
}  // namespace zerocheck
