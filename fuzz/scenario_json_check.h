// The scenario_json target's check: any bytes -> parse_scenario (harness/scenario/scenario.h).
//
// Holds when the text parses or is refused with ScenarioError; any other exception is a finding.
// A scenario that parses must survive write -> read -> write unchanged:
// to_json(parse_scenario(to_json(s).dump())) == to_json(s), because every finding is stored and
// replayed in that form.
#pragma once

#include "fuzz/finding.h"

#include <string_view>

namespace zerocheck::fuzz {

// Returns whether `text` parsed, and a finding when the reader broke its contract.
ParseCheck check_scenario_json(std::string_view text);

}  // namespace zerocheck::fuzz
