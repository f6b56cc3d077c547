#include "engine/json_reader.h"

#include <set>

namespace zero3 {
namespace {

using nlohmann::json;

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!letter(key[0])) return false;
  for (char c : key)
    if (!letter(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

std::string range_text(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// Finds the first key written twice in one object, with its path, while nlohmann parses. The
// path is put together only for that key: every checkpoint load parses a manifest, and making
// a path string for every object and array cost more than the rest of the parse.
class DuplicateFinder {
 public:
  bool on_event(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames_.push_back({true, {}, {}, 0}); break;
      case json::parse_event_t::array_start: frames_.push_back({false, {}, {}, 0}); break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && duplicate_.empty()) duplicate_ = key_path(path_of_top(), top.key);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        finished_item();
        break;
      case json::parse_event_t::value: finished_item(); break;
    }
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;    // object: the key whose value comes next
    size_t index;       // array: the index of the next item
  };
  // The path of the innermost open object or array: each enclosing one is at the key or index
  // that leads to the next.
  std::string path_of_top() const {
    std::string path = "$";
    for (size_t i = 0; i + 1 < frames_.size(); ++i)
      path = frames_[i].object ? key_path(path, frames_[i].key) : index_path(path, frames_[i].index);
    return path;
  }
  void finished_item() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  std::vector<Frame> frames_;
  std::string duplicate_;
};

}  // namespace

std::string key_path(const std::string& path, std::string_view key) {
  if (is_identifier(key)) return path + "." + std::string(key);
  return path + "[" + json_quoted(key) + "]";
}

std::string index_path(const std::string& path, size_t index) { return path + "[" + std::to_string(index) + "]"; }

std::string json_quoted(std::string_view text) {
  // Invalid UTF-8 cannot come from a parsed document; replace it rather than throw in a message.
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* json_type_name(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();  // null, boolean, string, array, object
}

std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

json parse_json_strict(std::string_view text, Thrower thrower) {
  DuplicateFinder finder;
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(),
                         [&finder](int, json::parse_event_t event, json& value) { return finder.on_event(event, value); });
  } catch (const json::parse_error& e) {
    thrower("$: malformed JSON: at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    thrower(std::string("$: malformed JSON: ") + e.what());
  }
  if (!finder.duplicate().empty()) thrower(finder.duplicate() + ": duplicate key");
  return parsed;
}

void check_range(const std::string& path, int64_t value, int64_t lo, int64_t hi, Thrower thrower) {
  if (value < lo || value > hi)
    thrower(path + ": value " + std::to_string(value) + " is out of range " + range_text(lo, hi));
}

void check_count(const std::string& path, size_t count, int64_t lo, int64_t hi, Thrower thrower) {
  if (static_cast<int64_t>(count) > hi)
    thrower(path + ": has " + std::to_string(count) + " items, expected at most " + std::to_string(hi));
  if (static_cast<int64_t>(count) < lo)
    thrower(path + ": has " + std::to_string(count) + " items, expected at least " + std::to_string(lo));
}

void JsonAt::fail(const std::string& what) const {
  thrower_(path_ + ": " + what);
  throw std::logic_error("a Thrower returned");  // a Thrower must throw
}

void JsonAt::expected(const char* what) const {
  fail(std::string("expected ") + what + ", got " + json_type_name(*value_));
}

void JsonAt::object(const std::vector<std::string>& required, const std::vector<std::string>& optional) const {
  if (!value_->is_object()) expected("an object");
  auto allowed = [&](const std::string& key) {
    for (const auto* list : {&required, &optional})
      for (const auto& k : *list)
        if (k == key) return true;
    return false;
  };
  for (const auto& item : value_->items())
    if (!allowed(item.key())) {
      std::vector<std::string> all = required;
      all.insert(all.end(), optional.begin(), optional.end());
      JsonAt(item.value(), key_path(path_, item.key()), thrower_)
          .fail("unknown key (expected one of: " + join_names(all) + ")");
    }
  for (const auto& key : required)
    if (!value_->contains(key)) JsonAt(*value_, key_path(path_, key), thrower_).fail("missing required key");
}

void JsonAt::map() const {
  if (!value_->is_object()) expected("an object");
}

bool JsonAt::has(std::string_view key) const { return value_->is_object() && value_->contains(std::string(key)); }

JsonAt JsonAt::operator[](std::string_view key) const {
  const std::string path = key_path(path_, key);
  if (!has(key)) JsonAt(*value_, path, thrower_).fail("missing required key");
  return JsonAt(value_->at(std::string(key)), path, thrower_);
}

JsonAt JsonAt::operator[](size_t index) const { return JsonAt(value_->at(index), index_path(path_, index), thrower_); }

std::vector<std::pair<std::string, JsonAt>> JsonAt::members() const {
  map();
  std::vector<std::pair<std::string, JsonAt>> out;
  for (const auto& item : value_->items())
    out.emplace_back(item.key(), JsonAt(item.value(), key_path(path_, item.key()), thrower_));
  return out;
}

size_t JsonAt::array(int64_t lo, int64_t hi) const {
  if (!value_->is_array()) expected("an array");
  check_count(path_, value_->size(), lo, hi, thrower_);
  return value_->size();
}

int64_t JsonAt::integer(int64_t lo, int64_t hi) const {
  if (!value_->is_number_integer()) expected("an integer");
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("value " + value_->dump() + " is out of range " + range_text(lo, hi));
  const int64_t v = value_->get<int64_t>();
  check_range(path_, v, lo, hi, thrower_);
  return v;
}

double JsonAt::number() const {
  if (!value_->is_number()) expected("a number");
  return value_->get<double>();
}

std::string JsonAt::string() const {
  if (!value_->is_string()) expected("a string");
  return value_->get<std::string>();
}

bool JsonAt::boolean() const {
  if (!value_->is_boolean()) expected("a boolean");
  return value_->get<bool>();
}

std::string JsonAt::one_of(const std::vector<std::string>& choices) const {
  const std::string v = string();
  for (const auto& c : choices)
    if (c == v) return v;
  fail("unknown value " + json_quoted(v) + " (expected one of: " + join_names(choices) + ")");
}

}  // namespace zero3
