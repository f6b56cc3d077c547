// What running a scenario found: the first broken invariant (if any) and the history of what
// each operation did, so a failure reads as a story and replays as a command.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zerocheck {

struct Violation {
  std::string invariant;  // "I1".."I7"
  int64_t op_index = -1;  // the operation after which it was seen
  int rank = 0;
  std::string module_path;  // "" for the root
  std::string attribute;    // attribute or parameter name, when there is one
  std::string expected;
  std::string actual;
  std::string message;

  std::string to_text() const;
  nlohmann::json to_json() const;
  // The inverse of to_json. Throws nlohmann::json::exception for a malformed object.
  static Violation from_json(const nlohmann::json& json);
};

struct Verdict {
  std::optional<Violation> violation;
  std::vector<std::string> history;  // one line per operation, as rank 0 saw it

  bool ok() const { return !violation.has_value(); }
};

// Thrown inside a rank when it finds a violation, so the world stops at once.
struct ViolationFound : std::exception {
  explicit ViolationFound(Violation v) : violation(std::move(v)) {}
  const char* what() const noexcept override { return violation.message.c_str(); }
  Violation violation;
};

}  // namespace zerocheck
