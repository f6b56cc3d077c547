// JsonAt: the one way zerocheck reads JSON (configs, placement policies, scenarios).
//
// A JSON value together with its path, so every error names its place in one convention:
// `$` is the document, `.key` an object key that is an identifier ([A-Za-z_][A-Za-z0-9_]*),
// `["key"]` any other key (JSON-escaped), `[i]` an array index:
//   $.tree[1].param_attrs["linear.weight"][0].name
// Messages are "<path>: <text>" with the texts below; the Python replay's reader
// (harness/deepspeed/zerocheck_ds/scenario/strict_json.py) prints the same texts, and the shared fixtures
// (harness/tests/scenarios/malformed/) hold both readers to them. Type names are null, boolean,
// integer, number (any non-integer number), string, array and object.
//
// parse_json_strict refuses what nlohmann would accept silently: a key written twice in one
// object (anywhere in the document). Errors are thrown through a Thrower so each reader keeps
// its own exception type (zero3::ConfigError, zerocheck::ScenarioError).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

// Throws the reader's exception type with `message` ("<path>: <text>").
using Thrower = void (*)(const std::string& message);

// Returns the path of `key` inside the object at `path`.
std::string key_path(const std::string& path, std::string_view key);
// Returns the path of item `index` of the array at `path`.
std::string index_path(const std::string& path, size_t index);
// Returns `text` as a JSON string literal (quotes and escapes), for messages.
std::string json_quoted(std::string_view text);
// Returns null, boolean, integer, number, string, array or object.
const char* json_type_name(const nlohmann::json& value);
// Returns "a, b, c" ("none" for an empty list).
std::string join_names(const std::vector<std::string>& names);

// Returns the document in `text`. Throws through `thrower`: "$: malformed JSON: ..." for a
// syntax error (or a number too large for a double), "<path of the key>: duplicate key".
nlohmann::json parse_json_strict(std::string_view text, Thrower thrower);

class JsonAt {
 public:
  JsonAt(const nlohmann::json& value, std::string path, Thrower thrower)
      : value_(&value), path_(std::move(path)), thrower_(thrower) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }

  // Throws "<path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

  // Requires an object whose keys are among `required` + `optional` and that holds every
  // required key: "expected an object, got T", "unknown key (expected one of: ...)" at the key,
  // "missing required key" at the missing key's path.
  void object(const std::vector<std::string>& required, const std::vector<std::string>& optional = {}) const;
  // Requires an object; its keys are free (a map such as placement owners).
  void map() const;
  bool has(std::string_view key) const;
  // The member `key`; "missing required key" when absent.
  JsonAt operator[](std::string_view key) const;
  JsonAt operator[](size_t index) const;
  // The members of an object, in document order.
  std::vector<std::pair<std::string, JsonAt>> members() const;

  // Requires an array of lo..hi items ("has N items, expected at most M" / "at least M").
  size_t array(int64_t lo, int64_t hi) const;
  // Requires an integer in [lo, hi] ("value V is out of range [lo, hi]").
  int64_t integer(int64_t lo, int64_t hi) const;
  double number() const;
  std::string string() const;
  bool boolean() const;
  // Requires a string among `choices`: 'unknown value "x" (expected one of: a, b)'.
  std::string one_of(const std::vector<std::string>& choices) const;

 private:
  [[noreturn]] void expected(const char* what) const;

  const nlohmann::json* value_;
  std::string path_;
  Thrower thrower_;
};

// Throws "<path>: value V is out of range [lo, hi]" unless lo <= value <= hi: the one range rule,
// shared by the readers and by validate() on values built in memory.
void check_range(const std::string& path, int64_t value, int64_t lo, int64_t hi, Thrower thrower);
// Throws "<path>: has N items, expected at most M" (or "at least M") unless lo <= count <= hi.
void check_count(const std::string& path, size_t count, int64_t lo, int64_t hi, Thrower thrower);

}  // namespace zero3
