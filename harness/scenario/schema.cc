#include "harness/scenario/schema.h"

#include "engine/layers.h"
#include "harness/scenario/scenario.h"

namespace zerocheck::schema {
namespace {

using Children_ = std::vector<std::shared_ptr<zero3::Module>>;
using ModulePtr = std::shared_ptr<zero3::Module>;

ModulePtr build_linear(const NodeSpec& node, int64_t f, const Children_&) {
  return std::make_shared<zero3::Linear>(f, f, node.bias);
}
ModulePtr build_layer_norm(const NodeSpec&, int64_t f, const Children_&) { return std::make_shared<zero3::LayerNorm>(f); }
ModulePtr build_tanh(const NodeSpec&, int64_t, const Children_&) { return std::make_shared<zero3::Tanh>(); }
ModulePtr build_offset(const NodeSpec& node, int64_t, const Children_&) {
  return std::make_shared<zero3::Offset>(node.shape);
}
ModulePtr build_expert(const NodeSpec&, int64_t f, const Children_&) { return std::make_shared<zero3::Expert>(f, f); }
template <class Container>
ModulePtr build_in_order(const NodeSpec&, int64_t, const Children_& children) {
  auto out = std::make_shared<Container>();
  for (const auto& child : children) out->push_back(child);
  return out;
}
ModulePtr build_moe(const NodeSpec&, int64_t, const Children_& children) { return std::make_shared<zero3::MoE>(children); }

}  // namespace

const std::vector<Limit>& all_limits() {
  static const std::vector<Limit> all = {
#define ZEROCHECK_LIMIT_ROW(name, lo, hi, doc) limits::name,
      ZEROCHECK_LIMITS(ZEROCHECK_LIMIT_ROW)
#undef ZEROCHECK_LIMIT_ROW
  };
  return all;
}

const std::vector<OpRow>& op_rows() {
  static const std::vector<OpRow> all = {
#define ZEROCHECK_OP_ROW(op, required, optional, weight, attributes_weight, doc) \
  {#op, required, optional, weight, attributes_weight, doc},
      ZEROCHECK_OPS(ZEROCHECK_OP_ROW)
#undef ZEROCHECK_OP_ROW
  };
  return all;
}

// The names of a table's rows, in its order (what messages list as "expected one of").
template <class Rows, class Name>
std::vector<std::string> names_of(const Rows& rows, Name name) {
  std::vector<std::string> out;
  for (const auto& row : rows) out.push_back(name(row));
  return out;
}

const std::vector<std::string>& op_names() {
  static const auto all = names_of(op_rows(), [](const OpRow& row) { return row.name; });
  return all;
}

std::vector<std::string> op_key_names(unsigned mask) {
  std::vector<std::string> out;
#define ZEROCHECK_OP_KEY_NAME(k) \
  if (mask & key::k) out.push_back(#k);
  ZEROCHECK_OP_KEYS(ZEROCHECK_OP_KEY_NAME)
#undef ZEROCHECK_OP_KEY_NAME
  return out;
}

const std::vector<ConfigErrorRow>& config_errors() {
  static const std::vector<ConfigErrorRow> all = {
#define ZEROCHECK_CONFIG_ERROR_ROW(name, doc) {#name, ConfigErrorKind::name, doc},
      ZEROCHECK_CONFIG_ERRORS(ZEROCHECK_CONFIG_ERROR_ROW)
#undef ZEROCHECK_CONFIG_ERROR_ROW
  };
  return all;
}

const std::vector<std::string>& config_error_names() {
  static const auto all = names_of(config_errors(), [](const ConfigErrorRow& row) { return row.name; });
  return all;
}

const char* to_string(ConfigErrorKind kind) {
  for (const auto& row : config_errors())
    if (row.kind == kind) return row.name;
  return "";
}

const std::vector<OverflowKeyRow>& overflow_keys() {
  static const std::vector<OverflowKeyRow> all = {
#define ZEROCHECK_OVERFLOW_KEY_ROW(name, is_integer, def, lo, hi, doc) {#name, is_integer, def, lo, hi, doc},
      ZEROCHECK_OVERFLOW_KEYS(ZEROCHECK_OVERFLOW_KEY_ROW)
#undef ZEROCHECK_OVERFLOW_KEY_ROW
  };
  return all;
}

std::vector<std::string> overflow_key_names() {
  return names_of(overflow_keys(), [](const OverflowKeyRow& row) { return row.name; });
}

const std::vector<OptimizerRow>& optimizers() {
  // SGD with momentum, so SGD's checkpoints carry optimizer state as Adam's do.
  static const std::vector<OptimizerRow> all = {{"adam", 0.0, 3}, {"sgd", 0.9, 1}};
  return all;
}

const OptimizerRow* find_optimizer(std::string_view kind) {
  for (const auto& row : optimizers())
    if (kind == row.kind) return &row;
  return nullptr;
}

const std::vector<std::string>& optimizer_kinds() {
  static const auto all = names_of(optimizers(), [](const OptimizerRow& row) { return row.kind; });
  return all;
}

const char* to_string(Children rule) {
  switch (rule) {
    case Children::none: return "none";
    case Children::any: return "any";
    case Children::at_least_one: return "at_least_one";
  }
  return "?";
}

const std::vector<std::string>& common_node_keys() {
  static const std::vector<std::string> keys = {"children", "attrs", "param_attrs", "frozen"};
  return keys;
}

const std::vector<NodeKind>& node_kinds() {
  // Draw weights: a leaf of an ordinary container, an MoE's child (mostly Experts), a container.
  static const std::vector<NodeKind> all = {
      {"Linear", Children::none, {"bias"}, {{"weight", false}, {"bias", true}}, 4, 1, 0, build_linear},
      {"LayerNorm", Children::none, {}, {{"weight", false}, {"bias", false}}, 2, 0, 0, build_layer_norm},
      {"Tanh", Children::none, {}, {}, 1, 1, 0, build_tanh},
      {"Offset", Children::none, {"shape"}, {{"value", false}}, 3, 1, 0, build_offset},
      // An Expert's parameters are its child Linear's, named as named_parameters() names them.
      {"Expert", Children::none, {}, {{"linear.weight", false}, {"linear.bias", false}}, 3, 3, 0, build_expert},
      {"Sequential", Children::any, {}, {}, 0, 0, 3, build_in_order<zero3::Sequential>},
      {"ModuleList", Children::any, {}, {}, 0, 0, 1, build_in_order<zero3::ModuleList>},
      {"MoE", Children::at_least_one, {}, {}, 0, 0, 2, build_moe},
  };
  return all;
}

const NodeKind* find_node_kind(std::string_view name) {
  for (const auto& row : node_kinds())
    if (name == row.name) return &row;
  return nullptr;
}

const std::vector<std::string>& node_kind_names() {
  static const auto all = names_of(node_kinds(), [](const NodeKind& row) { return row.name; });
  return all;
}

std::vector<std::string> parameter_names(const NodeSpec& node) {
  std::vector<std::string> out;
  if (const NodeKind* kind = find_node_kind(node.kind))
    for (const auto& slot : kind->parameters)
      if (!slot.only_with_bias || node.bias) out.push_back(slot.name);
  return out;
}

const std::vector<std::string>& required_top_keys() {
  static const std::vector<std::string> keys = {"format", "world_size", "seed", "features", "batch",
                                                "optimizer", "config", "tree", "ops"};
  return keys;
}

const std::vector<std::string>& optional_top_keys() {
  static const std::vector<std::string> keys = {"placement", "construct", "overflow_protection"};
  return keys;
}

}  // namespace zerocheck::schema
