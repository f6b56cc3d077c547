#include "engine/attr_dict.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

#include <sstream>

namespace zero3 {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    if (c < 0x80) extra = 0;
    else if ((c & 0xE0) == 0xC0 && c >= 0xC2) extra = 1;
    else if ((c & 0xF0) == 0xE0) extra = 2;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4) extra = 3;
    else return false;
    if (i + extra >= s.size() && extra > 0) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

std::string quoted(std::string_view name) {
  std::string shown(name.substr(0, 64));
  if (name.size() > 64) shown += "...(" + std::to_string(name.size()) + " bytes)";
  return "'" + shown + "'";
}

}  // namespace

int64_t AttrValue::as_int() const {
  if (const auto* v = std::get_if<int64_t>(&value_)) return *v;
  throw AttributeError("attribute value " + repr() + " is not an int");
}

bool operator==(const AttrValue& a, const AttrValue& b) {
  if (a.value_.index() != b.value_.index()) return false;
  if (const auto* ta = std::get_if<at::Tensor>(&a.value_)) {
    const auto& tb = std::get<at::Tensor>(b.value_);
    if (ta->defined() != tb.defined()) return false;
    if (!ta->defined()) return true;
    return ta->scalar_type() == tb.scalar_type() && ta->sizes() == tb.sizes() &&
           at::equal(ta->cpu(), tb.cpu());
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, at::Tensor>) return false;  // handled above
        else return x == std::get<T>(b.value_);
      },
      a.value_);
}

std::string AttrValue::repr() const {
  std::ostringstream out;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) out << "None";
        else if constexpr (std::is_same_v<T, bool>) out << (v ? "True" : "False");
        else if constexpr (std::is_same_v<T, std::string>) out << quoted(v);
        else if constexpr (std::is_same_v<T, at::Tensor>) {
          out << "tensor";
          if (v.defined()) out << v.sizes();
        } else if constexpr (std::is_same_v<T, List>) {
          out << "[";
          for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i].repr();
          out << "]";
        } else out << v;
      },
      value_);
  return out.str();
}

std::string AttrDict::name_problem(std::string_view name) {
  if (name.empty()) return "the empty name is not an attribute name";
  if (name.size() > kMaxNameBytes)
    return "name of " + std::to_string(name.size()) + " bytes exceeds the limit of " +
           std::to_string(kMaxNameBytes);
  if (name.find('\0') != std::string_view::npos) return "name contains a NUL byte";
  if (!valid_utf8(name)) return "name is not valid UTF-8";
  return {};
}

void AttrDict::set(std::string_view name, AttrValue value, std::string_view owner) {
  if (auto problem = name_problem(name); !problem.empty())
    throw AttributeError("attribute " + quoted(name) + " rejected: " + problem);
  if (Entry* e = find(name)) {
    e->value = std::move(value);
    e->owner = std::string(owner);
    return;
  }
  entries_.push_back({std::string(name), std::move(value), std::string(owner)});
}

void AttrDict::define(std::string_view name, AttrValue value, std::string_view owner,
                      std::string_view where) {
  if (const Entry* e = find(name)) {
    throw AttributeCollision(std::string(where) + ": attribute " + quoted(name) + " is owned by " +
                             e->owner + " (value " + e->value.repr() + "); " + std::string(owner) +
                             " refused to overwrite it");
  }
  set(name, std::move(value), owner);
}

const AttrValue& AttrDict::get(std::string_view name) const {
  if (const Entry* e = find(name)) return e->value;
  throw AttributeError("no attribute " + quoted(name));
}

bool AttrDict::has(std::string_view name) const { return find(name) != nullptr; }

const std::string& AttrDict::owner(std::string_view name) const {
  if (const Entry* e = find(name)) return e->owner;
  throw AttributeError("no attribute " + quoted(name));
}

void AttrDict::del(std::string_view name) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->name == name) {
      entries_.erase(it);
      return;
    }
  }
  throw AttributeError("cannot delete missing attribute " + quoted(name));
}

bool operator==(const AttrDict& a, const AttrDict& b) {
  if (a.entries_.size() != b.entries_.size()) return false;
  for (size_t i = 0; i < a.entries_.size(); ++i) {
    const auto& x = a.entries_[i];
    const auto& y = b.entries_[i];
    if (x.name != y.name || x.owner != y.owner || x.value != y.value) return false;
  }
  return true;
}

const AttrDict::Entry* AttrDict::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

AttrDict::Entry* AttrDict::find(std::string_view name) {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace zero3
