// validate(): every rule of the scenario format, on a Scenario in memory.
#include "harness/scenario/internal/rules.h"

#include "engine/json_reader.h"
#include "engine/precision.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include <cmath>
#include <limits>

namespace zerocheck {
namespace rules {

void throw_scenario_error(const std::string& message) { throw ScenarioError(message); }

void fail(const std::string& path, const std::string& what) { throw_scenario_error(path + ": " + what); }

void within(const std::string& path, int64_t value, const schema::Limit& limit) {
  zero3::check_range(path, value, limit.lo, limit.hi, throw_scenario_error);
}

void count_within(const std::string& path, size_t count, const schema::Limit& limit) {
  zero3::check_count(path, count, limit.lo, limit.hi, throw_scenario_error);
}

void one_of(const std::string& path, const std::string& value, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (c == value) return;
  fail(path, "unknown value " + zero3::json_quoted(value) + " (expected one of: " + zero3::join_names(choices) + ")");
}

void unknown_key(const std::string& path, const std::vector<std::string>& allowed) {
  fail(path, "unknown key (expected one of: " + zero3::join_names(allowed) + ")");
}

void attribute_name(const std::string& path, const std::string& name) {
  if (auto problem = zero3::AttrDict::name_problem(name); !problem.empty()) fail(path, problem);
}

void value_depth(const std::string& path, int depth) {
  if (depth > schema::limits::value_depth.hi)
    fail(path, "attribute value nested deeper than " + std::to_string(schema::limits::value_depth.hi) + " lists");
}

void shape(const std::string& path, const std::vector<int64_t>& dims, const schema::Limit& dims_limit,
           const schema::Limit& numel_limit) {
  count_within(path, dims.size(), dims_limit);
  int64_t numel = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    within(zero3::index_path(path, i), dims[i], numel_limit);
    numel = std::min(numel * dims[i], numel_limit.hi + 1);  // saturate: dims are <= hi, no overflow
  }
  if (numel > numel_limit.hi) fail(path, "has more than " + std::to_string(numel_limit.hi) + " elements");
}

void tensor_numbers(const std::string& path, size_t numbers, int64_t numel) {
  if (static_cast<int64_t>(numbers) != numel)
    fail(path, "holds " + std::to_string(numbers) + " numbers, the shape needs " + std::to_string(numel));
}

void float32_fits(const std::string& path, double value) {
  // Tensors are float32: a value that would become inf could not be written back.
  if (!(std::abs(value) <= static_cast<double>(std::numeric_limits<float>::max())))
    fail(path, "does not fit a float32 tensor");
}

void learning_rate(const std::string& path, double lr) {
  if (!(lr > schema::kLearningRateAbove && lr < schema::kLearningRateBelow))
    fail(path, "expected a learning rate in (" + fmt::format("{:g}", schema::kLearningRateAbove) + ", " +
                   fmt::format("{:g}", schema::kLearningRateBelow) + ")");
}

void tag(const std::string& path, const std::string& tag) {
  if (auto problem = zero3::tag_problem(tag); !problem.empty()) fail(path, problem);
}

void scale(const std::string& path, double scale) {
  if (!(scale >= schema::kScaleMin && scale <= schema::kScaleMax))
    fail(path, "expected a scale in [" + fmt::format("{:g}", schema::kScaleMin) + ", " +
                   fmt::format("{:g}", schema::kScaleMax) + "]");
}

void child_index(const std::string& path, int64_t child, size_t index, size_t nodes) {
  // Children after their parent: the tree cannot loop, by construction.
  if (child <= static_cast<int64_t>(index) || child >= static_cast<int64_t>(nodes))
    fail(path, "child index " + std::to_string(child) + " must be greater than " + std::to_string(index) +
                   " and less than " + std::to_string(nodes));
}

void children_count(const std::string& path, const schema::NodeKind& kind, size_t children) {
  if (kind.children == schema::Children::none && children > 0)
    fail(path, std::string("a node of kind ") + kind.name + " takes no children");
  if (kind.children == schema::Children::at_least_one && children == 0)
    fail(path, std::string("a node of kind ") + kind.name + " needs at least one child");
}

void parameter_name(const std::string& path, const NodeSpec& node, const std::string& name) {
  const auto names = schema::parameter_names(node);
  if (std::find(names.begin(), names.end(), name) == names.end())
    fail(path, "a node of kind " + node.kind + " has no parameter " + zero3::json_quoted(name) + " (parameters: " +
                   zero3::join_names(names) + ")");
}

void placement(const std::string& path, const zero3::PlacementSpec& spec, int world_size) {
  if (spec.kind == zero3::PlacementSpec::Kind::attr_mod) attribute_name(zero3::key_path(path, "attr"), spec.attr);
  if (spec.kind != zero3::PlacementSpec::Kind::map && !spec.owners.empty())
    unknown_key(zero3::key_path(path, "owners"), {"kind", zero3::placement_key(spec.kind)});
  const std::string owners = zero3::key_path(path, "owners");
  for (const auto& [module, rank] : spec.owners)
    zero3::check_range(zero3::key_path(owners, module), rank, 0, world_size - 1, throw_scenario_error);
}

void config_every_engine_takes(const std::string& config_path, const zero3::Config& config, int world_size) {
  // A scenario's config is one every engine takes: an offload our engine refuses is a
  // config_error of an initialize, not the scenario's setting.
  if (config.zero_optimization.offload_optimizer_device != "none")
    throw_scenario_error(config_path + ".zero_optimization.offload_optimizer.device: \"" +
                         config.zero_optimization.offload_optimizer_device +
                         "\": a scenario's config must be valid on every engine; give an initialize "
                         "\"config_error\": \"offload_optimizer\" instead");
  try {
    config.check_world_size(world_size, config_path);
  } catch (const zero3::ConfigError& e) {
    throw_scenario_error(e.what());
  }
  if (const std::string refusal = zero3::precision_refusal(zero3::precision_in_effect({}, config.precision));
      !refusal.empty())
    throw_scenario_error(config_path + ": " + refusal + "; a scenario's config must be valid on every engine");
}

void attr_value(const std::string& path, const zero3::AttrValue& value, int depth) {
  value_depth(path, depth);
  if (const auto* list = std::get_if<zero3::AttrValue::List>(&value.storage())) {
    count_within(path, list->size(), schema::limits::value_list_items);
    for (size_t i = 0; i < list->size(); ++i) attr_value(zero3::index_path(path, i), (*list)[i], depth + 1);
  } else if (const auto* tensor = std::get_if<at::Tensor>(&value.storage())) {
    shape(zero3::key_path(path, "shape"), tensor->sizes().vec(), schema::limits::tensor_dims,
          schema::limits::tensor_numel);
    const at::Tensor flat = tensor->detach().to(at::kDouble).contiguous().reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i)
      float32_fits(zero3::index_path(zero3::key_path(path, "tensor"), static_cast<size_t>(i)),
                   flat.data_ptr<double>()[i]);
  } else if (const auto* number = std::get_if<double>(&value.storage())) {
    if (!std::isfinite(*number)) fail(path, "expected a finite number");
  }
}

