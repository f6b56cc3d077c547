// schema::to_json(): the tables as the Python replay reads them (zerocheck_ds/scenario/schema.py).
#include "harness/scenario/schema.h"

#include "engine/checkpoint_tag.h"
#include "engine/config.h"
#include "engine/errors.h"
#include "engine/placement.h"
#include "harness/scenario/invariants.h"

#include <nlohmann/json.hpp>

namespace zerocheck::schema {
namespace {

using nlohmann::json;

json config_key(const char* name, int64_t def, int64_t lo, int64_t hi, const char* doc) {
  return {{"name", name}, {"default", def}, {"min", lo}, {"max", hi}, {"doc", doc}};
}

json config_keys() {
  using zero3::kConfigIntMax;
  json top = json::array(), zero = json::array();
#define ZEROCHECK_TOP_ROW(name, def, lo, hi, doc) top.push_back(config_key(#name, def, lo, hi, doc));
#define ZEROCHECK_ZERO_ROW(name, def, lo, hi, doc) zero.push_back(config_key(#name, def, lo, hi, doc));
  ZERO3_TOP_LEVEL_INT_KEYS(ZEROCHECK_TOP_ROW)
  ZERO3_ZERO_INT_KEYS(ZEROCHECK_ZERO_ROW)
#undef ZEROCHECK_TOP_ROW
#undef ZEROCHECK_ZERO_ROW
  json flags = json::array();
#define ZEROCHECK_FLAG_ROW(name, def, doc) flags.push_back({{"name", #name}, {"default", def}, {"doc", doc}});
  ZERO3_ZERO_BOOL_KEYS(ZEROCHECK_FLAG_ROW)
#undef ZEROCHECK_FLAG_ROW
  // DeepSpeed's precision keys: the defaults per DeepSpeed version replayed, parsed from the
  // table's JSON text (null: DeepSpeed derives the value or ignores the key).
  json precision = json::array();
  const auto kind_name = [](std::string_view kind) {
    return kind == "Bool" ? "bool" : kind == "Int" ? "int" : kind == "Number" ? "number" : "dtype";
  };
#define ZEROCHECK_PRECISION_ROW(member, section, key, kind, lo, hi, v0145, master, doc)            \
  precision.push_back({{"section", section}, {"name", key}, {"type", kind_name(#kind)},            \
                       {"min", kind_name(#kind) == std::string_view("int") ? json(static_cast<int64_t>(lo)) : json(lo)}, \
                       {"max", kind_name(#kind) == std::string_view("int") ? json(static_cast<int64_t>(hi)) : json(hi)}, \
                       {"defaults", {{"v0.14.5", json::parse(v0145)}, {"master", json::parse(master)}}}, \
                       {"doc", doc}});
  ZERO3_PRECISION_KEYS(ZEROCHECK_PRECISION_ROW)
#undef ZEROCHECK_PRECISION_ROW
  return {{"top", top},
          {"precision", precision},
          {"precision_dtypes", zero3::precision_dtypes()},
          {"precision_sections", zero3::precision_sections()},
          {"zero_optimization", zero},
          {"zero_optimization_flags", flags},
          {"offload_optimizer_devices", zero3::offload_devices()},
          {"sections", zero3::Config::sections()},
          {"zerocheck", {"placement"}}};
}

json node_kinds_json() {
  json out = json::array();
  for (const auto& row : node_kinds()) {
    json parameters = json::array();
    for (const auto& slot : row.parameters)
      parameters.push_back({{"name", slot.name}, {"when", slot.only_with_bias ? "bias" : ""}});
    out.push_back({{"kind", row.name}, {"children", to_string(row.children)}, {"keys", row.keys}, {"parameters", parameters}});
  }
  return out;
}

json config_errors_json() {
  json out = json::array();
  for (const auto& row : config_errors()) out.push_back({{"name", row.name}, {"doc", row.doc}});
  return out;
}

}  // namespace

json to_json() {
  json limits_json = json::object();
  for (const auto& limit : all_limits()) limits_json[limit.name] = {limit.lo, limit.hi};
  limits_json["lr_exclusive"] = {kLearningRateAbove, kLearningRateBelow};
  limits_json["scale_inclusive"] = {kScaleMin, kScaleMax};
  json optimizers_json = json::array();
  for (const auto& row : optimizers()) optimizers_json.push_back({{"kind", row.kind}, {"momentum", row.momentum}});
  json ops = json::array();
  for (const auto& row : op_rows())
    ops.push_back({{"op", row.name}, {"required", op_key_names(row.required)}, {"optional", op_key_names(row.optional)}});
  json placement = json::array();
#define ZEROCHECK_PLACEMENT_ROW(kind, key) \
  placement.push_back({{"kind", #kind}, {"required", std::string(key).empty() ? json::array() : json::array({key})}});
  ZERO3_PLACEMENT_KINDS(ZEROCHECK_PLACEMENT_ROW)
#undef ZEROCHECK_PLACEMENT_ROW
  json invariants = json::array();
  for (const auto& row : invariant_rows()) invariants.push_back({{"name", row.name}, {"doc", row.statement}});
  json errors = json::array();
#define ZEROCHECK_ERROR_ROW(name, doc) errors.push_back({{"name", #name}, {"doc", doc}});
  ZERO3_ERROR_KINDS(ZEROCHECK_ERROR_ROW)
#undef ZEROCHECK_ERROR_ROW
  json overflow = json::array();
  for (const auto& row : overflow_keys())
    overflow.push_back({{"name", row.name}, {"type", row.is_integer ? "int" : "number"}, {"default", row.default_value},
                        {"min", row.lo}, {"max", row.hi}, {"doc", row.doc}});
  // nlohmann keeps object keys sorted, so the file is stable; lists keep the tables' order.
  return {{"generated_by", "zerocheck schema (harness/scenario/); do not edit, regenerate"},
          {"format", kFormat},
          {"read_formats", std::vector<std::string>(std::begin(kReadFormats), std::end(kReadFormats))},
          {"constructions", constructions()},
          {"config_errors", config_errors_json()},
          {"tag_rule", {{"forbidden", zero3::tag_forbidden_substrings()}, {"reserved", zero3::reserved_tags()}}},
          {"top_keys", {{"required", required_top_keys()}, {"optional", optional_top_keys()}}},
          {"limits", limits_json},
          {"optimizers", optimizers_json},
          {"node_keys", {{"required", {"kind"}}, {"optional", common_node_keys()}}},
          {"node_kinds", node_kinds_json()},
          {"ops", ops},
          {"initialize_optimizers", initialize_optimizers()},
          {"inject", {{"into", inject_targets()}, {"values", non_finite_values()}}},
          {"overflow_protection_keys", overflow},
          {"placement_kinds", placement},
          {"config_keys", config_keys()},
          {"attribute_name_max_bytes", zero3::AttrDict::kMaxNameBytes},
          {"invariants", invariants},
          {"error_kinds", errors}};
}

}  // namespace zerocheck::schema
