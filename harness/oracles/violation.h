// Violation: an invariant broken, where (operation, rank, module path, attribute) and how
// (expected against actual), in words a maintainer can act on. Every oracle returns one or
// nothing; a rank throws ViolationFound to stop its world at once.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zerocheck {

struct Violation {
  std::string invariant;  // a row of ZEROCHECK_INVARIANTS (harness/scenario/invariants.h)
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

// Thrown inside a rank when it finds a violation, so the world stops at once.
struct ViolationFound : std::exception {
  explicit ViolationFound(Violation v) : violation(std::move(v)) {}
  const char* what() const noexcept override { return violation.message.c_str(); }
  Violation violation;
};

}  // namespace zerocheck