void attr_list(const std::string& path, const std::vector<AttrEntry>& entries) {
  count_within(path, entries.size(), schema::limits::attr_entries);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = zero3::index_path(path, i);
    attribute_name(zero3::key_path(at, "name"), entries[i].name);
    attr_value(zero3::key_path(at, "value"), entries[i].value);
  }
}

}  // namespace rules

namespace {

void validate_node(const Scenario& s, size_t index) {
  const NodeSpec& node = s.tree[index];
  const std::string path = zero3::index_path("$.tree", index);
  rules::one_of(zero3::key_path(path, "kind"), node.kind, schema::node_kind_names());
  const schema::NodeKind& kind = *schema::find_node_kind(node.kind);
  auto takes = [&](const char* key) { return std::count(kind.keys.begin(), kind.keys.end(), key) > 0; };
  auto unknown = [&](const char* key) {  // the key list only for the message
    std::vector<std::string> keys = {"kind"};
    keys.insert(keys.end(), schema::common_node_keys().begin(), schema::common_node_keys().end());
    keys.insert(keys.end(), kind.keys.begin(), kind.keys.end());
    rules::unknown_key(zero3::key_path(path, key), keys);
  };
  // A field the kind lacks must keep its default, or the writer would drop it silently.
  if (!node.bias && !takes("bias")) unknown("bias");
  if (!node.shape.empty() && !takes("shape")) unknown("shape");
  if (takes("shape"))
    rules::shape(zero3::key_path(path, "shape"), node.shape, schema::limits::offset_dims, schema::limits::param_numel);
  const std::string children = zero3::key_path(path, "children");
  // A node may list a child twice (tied), but never more entries than a tree has nodes.
  zero3::check_count(children, node.children.size(), 0, schema::limits::nodes.hi, rules::throw_scenario_error);
  rules::children_count(children, kind, node.children.size());
  for (size_t c = 0; c < node.children.size(); ++c)
    rules::child_index(zero3::index_path(children, c), node.children[c], index, s.tree.size());
  rules::attr_list(zero3::key_path(path, "attrs"), node.attrs);
  const std::string param_attrs = zero3::key_path(path, "param_attrs");
  for (const auto& [name, entries] : node.param_attrs) {
    rules::parameter_name(zero3::key_path(param_attrs, name), node, name);
    rules::attr_list(zero3::key_path(param_attrs, name), entries);
  }
  const std::string frozen = zero3::key_path(path, "frozen");
  rules::count_within(frozen, node.frozen.size(), schema::limits::frozen);
  for (size_t f = 0; f < node.frozen.size(); ++f)
    rules::parameter_name(zero3::index_path(frozen, f), node, node.frozen[f]);
}

// An inject's rank is one of this world's; its value a non-finite name; its param given exactly
// when it poisons a gradient, and then a parameter of the tree.
void validate_inject(const Op& op, const std::string& path, const Scenario& s) {
  zero3::check_range(zero3::key_path(path, "rank"), op.rank, 0, s.world_size - 1, rules::throw_scenario_error);
  rules::one_of(zero3::key_path(path, "into"), op.into, schema::inject_targets());
  const auto* value = std::get_if<std::string>(&op.value.storage());
  if (value == nullptr)
    rules::fail(zero3::key_path(path, "value"),
                "expected a string, one of: " + zero3::join_names(schema::non_finite_values()));
  rules::one_of(zero3::key_path(path, "value"), *value, schema::non_finite_values());
  const std::string param = zero3::key_path(path, "param");
  if (op.into != "gradient") {
    if (!op.param.empty()) rules::fail(param, "only an inject into \"gradient\" names a parameter");
    return;
  }
  if (op.param.empty()) rules::fail(param, "missing required key (an inject into \"gradient\" names a parameter)");
  const std::vector<std::string> paths = parameter_paths(s);
  if (std::find(paths.begin(), paths.end(), op.param) == paths.end())
    rules::fail(param, "the tree has no parameter " + zero3::json_quoted(op.param) + " (parameters: " +
                           zero3::join_names(paths) + ")");
}

void validate_overflow_protection(const OverflowProtection& protection) {
#define ZEROCHECK_CHECK_OVERFLOW_KEY(name, is_integer, def, lo, hi, doc)                                         \
  if (!(protection.name >= (lo) && protection.name <= (hi)) || (is_integer && protection.name != std::floor(protection.name))) \
    rules::fail("$.overflow_protection." #name, fmt::format("expected {} in [{:g}, {:g}], got {:g}",                   \
                                                              is_integer ? "an integer" : "a number", double(lo),     \
                                                              double(hi), protection.name));
  ZEROCHECK_OVERFLOW_KEYS(ZEROCHECK_CHECK_OVERFLOW_KEY)
#undef ZEROCHECK_CHECK_OVERFLOW_KEY
}

