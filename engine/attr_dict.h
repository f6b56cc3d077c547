// AttrDict: the Python-like attribute dictionary LibTorch's C++ modules lack.
//
// It holds the *user's* dynamic attributes (`expert.id = 3`) on a module or a parameter, in
// insertion order, with Python semantics for plain writes (`set` overwrites, `del` removes).
// Each name remembers its owner — who defined it — so a defining write (`define`) can refuse to
// overwrite a name somebody else owns and say who both parties are. That refusal is one of the
// three fixes for DeepSpeed 0.15.4 clobbering `module.id`.
//
// Name rule: 1..kMaxNameBytes bytes of valid UTF-8 without NUL. Anything else (the empty name,
// a 4 KiB name) throws AttributeError on every path, so generators and engines agree.
//
// Thread-safety: none; a dictionary belongs to one rank's module tree.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace zero3 {

// One attribute value: none, bool, int, float, string, tensor or a list of values.
class AttrValue {
 public:
  using List = std::vector<AttrValue>;
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string, at::Tensor, List>;

  AttrValue() = default;
  AttrValue(bool v) : value_(v) {}                       // NOLINT: implicit like Python literals
  AttrValue(int v) : value_(int64_t{v}) {}               // NOLINT
  AttrValue(int64_t v) : value_(v) {}                    // NOLINT
  AttrValue(double v) : value_(v) {}                     // NOLINT
  AttrValue(const char* v) : value_(std::string(v)) {}   // NOLINT
  AttrValue(std::string v) : value_(std::move(v)) {}     // NOLINT
  AttrValue(at::Tensor v) : value_(std::move(v)) {}      // NOLINT
  AttrValue(List v) : value_(std::move(v)) {}            // NOLINT

  bool is_none() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_int() const { return std::holds_alternative<int64_t>(value_); }
  // Returns the integer. Throws AttributeError when the value is not an int.
  int64_t as_int() const;
  const Storage& storage() const { return value_; }

  // Value equality; tensors compare by dtype, shape and elements (a copy with the same values is equal).
  friend bool operator==(const AttrValue& a, const AttrValue& b);
  friend bool operator!=(const AttrValue& a, const AttrValue& b) { return !(a == b); }

  // A short readable form for error messages: 3, 'abc', tensor[2,3], [1, 2].
  std::string repr() const;

 private:
  Storage value_;
};

// Who wrote a name: the user, or an engine (by the engine's mode name, e.g. "legacy-0.15.4").
inline constexpr std::string_view kUserOwner = "user";

class AttrDict {
 public:
  static constexpr size_t kMaxNameBytes = 1024;

  struct Entry {
    std::string name;
    AttrValue value;
    std::string owner;
  };

  // Python `obj.name = value`: inserts or overwrites; the writer becomes the owner.
  // Throws AttributeError when the name breaks the name rule.
  void set(std::string_view name, AttrValue value, std::string_view owner = kUserOwner);

  // A write that must not overwrite: inserts `name` owned by `owner`.
  // Throws AttributeCollision naming `where`, the attribute and both owners when it exists.
  void define(std::string_view name, AttrValue value, std::string_view owner, std::string_view where);

  // Returns the value. Throws AttributeError (naming `name`) when it is missing.
  const AttrValue& get(std::string_view name) const;
  bool has(std::string_view name) const;
  // Returns the owner of `name`. Throws AttributeError when it is missing.
  const std::string& owner(std::string_view name) const;
  // Python `del obj.name`. Throws AttributeError when it is missing.
  void del(std::string_view name);

  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  // Returns an empty string when `name` obeys the name rule, else why it does not.
  static std::string name_problem(std::string_view name);

  friend bool operator==(const AttrDict& a, const AttrDict& b);

 private:
  const Entry* find(std::string_view name) const;
  Entry* find(std::string_view name);

  std::vector<Entry> entries_;  // small dictionaries: a linear scan keeps insertion order for free
};

}  // namespace zero3
