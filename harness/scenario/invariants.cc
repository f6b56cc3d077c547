#include "harness/scenario/invariants.h"

#include "engine/errors.h"
#include "engine/json_reader.h"

#include <algorithm>
#include <sstream>

namespace zerocheck {

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

const std::vector<std::string>& reference_invariants() {
  static const std::vector<std::string> all = [] {
    const std::set<std::string> upstream_only = {
#define ZEROCHECK_UPSTREAM_ONLY_NAME(name) #name,
        ZEROCHECK_UPSTREAM_ONLY_INVARIANTS(ZEROCHECK_UPSTREAM_ONLY_NAME)
#undef ZEROCHECK_UPSTREAM_ONLY_NAME
    };
    std::vector<std::string> names;
    for (const auto& name : invariants())
      if (upstream_only.count(name) == 0) names.push_back(name);
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
      throw zero3::UsageError("'" + item + "' is not an invariant (expected one of: " + zero3::join_names(invariants()) +
                              ")");
    out.insert(item);
  }
  return out;
}

}  // namespace zerocheck
