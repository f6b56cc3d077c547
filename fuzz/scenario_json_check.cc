#include "fuzz/scenario_json_check.h"

#include "harness/scenario/scenario.h"

#include <nlohmann/json.hpp>

namespace zerocheck::fuzz {

ParseCheck check_scenario_json(std::string_view text) {
  ParseCheck check;
  Scenario scenario;
  try {
    scenario = parse_scenario(text);
  } catch (const ScenarioError& e) {
    check.refusal = e.what();  // the documented refusal
    return check;
  } catch (const std::exception& e) {
    check.finding = Finding{"scenario_json: parse_scenario threw " + exception_type(e) + " instead of ScenarioError",
                            std::string("what(): ") + e.what()};
    return check;
  } catch (...) {
    check.finding = Finding{"scenario_json: parse_scenario threw a non-std exception", ""};
    return check;
  }
  check.parsed = true;
  std::string written;
  try {
    const nlohmann::json first = to_json(scenario);
    written = first.dump();
    const nlohmann::json second = to_json(parse_scenario(written));
    if (second != first)
      check.finding = Finding{"scenario_json: write -> read -> write changed the scenario",
                              "written: " + written + "\nre-read: " + second.dump() +
                                  "\npatch:   " + nlohmann::json::diff(first, second).dump()};
  } catch (const std::exception& e) {
    check.finding = Finding{"scenario_json: a parsed scenario's JSON form does not read back (" +
                                exception_type(e) + ")",
                            std::string("what(): ") + e.what() + "\nwritten: " + written};
  }
  return check;
}

}  // namespace zerocheck::fuzz
