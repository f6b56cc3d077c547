// The list of invariants and the helpers every oracle shares.
#include "engine/errors.h"
#include "harness/oracles/oracles.h"

#include "engine/json_reader.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace zerocheck::oracles {

const std::vector<InvariantRow>& invariant_rows() {
  static const std::vector<InvariantRow> all = {
#define ZEROCHECK_INVARIANT_ROW(name, statement) {#name, statement},
      ZEROCHECK_INVARIANTS(ZEROCHECK_INVARIANT_ROW)
#undef ZEROCHECK_INVARIANT_ROW
  };
  return all;
}

const std::vector<std::string>& invariants() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> names;
    for (const auto& row : invariant_rows()) names.push_back(row.name);
    return names;
  }();
  return all;
}

std::set<std::string> parse_invariants(const std::string& list) {
  std::set<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    if (std::find(invariants().begin(), invariants().end(), item) == invariants().end())
      throw zero3::UsageError("'" + item + "' is not an invariant (expected one of: " +
                                zero3::join_names(invariants()) + ")");
    out.insert(item);
  }
  return out;
}

Violation violation(const std::string& invariant, const std::string& module_path, const std::string& attribute,
                    const std::string& expected, const std::string& actual, const std::string& message) {
  return Violation{invariant, -1, 0, module_path, attribute, expected, actual, message};
}

std::string difference(const at::Tensor& expected, const at::Tensor& actual) {
  if (!actual.defined()) return "<none>";
  if (expected.sizes() != actual.sizes())
    return fmt::format("shape {} (expected {})", c10::str(actual.sizes()), c10::str(expected.sizes()));
  if (expected.numel() == 0) return "equal";
  const double diff = (expected.detach().cpu().to(at::kDouble) - actual.detach().cpu().to(at::kDouble)).abs().max().item<double>();
  return fmt::format("max diff {:g}", diff);
}

}  // namespace zerocheck::oracles
