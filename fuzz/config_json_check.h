// The config_json target's check: any bytes -> zero3::Config::parse.
//
// Holds when the text parses or is refused with ConfigError; any other exception is a finding.
// A config that parses must also survive to_json -> from_json -> to_json unchanged, since
// scenarios and checkpoints store configs in that form.
#pragma once

#include "fuzz/finding.h"

#include <string_view>

namespace zerocheck::fuzz {

// Returns whether `text` parsed, and a finding when the parser broke its contract.
ParseCheck check_config_json(std::string_view text);

}  // namespace zerocheck::fuzz
