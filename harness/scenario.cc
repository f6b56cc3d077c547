#include "harness/scenario.h"

#include "engine/layers.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace zerocheck {
namespace {

using nlohmann::json;

// A JSON value with the path that leads to it, so every error can name its place.
struct At {
  const json& value;
  std::string path;

  [[noreturn]] void fail(const std::string& what) const { throw ScenarioError(path + ": " + what); }

  At operator[](const std::string& key) const {
    if (!value.contains(key)) At{value, path + "." + key}.fail("missing");
    return {value.at(key), path + "." + key};
  }
  At operator[](size_t i) const { return {value.at(i), path + "[" + std::to_string(i) + "]"}; }

  const json& object(const std::set<std::string>& allowed) const {
    if (!value.is_object()) fail(std::string("expected an object, got ") + value.type_name());
    for (const auto& item : value.items())
      if (!allowed.count(item.key())) At{item.value(), path + "." + item.key()}.fail("unknown key");
    return value;
  }
  const json& array(size_t max) const {
    if (!value.is_array()) fail(std::string("expected an array, got ") + value.type_name());
    if (value.size() > max) fail("has " + std::to_string(value.size()) + " items, at most " + std::to_string(max));
    return value;
  }
  int64_t integer(int64_t lo, int64_t hi) const {
    if (!value.is_number_integer()) fail(std::string("expected an integer, got ") + value.type_name() + " " + value.dump());
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi))
      fail("value " + value.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t v = value.get<int64_t>();
    if (v < lo || v > hi)
      fail("value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }
  std::string string() const {
    if (!value.is_string()) fail(std::string("expected a string, got ") + value.type_name());
    return value.get<std::string>();
  }
  bool boolean() const {
    if (!value.is_boolean()) fail(std::string("expected true or false, got ") + value.type_name());
    return value.get<bool>();
  }
  double number() const {
    if (!value.is_number()) fail(std::string("expected a number, got ") + value.type_name());
    return value.get<double>();
  }
  bool has(const std::string& key) const { return value.contains(key); }
};

std::string attribute_name(const At& at) {
  const std::string name = at.string();
  if (auto problem = zero3::AttrDict::name_problem(name); !problem.empty()) at.fail(problem);
  return name;
}

zero3::AttrValue attr_value(const At& at, int depth = 0) {
  const json& v = at.value;
  if (depth > 8) at.fail("attribute value nested deeper than 8 lists");
  if (v.is_null()) return zero3::AttrValue();
  if (v.is_boolean()) return zero3::AttrValue(v.get<bool>());
  if (v.is_number_integer()) return zero3::AttrValue(at.integer(INT64_MIN, INT64_MAX));
  if (v.is_number_float()) return zero3::AttrValue(v.get<double>());
  if (v.is_string()) return zero3::AttrValue(v.get<std::string>());
  if (v.is_array()) {
    zero3::AttrValue::List list;
    for (size_t i = 0; i < at.array(256).size(); ++i) list.push_back(attr_value(at[i], depth + 1));
    return zero3::AttrValue(std::move(list));
  }
  at.object({"tensor", "shape"});
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (size_t i = 0; i < at["shape"].array(8).size(); ++i) {
    shape.push_back(at["shape"][i].integer(0, 4096));
    numel *= shape.back();
  }
  const At data = at["tensor"];
  if (static_cast<int64_t>(data.array(4096).size()) != numel)
    data.fail("holds " + std::to_string(data.value.size()) + " numbers, the shape needs " + std::to_string(numel));
  std::vector<float> values;
  for (size_t i = 0; i < data.value.size(); ++i) {
    const double v = data[i].number();
    // Tensors are float32: a value that would become inf could not be written back.
    if (!(std::abs(v) <= static_cast<double>(std::numeric_limits<float>::max())))
      data[i].fail("value " + data[i].value.dump() + " does not fit a float32 tensor");
    values.push_back(static_cast<float>(v));
  }
  return zero3::AttrValue(at::tensor(values).reshape(shape));
}

std::vector<AttrEntry> attr_list(const At& at) {
  std::vector<AttrEntry> out;
  for (size_t i = 0; i < at.array(256).size(); ++i) {
    const At item = at[i];
    item.object({"name", "value"});
    out.push_back({attribute_name(item["name"]), attr_value(item["value"])});
  }
  return out;
}

const std::set<std::string> kKinds = {
#define ZEROCHECK_KIND_NAME(kind, children, params) #kind,
    ZEROCHECK_NODE_KINDS(ZEROCHECK_KIND_NAME)
#undef ZEROCHECK_KIND_NAME
};

bool kind_has_children(const std::string& kind) {
#define ZEROCHECK_KIND_CHILDREN(k, children, params) \
  if (kind == #k) return children;
  ZEROCHECK_NODE_KINDS(ZEROCHECK_KIND_CHILDREN)
#undef ZEROCHECK_KIND_CHILDREN
  return false;
}

NodeSpec read_node(const At& at) {
  at.object({"kind", "shape", "bias", "children", "attrs", "param_attrs", "frozen"});
  NodeSpec node;
  node.kind = at["kind"].string();
  if (!kKinds.count(node.kind)) at["kind"].fail("unknown node kind '" + node.kind + "'");
  if (at.has("bias")) {
    if (node.kind != "Linear") at["bias"].fail("only a Linear has a bias switch");
    node.bias = at["bias"].boolean();
  }
  if (at.has("shape")) {
    if (node.kind != "Offset") at["shape"].fail("only an Offset has a shape");
    int64_t numel = 1;
    for (size_t i = 0; i < at["shape"].array(16).size(); ++i) {
      node.shape.push_back(at["shape"][i].integer(0, kMaxParamNumel));
      numel *= node.shape.back();
      if (numel > kMaxParamNumel) at["shape"].fail("has more than " + std::to_string(kMaxParamNumel) + " elements");
    }
  }
  if (at.has("children"))
    for (size_t i = 0; i < at["children"].array(kMaxNodes).size(); ++i)
      node.children.push_back(static_cast<int>(at["children"][i].integer(0, kMaxNodes - 1)));
  if (at.has("attrs")) node.attrs = attr_list(at["attrs"]);
  const auto names = param_names(node);
  auto check_param = [&](const At& where, const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      where.fail("a " + node.kind + " has no parameter '" + name + "'");
  };
  if (at.has("param_attrs")) {
    const At pa = at["param_attrs"];
    if (!pa.value.is_object()) pa.fail("expected an object of parameter name -> attributes");
    for (const auto& item : pa.value.items()) {
      const At entry{item.value(), pa.path + "." + item.key()};
      check_param(entry, item.key());
      node.param_attrs[item.key()] = attr_list(entry);
    }
  }
  if (at.has("frozen"))
    for (size_t i = 0; i < at["frozen"].array(4).size(); ++i) {
      node.frozen.push_back(at["frozen"][i].string());
      check_param(at["frozen"][i], node.frozen.back());
    }
  return node;
}

Op read_op(const At& at) {
  at.object({"op", "optimizer", "target", "route", "module", "param", "name", "value"});
  Op op;
  const std::string name = at["op"].string();
  bool known = false;
#define ZEROCHECK_READ_OP(n) \
  if (name == #n) op.kind = OpKind::n, known = true;
  ZEROCHECK_OP_KINDS(ZEROCHECK_READ_OP)
#undef ZEROCHECK_READ_OP
  if (!known) at["op"].fail("unknown operation '" + name + "'");
  auto only_for = [&](const char* key, std::initializer_list<OpKind> kinds) {
    if (!at.has(key)) return false;
    for (OpKind k : kinds)
      if (k == op.kind) return true;
    at[key].fail(std::string("not a key of '") + name + "'");
  };
  if (only_for("optimizer", {OpKind::initialize})) {
    op.optimizer = at["optimizer"].string();
    if (op.optimizer != "same" && op.optimizer != "fresh") at["optimizer"].fail("expected \"same\" or \"fresh\"");
  }
  if (only_for("target", {OpKind::initialize})) op.target = at["target"].string();
  if (only_for("route", {OpKind::forward}))
    for (size_t i = 0; i < at["route"].array(64).size(); ++i)
      op.route.push_back(at["route"][i].integer(0, 1 << 20));
  const bool attr_op = op.kind == OpKind::set_attr || op.kind == OpKind::del_attr;
  if (only_for("module", {OpKind::set_attr, OpKind::del_attr})) op.module = at["module"].string();
  if (only_for("param", {OpKind::set_attr, OpKind::del_attr})) op.param = at["param"].string();
  if (attr_op) op.name = attribute_name(at["name"]);
  else if (at.has("name")) at["name"].fail(std::string("not a key of '") + name + "'");
  if (op.kind == OpKind::set_attr) op.value = attr_value(at["value"]);
  else if (at.has("value")) at["value"].fail(std::string("not a key of '") + name + "'");
  return op;
}

void check_tree(const std::vector<NodeSpec>& tree) {
  if (tree.empty()) throw ScenarioError("$.tree: needs at least the root node");
  for (size_t i = 0; i < tree.size(); ++i) {
    const NodeSpec& node = tree[i];
    const std::string where = "$.tree[" + std::to_string(i) + "]";
    if (!kind_has_children(node.kind) && !node.children.empty())
      throw ScenarioError(where + ".children: a " + node.kind + " has no children");
    if (node.kind == "MoE" && node.children.empty())
      throw ScenarioError(where + ".children: an MoE needs at least one expert");
    for (size_t c = 0; c < node.children.size(); ++c) {
      const int child = node.children[c];
      // Children after their parent: the tree cannot loop, by construction.
      if (child <= static_cast<int>(i) || child >= static_cast<int>(tree.size()))
        throw ScenarioError(where + ".children[" + std::to_string(c) + "]: child " + std::to_string(child) +
                            " must name a later node (" + std::to_string(i + 1) + ".." +
                            std::to_string(tree.size() - 1) + ")");
    }
  }
}

json attr_list_to_json(const std::vector<AttrEntry>& entries) {
  json out = json::array();
  for (const auto& e : entries) out.push_back({{"name", e.name}, {"value", attr_value_to_json(e.value)}});
  return out;
}

// Rejects a key that appears twice in one object: nlohmann would silently keep the last.
json parse_strict(std::string_view text) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    throw ScenarioError("$: malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    throw ScenarioError(std::string("$: malformed JSON: ") + e.what());
  }
  if (!duplicate.empty()) throw ScenarioError("$: the key '" + duplicate + "' appears twice in one object");
  return parsed;
}

}  // namespace

const char* to_string(OpKind kind) {
  switch (kind) {
#define ZEROCHECK_OP_NAME(n) \
  case OpKind::n:            \
    return #n;
    ZEROCHECK_OP_KINDS(ZEROCHECK_OP_NAME)
#undef ZEROCHECK_OP_NAME
  }
  return "?";
}

Scenario parse_scenario(std::string_view text) { return scenario_from_json(parse_strict(text)); }

Scenario scenario_from_json(const json& root) {
  const At at{root, "$"};
  at.object({"format", "world_size", "seed", "features", "batch", "optimizer", "config", "placement", "tree", "ops"});
  if (at["format"].string() != kScenarioFormat)
    at["format"].fail("expected \"" + std::string(kScenarioFormat) + "\", got \"" + at["format"].string() + "\"");
  Scenario s;
  s.world_size = static_cast<int>(at["world_size"].integer(1, kMaxWorldSize));
  s.seed = static_cast<uint64_t>(at["seed"].integer(0, INT64_MAX));
  s.features = at["features"].integer(1, kMaxFeatures);
  s.batch = at["batch"].integer(1, 16);
  const At optimizer = at["optimizer"];
  optimizer.object({"kind", "lr"});
  s.optimizer = optimizer["kind"].string();
  if (s.optimizer != "adam" && s.optimizer != "sgd") optimizer["kind"].fail("expected \"adam\" or \"sgd\"");
  s.lr = optimizer["lr"].number();
  if (!(s.lr > 0 && s.lr < 10)) optimizer["lr"].fail("expected a learning rate in (0, 10)");
  try {
    s.config = zero3::Config::from_json(at["config"].value);
  } catch (const zero3::ConfigError& e) {
    throw ScenarioError("$.config." + std::string(e.what()));
  }
  if (at.has("placement")) {
    try {
      s.placement = zero3::placement_from_json(at["placement"].value, "$.placement");
    } catch (const zero3::ConfigError& e) {
      throw ScenarioError(e.what());
    }
  }
  // The config's "zerocheck.placement" section is the same setting as "placement": a scenario
  // gives its policy once, and from here on it lives in Scenario::placement only.
  if (s.config.placement.kind != zero3::PlacementSpec::Kind::none) {
    if (s.placement.kind != zero3::PlacementSpec::Kind::none)
      throw ScenarioError("$.placement: a policy is also given in $.config.zerocheck.placement; give it once");
    s.placement = std::exchange(s.config.placement, zero3::PlacementSpec{});
  }
  for (size_t i = 0; i < at["tree"].array(kMaxNodes).size(); ++i) s.tree.push_back(read_node(at["tree"][i]));
  for (size_t i = 0; i < at["ops"].array(kMaxOps).size(); ++i) s.ops.push_back(read_op(at["ops"][i]));
  validate(s);
  return s;
}

void validate(const Scenario& s) {
  if (s.world_size < 1 || s.world_size > kMaxWorldSize) throw ScenarioError("$.world_size: out of range");
  if (s.features < 1 || s.features > kMaxFeatures) throw ScenarioError("$.features: out of range");
  check_tree(s.tree);
  if (s.ops.size() > kMaxOps) throw ScenarioError("$.ops: too many operations");
  if (s.config.placement.kind != zero3::PlacementSpec::Kind::none)
    throw ScenarioError("$.config.zerocheck.placement: a scenario's policy belongs in Scenario::placement");
}

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
  for (const NodeSpec& node : s.tree) {
    json n = {{"kind", node.kind}};
    if (node.kind == "Offset") n["shape"] = node.shape;
    if (node.kind == "Linear" && !node.bias) n["bias"] = false;
    if (!node.children.empty()) n["children"] = node.children;
    if (!node.attrs.empty()) n["attrs"] = attr_list_to_json(node.attrs);
    if (!node.param_attrs.empty()) {
      json pa = json::object();
      for (const auto& [name, entries] : node.param_attrs) pa[name] = attr_list_to_json(entries);
      n["param_attrs"] = pa;
    }
    if (!node.frozen.empty()) n["frozen"] = node.frozen;
    tree.push_back(n);
  }
  json ops = json::array();
  for (const Op& op : s.ops) {
    json o = {{"op", to_string(op.kind)}};
    switch (op.kind) {
      case OpKind::initialize: o["optimizer"] = op.optimizer, o["target"] = op.target; break;
      case OpKind::forward: o["route"] = op.route; break;
      case OpKind::set_attr: o["value"] = attr_value_to_json(op.value); [[fallthrough]];
      case OpKind::del_attr: o["module"] = op.module, o["param"] = op.param, o["name"] = op.name; break;
      default: break;
    }
    ops.push_back(o);
  }
  return {{"format", kScenarioFormat},
          {"world_size", s.world_size},
          {"seed", s.seed},
          {"features", s.features},
          {"batch", s.batch},
          {"optimizer", {{"kind", s.optimizer}, {"lr", s.lr}}},
          {"config", s.config.to_json()},
          {"placement", zero3::placement_to_json(s.placement)},
          {"tree", tree},
          {"ops", ops}};
}

std::shared_ptr<zero3::Module> build_tree(const Scenario& s) {
  validate(s);
  const int64_t f = s.features;
  std::vector<std::shared_ptr<zero3::Module>> built(s.tree.size());
  // Children come after parents, so build from the last node back to the root.
  for (size_t k = s.tree.size(); k-- > 0;) {
    const NodeSpec& node = s.tree[k];
    std::shared_ptr<zero3::Module> m;
    if (node.kind == "Linear") m = std::make_shared<zero3::Linear>(f, f, node.bias);
    else if (node.kind == "LayerNorm") m = std::make_shared<zero3::LayerNorm>(f);
    else if (node.kind == "Tanh") m = std::make_shared<zero3::Tanh>();
    else if (node.kind == "Offset") m = std::make_shared<zero3::Offset>(node.shape);
    else if (node.kind == "Expert") m = std::make_shared<zero3::Expert>(f, f);
    else if (node.kind == "MoE") {
      std::vector<std::shared_ptr<zero3::Module>> experts;
      for (int c : node.children) experts.push_back(built[static_cast<size_t>(c)]);
      m = std::make_shared<zero3::MoE>(experts);
    } else {
      auto seq = node.kind == "ModuleList" ? std::make_shared<zero3::ModuleList>()
                                           : std::make_shared<zero3::Sequential>();
      for (int c : node.children) seq->push_back(built[static_cast<size_t>(c)]);
      m = seq;
    }
    for (const auto& e : node.attrs) m->attrs().set(e.name, e.value);
    auto owner_of = [&](const std::string& name) -> std::pair<zero3::Module*, std::string> {
      if (node.kind == "Expert") return {static_cast<zero3::Expert&>(*m).linear.get(), name.substr(7)};
      return {m.get(), name};
    };
    for (const auto& [name, entries] : node.param_attrs) {
      auto [owner, local] = owner_of(name);
      for (const auto& e : entries) owner->param_attrs(local).set(e.name, e.value);
    }
    for (const auto& name : node.frozen) {
      auto [owner, local] = owner_of(name);
      owner->named_parameters(false)[local].set_requires_grad(false);
    }
    built[k] = m;
  }
  zero3::init_parameters(*built[0], s.seed);
  return built[0];
}

std::vector<std::string> param_names(const NodeSpec& node) {
  if (node.kind == "Linear") return node.bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
  if (node.kind == "LayerNorm") return {"weight", "bias"};
  if (node.kind == "Offset") return {"value"};
  if (node.kind == "Expert") return {"linear.weight", "linear.bias"};  // its Linear's
  return {};
}

zero3::Route route_of(const Op& op) { return zero3::Route::cyclic(op.route); }

ScenarioShape shape_of(const Scenario& s) {
  ScenarioShape shape;
  shape.ops = static_cast<int64_t>(s.ops.size());
  std::vector<int> references(s.tree.size(), 0);
  std::vector<bool> reachable(s.tree.size(), false);
  reachable[0] = true;
  for (size_t i = 0; i < s.tree.size(); ++i) {
    if (!reachable[i]) continue;
    const NodeSpec& node = s.tree[i];
    ++shape.modules;
    if (node.kind == "Expert") ++shape.modules;  // its linear
    shape.frozen |= !node.frozen.empty();
    shape.experts |= node.kind == "Expert";
    if (node.kind == "Offset") {
      int64_t numel = 1;
      for (int64_t d : node.shape) numel *= d;
      shape.zero_size |= numel == 0;
    }
    for (int c : node.children) {
      reachable[static_cast<size_t>(c)] = true;
      shape.tied |= ++references[static_cast<size_t>(c)] > 1;
    }
  }
  return shape;
}

std::string describe(const Scenario& s) {
  std::ostringstream out;
  out << fmt::format("world {}, seed {}, features {}, batch {}, {} lr {}, placement {}\n", s.world_size,
                     s.seed, s.features, s.batch, s.optimizer, s.lr, zero3::describe(s.placement));
  std::function<void(int, int, std::vector<int>&)> show = [&](int index, int depth, std::vector<int>& seen) {
    const NodeSpec& node = s.tree[static_cast<size_t>(index)];
    out << std::string(2 * depth + 2, ' ') << "[" << index << "] " << node.kind;
    if (node.kind == "Offset") out << fmt::format(" shape [{}]", fmt::join(node.shape, ","));
    if (std::count(seen.begin(), seen.end(), index)) {
      out << " (shared, see above)\n";
      return;
    }
    seen.push_back(index);
    for (const auto& e : node.attrs) out << " ." << e.name << "=" << e.value.repr();
    for (const auto& [name, entries] : node.param_attrs)
      for (const auto& e : entries) out << " " << name << "." << e.name << "=" << e.value.repr();
    if (!node.frozen.empty()) out << fmt::format(" frozen {}", fmt::join(node.frozen, ","));
    out << "\n";
    for (int c : node.children) show(c, depth + 1, seen);
  };
  std::vector<int> seen;
  show(0, 0, seen);
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op& op = s.ops[i];
    out << fmt::format("  #{} {}", i, to_string(op.kind));
    if (op.kind == OpKind::initialize)
      out << fmt::format(" (optimizer {}, target '{}')", op.optimizer, op.target);
    if (op.kind == OpKind::forward) out << fmt::format(" route [{}]", fmt::join(op.route, ","));
    if (op.kind == OpKind::set_attr || op.kind == OpKind::del_attr)
      out << fmt::format(" '{}'{}{} .{}", op.module, op.param.empty() ? "" : " param ", op.param, op.name);
    if (op.kind == OpKind::set_attr) out << " = " << op.value.repr();
    out << "\n";
  }
  return out.str();
}

}  // namespace zerocheck
