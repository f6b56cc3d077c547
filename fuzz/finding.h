// A fuzz target's finding: the one line the campaign groups crashes by, and the full story.
//
// Every target checks an input with a plain function that returns an optional Finding (so the
// replay tests call the same code); only the libFuzzer entry turns a finding into an abort.
#pragma once

#include <exception>
#include <optional>
#include <string>

namespace zerocheck::fuzz {

struct Finding {
  std::string signature;  // one line, no input-specific values: "scenario_ops legacy-0.15.4 I1 after initialize"
  std::string details;    // what was expected and seen, the scenario, the replay command
};

// What a parser target saw: whether the input parsed (the alternative being the parser's own,
// documented error), and a finding when anything else happened.
struct ParseCheck {
  bool parsed = false;
  std::string refusal;  // the parser's message when it refused the input
  std::optional<Finding> finding;
};

// The line that starts every report on stderr; ci/fuzz-campaign greps for it.
inline constexpr const char* kFindingMarker = "zerocheck-fuzz: FINDING ";

// Prints `finding` to stderr (marker + signature, then the details) and aborts, so libFuzzer
// saves the input as a crash artifact.
[[noreturn]] void report_and_abort(const Finding& finding);

// Returns the dynamic type of `e`, demangled ("std::out_of_range"), for findings about
// exceptions that should not have escaped.
std::string exception_type(const std::exception& e);

}  // namespace zerocheck::fuzz
