// The JSON reader: maps a document to the Scenario types, then validate(). It applies a rule of
// harness/scenario/internal/rules.h itself only where it could not build the types otherwise.
#include "engine/json_reader.h"
#include "harness/scenario/internal/rules.h"

#include <ATen/ATen.h>

#include <iterator>

namespace zerocheck {
namespace {

using zero3::JsonAt;

std::vector<std::string> names(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::string attribute_name(const JsonAt& at) {
  const std::string name = at.string();
  rules::attribute_name(at.path(), name);
  return name;
}

zero3::AttrValue attr_value(const JsonAt& at, int depth = 0) {
  rules::value_depth(at.path(), depth);  // before recursing, so a deep document cannot exhaust the stack
  const nlohmann::json& v = at.value();
  if (v.is_null()) return zero3::AttrValue();
  if (v.is_boolean()) return zero3::AttrValue(v.get<bool>());
  if (v.is_number_integer()) return zero3::AttrValue(at.integer(INT64_MIN, INT64_MAX));
  if (v.is_number_float()) return zero3::AttrValue(v.get<double>());
  if (v.is_string()) return zero3::AttrValue(v.get<std::string>());
  if (v.is_array()) {
    zero3::AttrValue::List list;
    const size_t n = at.array(schema::limits::value_list_items.lo, schema::limits::value_list_items.hi);
    for (size_t i = 0; i < n; ++i) list.push_back(attr_value(at[i], depth + 1));
    return zero3::AttrValue(std::move(list));
  }
  at.object({"tensor", "shape"});
  // The shape and the count are checked before the tensor is built from them.
  const JsonAt shape_at = at["shape"];
  std::vector<int64_t> shape;
  for (size_t i = 0; i < shape_at.array(0, schema::limits::tensor_dims.hi); ++i)
    shape.push_back(shape_at[i].integer(INT64_MIN, INT64_MAX));
  rules::shape(shape_at.path(), shape, schema::limits::tensor_dims, schema::limits::tensor_numel);
  const JsonAt data = at["tensor"];
  const size_t n = data.array(schema::limits::tensor_numel.lo, schema::limits::tensor_numel.hi);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  rules::tensor_numbers(data.path(), n, numel);
  std::vector<float> values;
  for (size_t i = 0; i < n; ++i) {
    const double number = data[i].number();
    rules::float32_fits(data[i].path(), number);
    values.push_back(static_cast<float>(number));
  }
  return zero3::AttrValue(at::tensor(values).reshape(shape));
}

std::vector<AttrEntry> attr_list(const JsonAt& at) {
  std::vector<AttrEntry> out;
  for (size_t i = 0; i < at.array(schema::limits::attr_entries.lo, schema::limits::attr_entries.hi); ++i) {
    const JsonAt item = at[i];
    item.object({"name", "value"});
    out.push_back({attribute_name(item["name"]), attr_value(item["value"])});
  }
  return out;
}

NodeSpec read_node(const JsonAt& at, size_t index, size_t nodes) {
  at.map();  // the kind comes first: it says which other keys the node may have
  NodeSpec node;
  node.kind = at["kind"].one_of(schema::node_kind_names());
  const schema::NodeKind& kind = *schema::find_node_kind(node.kind);
  at.object({"kind"}, names(schema::common_node_keys(), kind.keys));
  if (at.has("bias")) node.bias = at["bias"].boolean();
  if (at.has("shape")) {
    const JsonAt shape = at["shape"];
    for (size_t i = 0; i < shape.array(0, schema::limits::offset_dims.hi); ++i)
      node.shape.push_back(shape[i].integer(INT64_MIN, INT64_MAX));
  }
  if (at.has("children")) {
    const JsonAt children = at["children"];
    for (size_t i = 0; i < children.array(0, schema::limits::nodes.hi); ++i) {
      const int64_t child = children[i].integer(INT64_MIN, INT64_MAX);
      rules::child_index(children[i].path(), child, index, nodes);  // before narrowing to int
      node.children.push_back(static_cast<int>(child));
    }
  }
  if (at.has("attrs")) node.attrs = attr_list(at["attrs"]);
  if (at.has("param_attrs"))
    for (const auto& [name, entries] : at["param_attrs"].members()) {
      rules::parameter_name(entries.path(), node, name);
      node.param_attrs[name] = attr_list(entries);
    }
  if (at.has("frozen")) {
    const JsonAt frozen = at["frozen"];
    for (size_t i = 0; i < frozen.array(schema::limits::frozen.lo, schema::limits::frozen.hi); ++i)
      node.frozen.push_back(frozen[i].string());
  }
  return node;
}

Op read_op(const JsonAt& at) {
  at.map();  // the operation comes first: it says which other keys it may have
  const std::string name = at["op"].one_of(schema::op_names());
  Op op;
  for (size_t i = 0; i < schema::op_rows().size(); ++i)
    if (name == schema::op_rows()[i].name) op.kind = static_cast<OpKind>(i);
  const schema::OpRow& row = row_of(op.kind);
  at.object(names({"op"}, schema::op_key_names(row.required)), schema::op_key_names(row.optional));
  if (at.has("optimizer")) op.optimizer = at["optimizer"].one_of(schema::initialize_optimizers());
  if (at.has("target")) op.target = at["target"].string();
  if (at.has("route")) {
    const JsonAt route = at["route"];
    for (size_t i = 0; i < route.array(schema::limits::route_length.lo, schema::limits::route_length.hi); ++i)
      op.route.push_back(route[i].integer(schema::limits::route_choice.lo, schema::limits::route_choice.hi));
  }
  if (at.has("module")) op.module = at["module"].string();
  if (at.has("param")) op.param = at["param"].string();
  if (at.has("name")) op.name = attribute_name(at["name"]);
  if (at.has("value")) op.value = attr_value(at["value"]);
  if (at.has("world_size"))
    op.world_size = static_cast<int>(at["world_size"].integer(schema::limits::world_size.lo, schema::limits::world_size.hi));
  if (at.has("tag")) {
    op.tag = at["tag"].string();
    rules::tag(at["tag"].path(), *op.tag);
  }
  if (at.has("optimizer_states")) op.optimizer_states = at["optimizer_states"].boolean();
  if (at.has("module_only")) op.module_only = at["module_only"].boolean();
  // A rank or null; its upper bound is the world's (validate), the widest world's here.
  if (at.has("modifier_rank") && !at["modifier_rank"].value().is_null())
    op.modifier_rank =
        static_cast<int>(at["modifier_rank"].integer(schema::limits::world_size.lo - 1, schema::limits::world_size.hi - 1));
  if (at.has("scale")) {
    op.scale = at["scale"].number();
    rules::scale(at["scale"].path(), op.scale);
  }
  // A rank of the widest world here; of this world in validate, as modifier_rank.
  if (at.has("rank"))
    op.rank = static_cast<int>(at["rank"].integer(schema::limits::world_size.lo - 1, schema::limits::world_size.hi - 1));
  if (at.has("into")) op.into = at["into"].one_of(schema::inject_targets());
  if (at.has("config_error")) {
    const std::string name = at["config_error"].one_of(schema::config_error_names());
    for (const auto& row : schema::config_errors())
      if (name == row.name) op.config_error = row.kind;
  }
  return op;
}

int64_t bounded(const JsonAt& at, const schema::Limit& limit) { return at.integer(limit.lo, limit.hi); }

OverflowProtection read_overflow_protection(const JsonAt& at) {
  at.object({}, schema::overflow_key_names());
  OverflowProtection out;
  // Each key's range is validate()'s; an integer key must be written as one.
#define ZEROCHECK_READ_OVERFLOW_KEY(name, is_integer, def, lo, hi, doc)                          \
  if (at.has(#name))                                                                            \
    out.name = is_integer ? static_cast<double>(at[#name].integer(static_cast<int64_t>(lo), static_cast<int64_t>(hi))) \
                          : at[#name].number();
  ZEROCHECK_OVERFLOW_KEYS(ZEROCHECK_READ_OVERFLOW_KEY)
#undef ZEROCHECK_READ_OVERFLOW_KEY
  return out;
}

}  // namespace

Scenario parse_scenario(std::string_view text) {
  return scenario_from_json(zero3::parse_json_strict(text, rules::throw_scenario_error));
}

Scenario scenario_from_json(const nlohmann::json& root) {
  const JsonAt at(root, "$", rules::throw_scenario_error);
  at.object(schema::required_top_keys(), schema::optional_top_keys());
  at["format"].one_of(std::vector<std::string>(std::begin(schema::kReadFormats), std::end(schema::kReadFormats)));
  Scenario s;
  s.world_size = static_cast<int>(bounded(at["world_size"], schema::limits::world_size));
  s.seed = static_cast<uint64_t>(bounded(at["seed"], schema::limits::seed));
  s.features = bounded(at["features"], schema::limits::features);
  s.batch = bounded(at["batch"], schema::limits::batch);
  const JsonAt optimizer = at["optimizer"];
  optimizer.object({"kind", "lr"});
  s.optimizer = optimizer["kind"].one_of(schema::optimizer_kinds());
  s.lr = optimizer["lr"].number();
  s.config = zero3::Config::read(at["config"]);
  if (at.has("overflow_protection")) s.overflow_protection = read_overflow_protection(at["overflow_protection"]);
  if (at.has("construct")) s.construct = at["construct"].one_of(schema::constructions());
  // The config's "zerocheck.placement" section is the same setting as "placement": a scenario
  // gives its policy once, and from here on it lives in Scenario::placement only.
  if (s.config.placement.kind != zero3::PlacementSpec::Kind::none)
    rules::placement("$.config.zerocheck.placement", s.config.placement, s.world_size);
  if (at.has("placement")) s.placement = zero3::read_placement(at["placement"]);
  if (s.config.placement.kind != zero3::PlacementSpec::Kind::none) {
    if (s.placement.kind != zero3::PlacementSpec::Kind::none)
      rules::fail("$.placement", "a policy is also given in $.config.zerocheck.placement; give it once");
    s.placement = std::exchange(s.config.placement, zero3::PlacementSpec{});
  }
  const JsonAt tree = at["tree"];
  const size_t nodes = tree.array(schema::limits::nodes.lo, schema::limits::nodes.hi);
  for (size_t i = 0; i < nodes; ++i) s.tree.push_back(read_node(tree[i], i, nodes));
  const JsonAt ops = at["ops"];
  for (size_t i = 0; i < ops.array(schema::limits::ops.lo, schema::limits::ops.hi); ++i) s.ops.push_back(read_op(ops[i]));
  validate(s);
  return s;
}

}  // namespace zerocheck
