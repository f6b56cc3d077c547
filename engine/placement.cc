#include "engine/placement.h"

#include "engine/errors.h"

#include <nlohmann/json.hpp>

namespace zero3 {

int attr_mod_owner(const std::string& path, const AttrDict& attrs, const std::string& attr,
                   int world_size) {
  const std::string where = path.empty() ? "<root>" : path;
  if (!attrs.has(attr))
    throw PlacementError(where + ": placement policy 'attr_mod " + attr +
                         "' needs the user attribute '" + attr + "', which is missing");
  const AttrValue& value = attrs.get(attr);
  if (!value.is_int())
    throw PlacementError(where + ": placement policy 'attr_mod " + attr + "' needs an integer, '" +
                         attr + "' is " + value.repr());
  const int64_t v = value.as_int();
  return static_cast<int>(((v % world_size) + world_size) % world_size);
}

PlacementPolicy make_placement_policy(const PlacementSpec& spec) {
  switch (spec.kind) {
    case PlacementSpec::Kind::none:
      return [](const std::string&, const Module&, int) { return std::optional<int>(); };
    case PlacementSpec::Kind::attr_mod:
      return [attr = spec.attr](const std::string& path, const Module& module, int world) {
        if (module.kind() != "Expert") return std::optional<int>();
        return std::optional<int>(attr_mod_owner(path, module.attrs(), attr, world));
      };
    case PlacementSpec::Kind::map:
      return [owners = spec.owners](const std::string& path, const Module&, int world) {
        auto it = owners.find(path);
        if (it == owners.end()) return std::optional<int>();
        if (it->second < 0 || it->second >= world)
          throw PlacementError((path.empty() ? "<root>" : path) + ": placement map names rank " +
                               std::to_string(it->second) + ", outside a world of " +
                               std::to_string(world));
        return std::optional<int>(static_cast<int>(it->second));
      };
  }
  return {};
}

const std::vector<std::string>& placement_kind_names() {
  static const std::vector<std::string> all = {
#define ZERO3_PLACEMENT_NAME(kind, key) #kind,
      ZERO3_PLACEMENT_KINDS(ZERO3_PLACEMENT_NAME)
#undef ZERO3_PLACEMENT_NAME
  };
  return all;
}

const char* to_string(PlacementSpec::Kind kind) {
  switch (kind) {
#define ZERO3_PLACEMENT_CASE(k, key) \
  case PlacementSpec::Kind::k:       \
    return #k;
    ZERO3_PLACEMENT_KINDS(ZERO3_PLACEMENT_CASE)
#undef ZERO3_PLACEMENT_CASE
  }
  return "?";
}

const char* placement_key(PlacementSpec::Kind kind) {
  switch (kind) {
#define ZERO3_PLACEMENT_KEY(k, key) \
  case PlacementSpec::Kind::k:      \
    return key;
    ZERO3_PLACEMENT_KINDS(ZERO3_PLACEMENT_KEY)
#undef ZERO3_PLACEMENT_KEY
  }
  return "";
}

PlacementSpec read_placement(const JsonAt& at) {
  at.map();  // the kind comes first: it says which other key the policy has
  PlacementSpec spec;
  const std::string kind = at["kind"].one_of(placement_kind_names());
  for (size_t i = 0; i < placement_kind_names().size(); ++i)
    if (placement_kind_names()[i] == kind) spec.kind = static_cast<PlacementSpec::Kind>(i);
  const std::string key = placement_key(spec.kind);
  at.object(key.empty() ? std::vector<std::string>{"kind"} : std::vector<std::string>{"kind", key});
  if (spec.kind == PlacementSpec::Kind::attr_mod) {
    const JsonAt attr = at["attr"];
    spec.attr = attr.string();
    if (auto problem = AttrDict::name_problem(spec.attr); !problem.empty()) attr.fail(problem);
  }
  if (spec.kind == PlacementSpec::Kind::map)
    for (const auto& [path, rank] : at["owners"].members()) spec.owners[path] = rank.integer(INT64_MIN, INT64_MAX);
  return spec;
}

PlacementSpec placement_from_json(const nlohmann::json& json, const std::string& json_path) {
  return read_placement(JsonAt(json, json_path, [](const std::string& m) { throw ConfigError(m); }));
}

nlohmann::json placement_to_json(const PlacementSpec& spec) {
  switch (spec.kind) {
    case PlacementSpec::Kind::none: return {{"kind", "none"}};
    case PlacementSpec::Kind::attr_mod: return {{"kind", "attr_mod"}, {"attr", spec.attr}};
    case PlacementSpec::Kind::map: return {{"kind", "map"}, {"owners", spec.owners}};
  }
  return {};
}

std::string describe(const PlacementSpec& spec) {
  switch (spec.kind) {
    case PlacementSpec::Kind::none: return "none";
    case PlacementSpec::Kind::attr_mod: return "attr_mod " + spec.attr;
    case PlacementSpec::Kind::map: return "map " + placement_to_json(spec)["owners"].dump();
  }
  return to_string(spec.kind);
}

}  // namespace zero3
