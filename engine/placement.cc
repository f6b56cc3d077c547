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

PlacementSpec placement_from_json(const nlohmann::json& json, const std::string& json_path) {
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw ConfigError(json_path + (key.empty() ? "" : "." + key) + ": " + what);
  };
  PlacementSpec spec;
  if (!json.is_object()) fail("", std::string("expected an object, got ") + json.type_name());
  if (!json.contains("kind") || !json["kind"].is_string()) fail("kind", "expected \"none\", \"attr_mod\" or \"map\"");
  const std::string kind = json["kind"].get<std::string>();
  for (const auto& [key, value] : json.items()) {
    if (key == "kind") continue;
    if (key == "attr" && kind == "attr_mod") {
      if (!value.is_string() || value.get<std::string>().empty()) fail(key, "expected a non-empty string");
      spec.attr = value.get<std::string>();
    } else if (key == "owners" && kind == "map") {
      if (!value.is_object()) fail(key, "expected an object of module path -> rank");
      for (const auto& [path, rank] : value.items()) {
        if (!rank.is_number_integer()) fail(key + "." + path, "expected an integer rank");
        spec.owners[path] = rank.get<int64_t>();
      }
    } else {
      fail(key, "unknown key for placement kind '" + kind + "'");
    }
  }
  if (kind == "none") spec.kind = PlacementSpec::Kind::none;
  else if (kind == "attr_mod") {
    spec.kind = PlacementSpec::Kind::attr_mod;
    if (spec.attr.empty()) fail("attr", "attr_mod needs the attribute name");
  } else if (kind == "map") spec.kind = PlacementSpec::Kind::map;
  else fail("kind", "unknown placement kind '" + kind + "' (expected none, attr_mod or map)");
  return spec;
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
  return "?";
}

}  // namespace zero3
