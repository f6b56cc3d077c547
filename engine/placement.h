// Placement: which rank owns a module, decided by the user's policy from the module's path and
// the user's own attributes, evaluated once at initialize.
//
// A placed module is not partitioned: its parameters, gradients and optimizer state live whole
// on the owner rank (on the owner's device) and nowhere else; a call to it from any rank sends
// the input to the owner, computes there and sends the output back (see engine.h).
//
// Built-in policies (also selectable from the config's "zerocheck" section and from scenarios):
//   none                  no module is placed;
//   attr_mod ATTR         every Expert's owner is its user attribute ATTR mod N;
//   map {PATH: RANK}      the listed modules are placed on the listed ranks.
#pragma once

#include "engine/json_reader.h"
#include "engine/module.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zero3 {

// X(kind, its one key besides "kind" ("" for none)): the built-in policies.
#define ZERO3_PLACEMENT_KINDS(X) X(none, "") X(attr_mod, "attr") X(map, "owners")

struct PlacementSpec {
  enum class Kind {
#define ZERO3_PLACEMENT_ENUM(kind, key) kind,
    ZERO3_PLACEMENT_KINDS(ZERO3_PLACEMENT_ENUM)
#undef ZERO3_PLACEMENT_ENUM
  };
  Kind kind = Kind::none;
  std::string attr;                       // attr_mod
  std::map<std::string, int64_t> owners;  // map: module path -> rank

  friend bool operator==(const PlacementSpec& a, const PlacementSpec& b) {
    return a.kind == b.kind && a.attr == b.attr && a.owners == b.owners;
  }
};

// Returns the owner of the module at `path`, or nothing when it is not placed.
// Throws PlacementError naming the path when the policy cannot be evaluated.
using PlacementPolicy =
    std::function<std::optional<int>(const std::string& path, const Module& module, int world_size)>;

// Returns the policy a spec describes.
PlacementPolicy make_placement_policy(const PlacementSpec& spec);

// Returns the owner of `module` under attr_mod from an attribute value: value mod N.
// Throws PlacementError naming `path` when the attribute is missing or not an integer.
int attr_mod_owner(const std::string& path, const AttrDict& attrs, const std::string& attr,
                   int world_size);

// The kinds' names and their keys, in ZERO3_PLACEMENT_KINDS order.
const std::vector<std::string>& placement_kind_names();
const char* to_string(PlacementSpec::Kind kind);
// The key a kind takes besides "kind" ("" for none).
const char* placement_key(PlacementSpec::Kind kind);

// Reads a spec from JSON ({"kind": "none"|"attr_mod"|"map", "attr": ..., "owners": {...}}) with
// at's thrower. `attr` follows the attribute-name rule; map ranks are any integers here (a scenario
// checks them against its world size). Throws naming the JSON path.
PlacementSpec read_placement(const JsonAt& at);
// The same with ConfigError, for a value found at `json_path`.
PlacementSpec placement_from_json(const nlohmann::json& json, const std::string& json_path);
nlohmann::json placement_to_json(const PlacementSpec& spec);
// Returns "none", "attr_mod id" or "map {a: 1, b: 0}".
std::string describe(const PlacementSpec& spec);

}  // namespace zero3
