// Scenario: one whole test case, the currency of the harness.
//
// A world size, a seed, a DeepSpeed config, a module tree with user attributes (on modules and
// parameters), frozen parameters, shared (tied) submodules and experts, a placement policy, and
// a list of operations. rapidcheck generates it, the fuzzers decode it from bytes, `zerocheck
// replay` reads it from JSON, `zerocheck export` writes it for the upstream DeepSpeed replay.
// harness/SCENARIO_FORMAT.md documents the JSON form ("format": "zerocheck-scenario/2"); the
// language itself (kinds, operations, keys, limits) is the tables of harness/scenario/schema.h.
//
// The tree is a list of nodes; node 0 is the root and every child index is greater than its
// parent's, so the tree is acyclic by construction. A node listed as a child twice (or by two
// parents) is one shared module: tied weights. Every module maps `features` -> `features`.
#pragma once

#include "engine/attr_dict.h"
#include "engine/config.h"
#include "engine/errors.h"
#include "engine/module.h"
#include "engine/placement.h"
#include "harness/scenario/schema.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zerocheck {

// Malformed scenario input. The message starts with the JSON path
// ("$.tree[3].children[0]: ...", the convention of engine/json_reader.h).
class ScenarioError : public zero3::Error {
 public:
  using zero3::Error::Error;
};

inline constexpr const char* kScenarioFormat = schema::kFormat;

struct AttrEntry {
  std::string name;
  zero3::AttrValue value;
};

struct NodeSpec {
  std::string kind;                // a row of schema::node_kinds()
  std::vector<int64_t> shape;      // Offset: the parameter's shape (may hold zeros)
  bool bias = true;                // Linear: whether it has a bias
  std::vector<int> children;       // Sequential, ModuleList, MoE (its experts)
  std::vector<AttrEntry> attrs;    // user attributes of the module, in order
  std::map<std::string, std::vector<AttrEntry>> param_attrs;  // by local parameter name
  std::vector<std::string> frozen;                            // local names, requires_grad=false
};

// The operations of schema::ZEROCHECK_OPS, in its order.
enum class OpKind {
#define ZEROCHECK_OP_ENUM(name, required, optional, weight, attributes_weight, doc) name,
  ZEROCHECK_OPS(ZEROCHECK_OP_ENUM)
#undef ZEROCHECK_OP_ENUM
};

const char* to_string(OpKind kind);
// The schema row of `kind` (its keys, draw weight, doc).
const schema::OpRow& row_of(OpKind kind);

struct Op {
  Op() = default;
  explicit Op(OpKind op_kind) : kind(op_kind) {}

  OpKind kind = OpKind::forward;
  // initialize: which optimizer ("same": the user's existing one, "fresh": a new one) and which
  // module ("" for the root, or a module path: a submodule); with a config_error, the named
  // invalid config instead of the scenario's (the engine must refuse it and change nothing).
  std::string optimizer = "same";
  std::string target;
  schema::ConfigErrorKind config_error = schema::ConfigErrorKind::none;
  // forward: expert choices, consumed by MoE layers in call order, cyclically, each taken
  // modulo the layer's expert count (so any list is valid and shrinking keeps it valid).
  std::vector<int64_t> route;
  // set_attr / del_attr / gather: the module path; set_attr / del_attr: an optional local
  // parameter name, the attribute.
  std::string module;
  std::string param;
  std::string name;
  zero3::AttrValue value;
  // load: the size of a second world that must load the checkpoint too (resharding it from this
  // world's size); 0, the JSON key absent, for none.
  int world_size = 0;
  // save / load: the checkpoint's tag (zero3::tag_problem's rule); none: save's own default tag,
  // and load's last save of the target.
  std::optional<std::string> tag;
  // load: restore the optimizer's state too (false: its moments and step stay as they were), or
  // only the module's parameters (module_only: neither fp32 masters nor optimizer state).
  bool optimizer_states = true;
  bool module_only = false;
  // gather: the rank whose in-place edit (parameters *= scale) every rank gets on exit, or none
  // (JSON null): every rank edits its own copy and the edit is not kept.
  std::optional<int> modifier_rank;
  double scale = 1.0;
  // inject: the rank whose data it poisons, what it poisons (a row of schema::inject_targets():
  // "input", "loss", "gradient"), and `value`, a string of schema::non_finite_values(); `param`
  // (the parameter's path as the tree's named parameters spell it, parameter_paths) with
  // "gradient" only.
  int rank = 0;
  std::string into;
};

