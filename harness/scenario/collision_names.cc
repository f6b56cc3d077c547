#include "harness/scenario/collision_names.h"

#include <set>

namespace zerocheck {

const std::vector<CollisionName>& collision_names() {
  static const std::vector<CollisionName> names = [] {
    std::vector<CollisionName> out;
    std::set<std::string> seen;
    auto add = [&](const char* name, const char* source) {
      if (seen.insert(name).second) out.push_back({name, source});
    };
#define ZEROCHECK_ADD(source) [&](const char* n) { add(n, source); }
    auto upstream_module = ZEROCHECK_ADD("upstream-module");
    auto upstream_param = ZEROCHECK_ADD("upstream-param");
    auto common = ZEROCHECK_ADD("common");
    auto near_miss = ZEROCHECK_ADD("near-miss");
#undef ZEROCHECK_ADD
#define ZEROCHECK_UM(n) upstream_module(n);
#define ZEROCHECK_UP(n) upstream_param(n);
#define ZEROCHECK_CO(n) common(n);
#define ZEROCHECK_NM(n) near_miss(n);
    ZERO3_UPSTREAM_MODULE_NAMES(ZEROCHECK_UM)
    ZERO3_UPSTREAM_PARAM_NAMES(ZEROCHECK_UP)
    ZEROCHECK_COMMON_NAMES(ZEROCHECK_CO)
    ZEROCHECK_NEAR_MISS_NAMES(ZEROCHECK_NM)
#undef ZEROCHECK_UM
#undef ZEROCHECK_UP
#undef ZEROCHECK_CO
#undef ZEROCHECK_NM
    return out;
  }();
  return names;
}

const std::vector<std::string>& rejected_names() {
  static const std::vector<std::string> names = {
      std::string(), std::string(4096, 'n'), std::string("\xff\xfe"), std::string("a\0b", 3)};
  return names;
}

}  // namespace zerocheck