void validate_op(const Op& op, size_t index, const Scenario& s) {
  const int world_size = s.world_size;
  const std::string path = zero3::index_path("$.ops", index);
  const schema::OpRow& row = row_of(op.kind);
  const unsigned allowed = row.required | row.optional;
  const Op defaults;
  auto field = [&](unsigned key, const char* name, bool is_default) {
    if ((allowed & key) || is_default) return;
    std::vector<std::string> keys = {"op"};  // only for the message: validate runs before every scenario
    for (const auto& k : schema::op_key_names(row.required)) keys.push_back(k);
    for (const auto& k : schema::op_key_names(row.optional)) keys.push_back(k);
    rules::unknown_key(zero3::key_path(path, name), keys);
  };
  field(schema::key::optimizer, "optimizer", op.optimizer == defaults.optimizer);
  field(schema::key::target, "target", op.target.empty());
  field(schema::key::route, "route", op.route.empty());
  field(schema::key::module, "module", op.module.empty());
  field(schema::key::param, "param", op.param.empty());
  field(schema::key::name, "name", op.name.empty());
  field(schema::key::value, "value", op.value.is_none());
  field(schema::key::world_size, "world_size", op.world_size == 0);
  field(schema::key::tag, "tag", !op.tag.has_value());
  field(schema::key::optimizer_states, "optimizer_states", op.optimizer_states == defaults.optimizer_states);
  field(schema::key::module_only, "module_only", op.module_only == defaults.module_only);
  field(schema::key::modifier_rank, "modifier_rank", !op.modifier_rank.has_value());
  field(schema::key::scale, "scale", op.scale == defaults.scale);
  field(schema::key::config_error, "config_error", op.config_error == defaults.config_error);
  field(schema::key::rank, "rank", op.rank == defaults.rank);
  field(schema::key::into, "into", op.into.empty());
  if (allowed & schema::key::optimizer)
    rules::one_of(zero3::key_path(path, "optimizer"), op.optimizer, schema::initialize_optimizers());
  const std::string route = zero3::key_path(path, "route");
  rules::count_within(route, op.route.size(), schema::limits::route_length);
  for (size_t i = 0; i < op.route.size(); ++i)
    rules::within(zero3::index_path(route, i), op.route[i], schema::limits::route_choice);
  if (row.required & schema::key::name) rules::attribute_name(zero3::key_path(path, "name"), op.name);
  if (op.kind == OpKind::inject) validate_inject(op, path, s);
  else if (allowed & schema::key::value) rules::attr_value(zero3::key_path(path, "value"), op.value);
  // 0 is "no second world" (the key absent); any other value is a world size.
  if (op.world_size != 0) rules::within(zero3::key_path(path, "world_size"), op.world_size, schema::limits::world_size);
  if (op.tag) rules::tag(zero3::key_path(path, "tag"), *op.tag);
  // A modifier rank is one of this world's ranks (null, none, is every rank).
  if (op.modifier_rank)
    zero3::check_range(zero3::key_path(path, "modifier_rank"), *op.modifier_rank, 0, world_size - 1,
                       rules::throw_scenario_error);
  if (allowed & schema::key::scale) rules::scale(zero3::key_path(path, "scale"), op.scale);
}

}  // namespace

