#include "engine/config.h"

#include "engine/errors.h"
#include "engine/json_reader.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace zero3 {
namespace {

using nlohmann::json;

void throw_config_error(const std::string& message) { throw ConfigError(message); }

template <class Keys>
std::vector<std::string> names_of(const Keys& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.name);
  return out;
}

struct IntKey {
  std::string name;
  int64_t lo;
  int64_t hi;
};

const std::vector<IntKey>& top_level_keys() {
  static const std::vector<IntKey> keys = {
#define ZERO3_KEY_ROW(name, def, lo, hi, doc) {#name, lo, hi},
      ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_KEY_ROW)};
  return keys;
}

const std::vector<IntKey>& zero_keys() {
  static const std::vector<IntKey> keys = {ZERO3_ZERO_INT_KEYS(ZERO3_KEY_ROW)};
#undef ZERO3_KEY_ROW
  return keys;
}

// One reader per precision Kind (engine/config.h ZERO3_PRECISION_KEYS).
void read_precision(const JsonAt& at, double, double, PrecisionConfig::Bool& out) { out = at.boolean(); }
void read_precision(const JsonAt& at, double lo, double hi, PrecisionConfig::Int& out) {
  out = at.integer(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}
void read_precision(const JsonAt& at, double lo, double hi, PrecisionConfig::Number& out) {
  const double value = at.number();
  if (!(value >= lo && value <= hi))
    at.fail("value " + json(value).dump() + " is out of range [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  out = value;
}
void read_precision(const JsonAt& at, double, double, PrecisionConfig::Dtype& out) { out = at.one_of(precision_dtypes()); }

// The keys of the precision table in `section` ("" for the top level).
std::vector<std::string> precision_keys_in(std::string_view section) {
  std::vector<std::string> keys;
#define ZERO3_PRECISION_NAME(member, sec, key, kind, lo, hi, v0145, master, doc) \
  if (section == sec) keys.push_back(key);
  ZERO3_PRECISION_KEYS(ZERO3_PRECISION_NAME)
#undef ZERO3_PRECISION_NAME
  return keys;
}

void read_precision_keys(const JsonAt& at, PrecisionConfig& out) {
  for (const std::string& section : precision_sections())
    if (at.has(section)) at[section].object({}, precision_keys_in(section));
  const auto in = [&](const char* section, const char* key) {
    return std::string_view(section).empty() ? at[key] : at[section][key];
  };
  const auto has = [&](const char* section, const char* key) {
    return std::string_view(section).empty() ? at.has(key) : at.has(section) && at[section].has(key);
  };
#define ZERO3_READ_PRECISION(member, section, key, kind, lo, hi, v0145, master, doc) \
  if (has(section, key)) read_precision(in(section, key), lo, hi, out.member);
  ZERO3_PRECISION_KEYS(ZERO3_READ_PRECISION)
#undef ZERO3_READ_PRECISION
}

}  // namespace

const std::vector<std::string>& Config::sections() {
  static const std::vector<std::string> all = {"zero_optimization", "zerocheck"};
  return all;
}

Config Config::parse(std::string_view json_text) {
  return from_json(parse_json_strict(json_text, throw_config_error));
}

Config Config::from_json(const json& root, const std::string& path) {
  return read(JsonAt(root, path, throw_config_error));
}

Config Config::read(const JsonAt& at) {
  std::vector<std::string> allowed = names_of(top_level_keys());
  allowed.insert(allowed.end(), sections().begin(), sections().end());
  allowed.insert(allowed.end(), precision_sections().begin(), precision_sections().end());
  for (const std::string& key : precision_keys_in("")) allowed.push_back(key);
  at.object({}, allowed);
  Config config;
  read_precision_keys(at, config.precision);
  const auto read_int = [](const JsonAt& section, const IntKey& key, int64_t& out) {
    if (section.has(key.name)) out = section[key.name].integer(key.lo, key.hi);
  };
#define ZERO3_READ_TOP(name, def, lo, hi, doc) read_int(at, {#name, lo, hi}, config.name);
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_READ_TOP)
#undef ZERO3_READ_TOP
  if (at.has("zero_optimization")) {
    const JsonAt zero = at["zero_optimization"];
    std::vector<std::string> zero_allowed = names_of(zero_keys());
#define ZERO3_FLAG_NAME(name, def, doc) zero_allowed.push_back(#name);
    ZERO3_ZERO_BOOL_KEYS(ZERO3_FLAG_NAME)
#undef ZERO3_FLAG_NAME
    zero_allowed.push_back("offload_optimizer");
    zero.object({}, zero_allowed);
#define ZERO3_READ_ZERO(name, def, lo, hi, doc) read_int(zero, {#name, lo, hi}, config.zero_optimization.name);
    ZERO3_ZERO_INT_KEYS(ZERO3_READ_ZERO)
#undef ZERO3_READ_ZERO
#define ZERO3_READ_FLAG(name, def, doc) \
  if (zero.has(#name)) config.zero_optimization.name = zero[#name].boolean();
    ZERO3_ZERO_BOOL_KEYS(ZERO3_READ_FLAG)
#undef ZERO3_READ_FLAG
    if (zero.has("offload_optimizer")) {
      const JsonAt offload = zero["offload_optimizer"];
      offload.object({}, {"device"});
      if (offload.has("device")) config.zero_optimization.offload_optimizer_device = offload["device"].one_of(offload_devices());
    }
  }
  if (at.has("zerocheck")) {
    const JsonAt own = at["zerocheck"];
    own.object({}, {"placement"});
    if (own.has("placement")) config.placement = read_placement(own["placement"]);
  }
  return config;
}

json Config::to_json() const {
  json out = json::object();
#define ZERO3_WRITE_TOP(name, def, lo, hi, doc) out[#name] = name;
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_WRITE_TOP)
#undef ZERO3_WRITE_TOP
  if (train_batch_size == 0) out.erase("train_batch_size");
  json zero = json::object();
  // The keys written before DeepSpeed's other knobs joined the table are written always; those
  // only when not the default, so older files (and the fuzz corpora's stored decodings) keep
  // their bytes and a scenario shows the knobs it sets.
  const auto always = [](std::string_view key) {
    return key == "stage" || key == "stage3_param_persistence_threshold" || key == "reduce_bucket_size";
  };
#define ZERO3_WRITE_ZERO(name, def, lo, hi, doc) \
  if (always(#name) || zero_optimization.name != (def)) zero[#name] = zero_optimization.name;
  ZERO3_ZERO_INT_KEYS(ZERO3_WRITE_ZERO)
#undef ZERO3_WRITE_ZERO
#define ZERO3_WRITE_FLAG(name, def, doc) \
  if (zero_optimization.name != (def)) zero[#name] = zero_optimization.name;
  ZERO3_ZERO_BOOL_KEYS(ZERO3_WRITE_FLAG)
#undef ZERO3_WRITE_FLAG
  if (zero_optimization.offload_optimizer_device != "none")
    zero["offload_optimizer"] = {{"device", zero_optimization.offload_optimizer_device}};
  out["zero_optimization"] = zero;
  // A precision key is written only when the config sets it: absent is the version's default.
#define ZERO3_WRITE_PRECISION(member, section, key, kind, lo, hi, v0145, master, doc) \
  if (precision.member) {                                                               \
    if (std::string_view(section).empty()) out[key] = *precision.member;                \
    else out[section][key] = *precision.member;                                         \
  }
  ZERO3_PRECISION_KEYS(ZERO3_WRITE_PRECISION)
#undef ZERO3_WRITE_PRECISION
  if (placement.kind != PlacementSpec::Kind::none)
    out["zerocheck"] = {{"placement", placement_to_json(placement)}};
  return out;
}

void Config::check_world_size(int world_size, const std::string& path) const {
  if (train_batch_size == 0) return;
  const int64_t implied = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size;
  if (train_batch_size != implied)
    throw ConfigError(path + ".train_batch_size: " + std::to_string(train_batch_size) +
                      " != train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size = " +
                      std::to_string(implied));
}

void Config::validate(int world_size, const std::string& path) const {
  auto check = [](const std::string& at, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
      throw ConfigError(at + ": value " + std::to_string(value) + " is out of range [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  };
  // train_batch_size's 0 is "not set" (its range is for a set value); check_world_size judges it.
#define ZERO3_CHECK_TOP(key, def, lo, hi, doc) \
  if (std::string_view(#key) != "train_batch_size" || key != 0) check(path + "." #key, key, lo, hi);
#define ZERO3_CHECK_ZERO(key, def, lo, hi, doc) \
  check(path + ".zero_optimization." #key, zero_optimization.key, lo, hi);
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_CHECK_TOP)
  ZERO3_ZERO_INT_KEYS(ZERO3_CHECK_ZERO)
#undef ZERO3_CHECK_TOP
#undef ZERO3_CHECK_ZERO
  check_world_size(world_size, path);
  // fp16 and bf16 together are refused, as DeepSpeed asserts (runtime/config.py:831-832
  // (v0.14.5)). fp16 alone is valid everywhere (a config is the same on every lane); initialize
  // refuses it where this LibTorch has no fp16 Linear on CPU (precision_refusal, fp16_probe.h).
  if (precision.fp16_enabled.value_or(false) && precision.bf16_enabled.value_or(false))
    throw ConfigError(path + ".fp16.enabled: true together with bf16.enabled: true; DeepSpeed refuses both "
                      "(runtime/config.py:831-832 (v0.14.5)): enable one");
  if (zero_optimization.offload_optimizer_device != "none")
    throw ConfigError(path + ".zero_optimization.offload_optimizer.device: \"" +
                      zero_optimization.offload_optimizer_device +
                      "\": zerocheck's engine keeps each optimizer shard beside its parameter shard and "
                      "offloads nothing (use \"none\")");
}

std::string Config::describe_keys() {
  std::ostringstream out;
#define ZERO3_DESCRIBE(prefix)                                                            \
  [&](const char* name, int64_t def, const char* doc) {                                  \
    out << "  " << prefix << name << " (default " << def << "): " << doc << "\n";        \
  }
  auto top = ZERO3_DESCRIBE("");
  auto zero = ZERO3_DESCRIBE("zero_optimization.");
#undef ZERO3_DESCRIBE
#define ZERO3_TOP(name, def, lo, hi, doc) top(#name, def, doc);
#define ZERO3_ZERO(name, def, lo, hi, doc) zero(#name, def, doc);
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_TOP)
  ZERO3_ZERO_INT_KEYS(ZERO3_ZERO)
#undef ZERO3_TOP
#undef ZERO3_ZERO
#define ZERO3_FLAG(name, def, doc) \
  out << "  zero_optimization." #name " (default " << (def ? "true" : "false") << "): " << doc << "\n";
  ZERO3_ZERO_BOOL_KEYS(ZERO3_FLAG)
#undef ZERO3_FLAG
  out << "  zero_optimization.offload_optimizer.device (default none): none, cpu or nvme; the engine "
         "offloads nothing and refuses the others at initialize\n";
#define ZERO3_PRECISION_DOC(member, section, key, kind, lo, hi, v0145, master, doc)                 \
  out << "  " << (std::string_view(section).empty() ? "" : section "." ) << key << " (default " << v0145 \
      << " on DeepSpeed v0.14.5, " << master << " on master): " << doc << "\n";
  ZERO3_PRECISION_KEYS(ZERO3_PRECISION_DOC)
#undef ZERO3_PRECISION_DOC
  out << "  zerocheck.placement (default none): {\"kind\": \"attr_mod\", \"attr\": NAME} or "
         "{\"kind\": \"map\", \"owners\": {PATH: RANK}}\n";
  return out.str();
}

}  // namespace zero3
