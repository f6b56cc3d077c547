#include "engine/config.h"

#include "engine/errors.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace zero3 {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ConfigError(path + ": " + what);
}

int64_t read_int(const json& value, const std::string& path, int64_t lo, int64_t hi) {
  // Booleans and floats are JSON numbers to some parsers; DeepSpeed would take them, we refuse,
  // because `"stage": 3.5` or `true` is always a mistake.
  if (!value.is_number_integer())
    fail(path, std::string("expected an integer, got ") + value.type_name() + " " + value.dump());
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, "value " + value.dump() + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
    v = static_cast<int64_t>(u);
  } else {
    v = value.get<int64_t>();
  }
  if (v < lo || v > hi)
    fail(path, "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return v;
}

void read_zero_optimization(const json& section, ZeroOptimizationConfig& out) {
  if (!section.is_object())
    fail("zero_optimization", std::string("expected an object, got ") + section.type_name());
  for (const auto& [key, value] : section.items()) {
    const std::string path = "zero_optimization." + key;
#define ZERO3_READ_KEY(name, def, lo, hi, doc) \
  if (key == #name) {                          \
    out.name = read_int(value, path, lo, hi);  \
    continue;                                  \
  }
    ZERO3_ZERO_INT_KEYS(ZERO3_READ_KEY)
    fail(path, "unknown key");
  }
}

}  // namespace

Config Config::parse(std::string_view json_text) {
  json parsed;
  try {
    parsed = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    // nlohmann's byte offset is the most precise "path" a syntax error has.
    throw ConfigError("$: malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double (found by fuzzing)
    throw ConfigError(std::string("$: malformed JSON: ") + e.what());
  }
  return from_json(parsed);
}

Config Config::from_json(const json& root) {
  if (!root.is_object()) fail("$", std::string("expected an object, got ") + root.type_name());
  Config config;
  Config& out = config;  // ZERO3_READ_KEY writes through `out` at `path`
  for (const auto& [key, value] : root.items()) {
    const std::string& path = key;
    ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_READ_KEY)
    if (key == "zero_optimization") {
      read_zero_optimization(value, config.zero_optimization);
      continue;
    }
    if (key == "zerocheck") {
      if (!value.is_object()) fail(key, std::string("expected an object, got ") + value.type_name());
      for (const auto& [inner, inner_value] : value.items()) {
        if (inner != "placement") fail("zerocheck." + inner, "unknown key");
        config.placement = placement_from_json(inner_value, "zerocheck.placement");
      }
      continue;
    }
    fail(key, "unknown key");
  }
#undef ZERO3_READ_KEY
  return config;
}

json Config::to_json() const {
  json out = json::object();
#define ZERO3_WRITE_TOP(name, def, lo, hi, doc) out[#name] = name;
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_WRITE_TOP)
#undef ZERO3_WRITE_TOP
  if (train_batch_size == 0) out.erase("train_batch_size");
  json zero = json::object();
#define ZERO3_WRITE_ZERO(name, def, lo, hi, doc) zero[#name] = zero_optimization.name;
  ZERO3_ZERO_INT_KEYS(ZERO3_WRITE_ZERO)
#undef ZERO3_WRITE_ZERO
  out["zero_optimization"] = zero;
  if (placement.kind != PlacementSpec::Kind::none)
    out["zerocheck"] = {{"placement", placement_to_json(placement)}};
  return out;
}

void Config::check_world_size(int world_size) const {
  if (train_batch_size == 0) return;
  const int64_t implied = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size;
  if (train_batch_size != implied)
    fail("train_batch_size", std::to_string(train_batch_size) +
                                 " != train_micro_batch_size_per_gpu * gradient_accumulation_steps"
                                 " * world size = " + std::to_string(implied));
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
  out << "  zerocheck.placement (default none): {\"kind\": \"attr_mod\", \"attr\": NAME} or "
         "{\"kind\": \"map\", \"owners\": {PATH: RANK}}\n";
  return out.str();
}

}  // namespace zero3
