#include "harness/oracles/violation.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zerocheck {

std::string Violation::to_text() const {
  std::string out = fmt::format("{} violated after operation #{} on rank {}", invariant, op_index, rank);
  if (!module_path.empty() || !attribute.empty())
    out += fmt::format(" at module '{}'{}", module_path, attribute.empty() ? "" : ", '" + attribute + "'");
  out += ": " + message;
  if (!expected.empty() || !actual.empty())
    out += fmt::format("\n  expected: {}\n  actual:   {}", expected, actual);
  return out;
}

nlohmann::json Violation::to_json() const {
  return {{"invariant", invariant}, {"op_index", op_index}, {"rank", rank},
          {"module_path", module_path}, {"attribute", attribute}, {"expected", expected},
          {"actual", actual}, {"message", message}};
}

Violation Violation::from_json(const nlohmann::json& json) {
  Violation v;
  v.invariant = json.at("invariant").get<std::string>();
  v.op_index = json.at("op_index").get<int64_t>();
  v.rank = json.at("rank").get<int>();
  v.module_path = json.at("module_path").get<std::string>();
  v.attribute = json.at("attribute").get<std::string>();
  v.expected = json.at("expected").get<std::string>();
  v.actual = json.at("actual").get<std::string>();
  v.message = json.at("message").get<std::string>();
  return v;
}

}  // namespace zerocheck
