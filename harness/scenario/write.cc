// The JSON writer: every key of a node kind or an operation comes from harness/scenario/schema.h.
#include "harness/scenario/scenario.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace zerocheck {
namespace {

using nlohmann::json;

json attr_list_to_json(const std::vector<AttrEntry>& entries) {
  json out = json::array();
  for (const auto& e : entries) out.push_back({{"name", e.name}, {"value", attr_value_to_json(e.value)}});
  return out;
}

bool takes(const schema::NodeKind& kind, const char* key) {
  return std::find(kind.keys.begin(), kind.keys.end(), key) != kind.keys.end();
}

json node_to_json(const NodeSpec& node) {
  json n = {{"kind", node.kind}};
  if (const schema::NodeKind* kind = schema::find_node_kind(node.kind)) {
    if (takes(*kind, "shape")) n["shape"] = node.shape;
    if (takes(*kind, "bias") && !node.bias) n["bias"] = false;
  }
  if (!node.children.empty()) n["children"] = node.children;
  if (!node.attrs.empty()) n["attrs"] = attr_list_to_json(node.attrs);
  if (!node.param_attrs.empty()) {
    json pa = json::object();
    for (const auto& [name, entries] : node.param_attrs) pa[name] = attr_list_to_json(entries);
    n["param_attrs"] = pa;
  }
  if (!node.frozen.empty()) n["frozen"] = node.frozen;
  return n;
}

json op_to_json(const Op& op) {
  json o = {{"op", to_string(op.kind)}};
  const schema::OpRow& row = row_of(op.kind);
  const unsigned keys = row.required | row.optional;
  if (keys & schema::key::optimizer) o["optimizer"] = op.optimizer;
  if (keys & schema::key::target) o["target"] = op.target;
  if (keys & schema::key::route) o["route"] = op.route;
  if (keys & schema::key::module) o["module"] = op.module;
  if (keys & schema::key::param) o["param"] = op.param;
  if (keys & schema::key::name) o["name"] = op.name;
  if (keys & schema::key::value) o["value"] = attr_value_to_json(op.value);
  // Absent means none (0 is outside the key's range), so only a set one is written.
  if ((keys & schema::key::world_size) && op.world_size != 0) o["world_size"] = op.world_size;
  // Absent means the default tag (save) or the last save (load): only a given one is written.
  if ((keys & schema::key::tag) && op.tag) o["tag"] = *op.tag;
  if (keys & schema::key::optimizer_states) o["optimizer_states"] = op.optimizer_states;
  if (keys & schema::key::module_only) o["module_only"] = op.module_only;
  if (keys & schema::key::modifier_rank) o["modifier_rank"] = op.modifier_rank ? json(*op.modifier_rank) : json(nullptr);
  if (keys & schema::key::scale) o["scale"] = op.scale;
  // A valid initialize has none: only a given one is written.
  if ((keys & schema::key::config_error) && op.config_error != schema::ConfigErrorKind::none)
    o["config_error"] = schema::to_string(op.config_error);
  if (keys & schema::key::rank) o["rank"] = op.rank;
  if (keys & schema::key::into) o["into"] = op.into;
  // Absent unless the parameter's gradient is the target (the key is forbidden otherwise).
  if (op.kind == OpKind::inject && op.param.empty()) o.erase("param");
  return o;
}

}  // namespace

json attr_value_to_json(const zero3::AttrValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) return nullptr;
        else if constexpr (std::is_same_v<T, at::Tensor>) {
          at::Tensor flat = v.detach().to(at::kFloat).contiguous().reshape({-1});
          std::vector<float> data(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
          return {{"tensor", data}, {"shape", v.sizes().vec()}};
        } else if constexpr (std::is_same_v<T, zero3::AttrValue::List>) {
          json out = json::array();
          for (const auto& item : v) out.push_back(attr_value_to_json(item));
          return out;
        } else return v;
      },
      value.storage());
}

json to_json(const Scenario& s) {
  json tree = json::array();
  for (const NodeSpec& node : s.tree) tree.push_back(node_to_json(node));
  json ops = json::array();
  for (const Op& op : s.ops) ops.push_back(op_to_json(op));
  json out = {{"format", kScenarioFormat},
          {"world_size", s.world_size},
          {"seed", s.seed},
          {"features", s.features},
          {"batch", s.batch},
          {"optimizer", {{"kind", s.optimizer}, {"lr", s.lr}}},
          {"config", s.config.to_json()},
          {"placement", zero3::placement_to_json(s.placement)},
          {"construct", s.construct},
          {"tree", tree},
          {"ops", ops}};
  // Written only when set: a scenario without it writes what it wrote before the key existed.
  if (const auto& protection = s.overflow_protection) {
    json keys = json::object();
#define ZEROCHECK_WRITE_OVERFLOW_KEY(name, is_integer, def, lo, hi, doc) \
  keys[#name] = is_integer ? json(static_cast<int64_t>(protection->name)) : json(protection->name);
    ZEROCHECK_OVERFLOW_KEYS(ZEROCHECK_WRITE_OVERFLOW_KEY)
#undef ZEROCHECK_WRITE_OVERFLOW_KEY
    out["overflow_protection"] = keys;
  }
  return out;
}

}  // namespace zerocheck