// Returns the float an `inject` puts in: NaN, +inf or -inf (its `value`).
// Requires: validate(op's scenario) passed.
float injected_value(const Op& op);

// The zerocheck-only top-level key "overflow_protection" (schema.h, ZEROCHECK_OVERFLOW_KEYS):
// overflow protection and the loss scale the engine is given (zero3::PrecisionOptions).
struct OverflowProtection {
#define ZEROCHECK_OVERFLOW_FIELD(name, is_integer, def, lo, hi, doc) double name = def;
  ZEROCHECK_OVERFLOW_KEYS(ZEROCHECK_OVERFLOW_FIELD)
#undef ZEROCHECK_OVERFLOW_FIELD
  bool dynamic() const { return loss_scale == 0; }
  friend bool operator==(const OverflowProtection& a, const OverflowProtection& b) {
    return a.loss_scale == b.loss_scale && a.initial_scale_power == b.initial_scale_power &&
           a.loss_scale_window == b.loss_scale_window && a.hysteresis == b.hysteresis &&
           a.min_loss_scale == b.min_loss_scale;
  }
};

struct Scenario {
  int world_size = 2;
  uint64_t seed = 1;
  int64_t features = 4;
  int64_t batch = 2;
  std::string optimizer = "adam";  // a row of schema::optimizers()
  double lr = 0.01;
  zero3::Config config;
  std::vector<NodeSpec> tree;      // tree[0] is the root
  zero3::PlacementSpec placement;
  std::vector<Op> ops;
  std::string construct = "eager";  // a row of schema::constructions()
  std::optional<OverflowProtection> overflow_protection;  // none: the engine checks nothing
};

// Returns the path of every distinct parameter of the tree as its named parameters spell them
// ("1.experts.0.linear.weight"; a shared module's under its first place in pre-order), from the
// node specs alone, in pre-order.
std::vector<std::string> parameter_paths(const Scenario& scenario);

// Returns the scenario in `text`. Throws ScenarioError naming the JSON path of the first problem
// (a key written twice anywhere in the document is one).
Scenario parse_scenario(std::string_view text);
// Returns the scenario in `json`: maps JSON to the types, then validate(). Throws ScenarioError
// naming the JSON path.
Scenario scenario_from_json(const nlohmann::json& json);
// Returns the JSON form; scenario_from_json(to_json(s)) == s for every valid s.
nlohmann::json to_json(const Scenario& scenario);

// Throws ScenarioError naming the JSON path of the first rule `scenario` breaks: every rule of
// the format (kinds, keys per kind and operation, limits, children, parameter names, attribute
// names and values, learning rate, placement ranks, train_batch_size, no offload). The reader calls it, so a
// scenario built in memory (drawn, decoded, shrunk) meets the same rules as a file.
void validate(const Scenario& scenario);

// Builds the tree: fresh modules, user attributes set (owner "user"), frozen parameters, and
// parameters initialised from the scenario's seed. Identical on every call.
std::shared_ptr<zero3::Module> build_tree(const Scenario& scenario);

// Returns the local parameter names a node of this kind has ("linear.weight" for an Expert).
inline std::vector<std::string> param_names(const NodeSpec& node) { return schema::parameter_names(node); }

// Returns the route as the engine takes it (cyclic, choices taken modulo each layer's size).
zero3::Route route_of(const Op& op);

// Returns the JSON form of an attribute value (tensors as {"tensor": [...], "shape": [...]}).
nlohmann::json attr_value_to_json(const zero3::AttrValue& value);

// Returns a compact, readable rendering: the tree with attributes, then the numbered ops.
std::string describe(const Scenario& scenario);

// Counts for summaries and shrink reports.
struct ScenarioShape {
  int64_t modules = 0;  // distinct modules in the tree
  int64_t ops = 0;
  bool tied = false;
  bool frozen = false;
  bool zero_size = false;
  bool experts = false;
};
ScenarioShape shape_of(const Scenario& scenario);

}  // namespace zerocheck