void validate(const Scenario& s) {
  rules::within("$.world_size", s.world_size, schema::limits::world_size);
  if (s.seed > static_cast<uint64_t>(schema::limits::seed.hi))
    rules::fail("$.seed", "value " + std::to_string(s.seed) + " is out of range [0, " +
                              std::to_string(schema::limits::seed.hi) + "]");
  rules::within("$.features", s.features, schema::limits::features);
  rules::within("$.batch", s.batch, schema::limits::batch);
  rules::one_of("$.optimizer.kind", s.optimizer, schema::optimizer_kinds());
  rules::learning_rate("$.optimizer.lr", s.lr);
  if (s.config.placement.kind != zero3::PlacementSpec::Kind::none)
    rules::fail("$.config.zerocheck.placement", "a scenario's policy belongs in Scenario::placement");
  rules::config_every_engine_takes("$.config", s.config, s.world_size);
  rules::placement("$.placement", s.placement, s.world_size);
  if (s.placement.kind != zero3::PlacementSpec::Kind::none && s.config.precision.bf16_enabled.value_or(false))
    rules::fail("$.config.bf16.enabled", "true with a placement policy: the engine's placed modules are fp32 only");
  if (s.config.precision.fp16_enabled.value_or(false)) {
    if (s.placement.kind != zero3::PlacementSpec::Kind::none)
      rules::fail("$.config.fp16.enabled", "true with a placement policy: the engine's placed modules are fp32 only");
    // fp16 has its own scaler and overflow check (the config's fp16 section): one place.
    if (s.overflow_protection)
      rules::fail("$.overflow_protection", "present with fp16.enabled true: fp16's scaler comes from the config's "
                                           "fp16 section; leave one out");
  }
  rules::count_within("$.tree", s.tree.size(), schema::limits::nodes);
  for (size_t i = 0; i < s.tree.size(); ++i) validate_node(s, i);
  rules::count_within("$.ops", s.ops.size(), schema::limits::ops);
  rules::one_of("$.construct", s.construct, schema::constructions());
  if (s.overflow_protection) validate_overflow_protection(*s.overflow_protection);
  for (size_t i = 0; i < s.ops.size(); ++i) validate_op(s.ops[i], i, s);
}

}  // namespace zerocheck
