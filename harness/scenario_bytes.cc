#include "harness/scenario_bytes.h"

#include "engine/errors.h"
#include "harness/collision_names.h"
#include "harness/generators.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace zerocheck {
namespace {

using ModulePaths = std::vector<std::pair<std::string, std::vector<std::string>>>;

Op op_of(OpKind kind) {
  Op op;
  op.kind = kind;
  return op;
}

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size, const DecodeLimits& limits) : in_(data, size), limits_(limits) {}

  Scenario scenario() {
    Scenario s;
    s.world_size = in_.ConsumeIntegralInRange(1, kMaxDecodedWorld);
    if (limits_.world > 0) s.world_size = limits_.world;
    s.seed = in_.ConsumeIntegralInRange<uint64_t>(0, 999);
    s.features = in_.ConsumeIntegralInRange<int64_t>(1, 4);
    s.batch = in_.ConsumeIntegralInRange<int64_t>(1, 2);
    s.optimizer = pick<std::string>({{3, "adam"}, {1, "sgd"}});
    s.lr = pick<double>({{1, 0.01}, {1, 0.1}});
    s.config.zero_optimization.stage3_param_persistence_threshold =
        pick<int64_t>({{5, 0}, {2, 4}, {1, 100000}});
    s.config.gradient_accumulation_steps = pick<int64_t>({{5, 1}, {1, 2}});
    enum Placement { none, attr_mod_id, by_map };
    const Placement placement = pick<Placement>({{3, none}, {2, attr_mod_id}, {1, by_map}});
    subtree(s, in_.ConsumeIntegralInRange(1, 4), placement == attr_mod_id);

    const ModulePaths modules = module_paths_of(s);
    if (placement == attr_mod_id) {
      s.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
      s.placement.attr = "id";
    } else if (placement == by_map) {
      s.placement.kind = zero3::PlacementSpec::Kind::map;
      for (const auto& [path, params] : modules)  // place some experts explicitly
        if (path.find("experts.") != std::string::npos && path.find("linear") == std::string::npos &&
            in_.ConsumeBool())
          // Drawn from 0..3 whatever the world, so a fixed world reads the same bytes.
          s.placement.owners[path] = in_.ConsumeIntegralInRange(0, 3) % s.world_size;
    }

    // Most scripts start by initializing; whole training steps come as a unit often enough
    // that state builds up between saves, loads and repeated initializes, and a save right
    // before a load comes as a unit too: drawn as two single operations, a checkpoint round trip
    // after a step was too rare for a fuzzer starting from an empty corpus to reach in minutes.
    if (pick<bool>({{4, true}, {1, false}}) && limits_.max_ops > 0) s.ops.push_back(op_of(OpKind::initialize));
    enum Unit { single, training_step, checkpoint_round_trip };
    while (s.ops.size() < limits_.max_ops && in_.remaining_bytes() > 0) {
      std::vector<Op> unit;
      switch (pick<Unit>({{5, single}, {2, training_step}, {1, checkpoint_round_trip}})) {
        case single: unit = {op(modules)}; break;
        case training_step: {
          Op forward = op_of(OpKind::forward);
          forward.route = route();
          unit = {forward, op_of(OpKind::backward), op_of(OpKind::step)};
          break;
        }
        case checkpoint_round_trip: unit = {op_of(OpKind::save), op_of(OpKind::load)}; break;
      }
      for (const Op& o : unit)
        if (s.ops.size() < limits_.max_ops) s.ops.push_back(o);
    }
    return s;
  }

 private:
  // Returns one of `choices` with probability proportional to its weight; the first one when
  // the input is exhausted, so tables list their smallest choice first.
  template <class T>
  T pick(std::initializer_list<std::pair<int, T>> choices) {
    int total = 0;
    for (const auto& c : choices) total += c.first;
    int r = in_.ConsumeIntegralInRange(0, total - 1);
    for (const auto& c : choices) {
      if (r < c.first) return c.second;
      r -= c.first;
    }
    return choices.begin()->second;
  }

  std::string name() {
    const auto& dictionary = collision_names();
    if (pick<bool>({{4, true}, {1, false}}))
      return dictionary[in_.ConsumeIntegralInRange<size_t>(0, dictionary.size() - 1)].name;
    // An ordinary name: lower-case letters, as the generators draw them.
    std::string out;
    for (char c : in_.ConsumeRandomLengthString(12)) out.push_back(static_cast<char>('a' + static_cast<uint8_t>(c) % 26));
    return out.empty() ? "x" : out;
  }

  zero3::AttrValue value() {
    using V = zero3::AttrValue;
    enum Kind { integer, string, boolean, none, floating, list, tensor };
    switch (pick<Kind>({{6, integer}, {2, string}, {1, boolean}, {1, none}, {1, floating}, {1, list}, {1, tensor}})) {
      case integer: return V(in_.ConsumeIntegralInRange<int64_t>(0, 63));
      case string: return V(pick<std::string>({{1, "mine"}, {1, "expert"}, {1, ""}, {1, "\xce\xbb"}}));
      case boolean: return V(in_.ConsumeBool());
      case none: return V();
      case floating: return V(in_.ConsumeIntegralInRange(-40, 39) / 8.0);
      case list: {
        V::List items(in_.ConsumeIntegralInRange<size_t>(0, 4));
        for (auto& item : items) item = V(in_.ConsumeIntegralInRange<int64_t>(0, 8));
        return V(std::move(items));
      }
      case tensor: return V(at::arange(in_.ConsumeIntegralInRange(0, 3), at::kFloat));
    }
    return V();
  }

  std::vector<AttrEntry> attrs(int max) {
    std::vector<AttrEntry> out;
    const int count = in_.ConsumeIntegralInRange(0, max);
    for (int i = 0; i < count; ++i) {
      std::string n = name();
      zero3::AttrValue v = value();
      bool seen = false;
      for (const auto& e : out) seen |= e.name == n;
      if (!seen) out.push_back({std::move(n), std::move(v)});  // the first write of a name wins
    }
    return out;
  }

  NodeSpec leaf(bool expert_ids, bool in_moe) {
    NodeSpec node;
    node.kind = in_moe ? pick<std::string>({{3, "Expert"}, {1, "Linear"}, {1, "Offset"}, {1, "Tanh"}})
                       : pick<std::string>({{4, "Linear"}, {2, "LayerNorm"}, {1, "Tanh"}, {3, "Offset"}, {3, "Expert"}});
    if (node.kind == "Linear") node.bias = pick<bool>({{4, true}, {1, false}});
    if (node.kind == "Offset")
      node.shape = pick<std::vector<int64_t>>(
          {{2, {13}}, {2, {1}}, {2, {0}}, {1, {3, 5}}, {1, {2, 0, 3}}, {1, {7}}, {1, {}}, {1, {4, 4}}});
    node.attrs = attrs(3);
    // Under `attr_mod id` placement experts carry the user's `id`: the seed bug's collision.
    if (node.kind == "Expert" && expert_ids && pick<bool>({{9, true}, {1, false}})) {
      const int64_t id = in_.ConsumeIntegralInRange<int64_t>(0, 11);
      std::vector<AttrEntry> rest;
      for (auto& e : node.attrs)
        if (e.name != "id") rest.push_back(std::move(e));
      node.attrs = {{"id", zero3::AttrValue(id)}};
      for (auto& e : rest) node.attrs.push_back(std::move(e));
    }
    for (const auto& param : param_names(node)) {
      if (pick<bool>({{3, false}, {1, true}})) {
        auto entries = attrs(2);
        if (!entries.empty()) node.param_attrs[param] = std::move(entries);
      }
      if (pick<bool>({{7, false}, {1, true}})) node.frozen.push_back(param);
    }
    return node;
  }

  // Appends a subtree in pre-order; children always come after their parent.
  void subtree(Scenario& s, int depth, bool expert_ids) {
    const size_t me = s.tree.size();
    s.tree.emplace_back();
    // A container needs room for at least one child.
    const bool container = depth > 1 && s.tree.size() < limits_.max_nodes && pick<bool>({{2, false}, {3, true}});
    if (!container) {
      s.tree[me] = leaf(expert_ids, false);
      return;
    }
    NodeSpec node;
    node.kind = pick<std::string>({{3, "Sequential"}, {1, "ModuleList"}, {2, "MoE"}});
    node.attrs = attrs(2);
    const int n = in_.ConsumeIntegralInRange(1, 3);
    const int tie = pick<bool>({{5, false}, {1, true}}) ? in_.ConsumeIntegralInRange(0, n - 1) : -1;
    for (int i = 0; i < n && s.tree.size() < limits_.max_nodes; ++i) {
      const int child = static_cast<int>(s.tree.size());
      node.children.push_back(child);
      if (i == tie) node.children.push_back(child);  // the same module again: tied weights
      if (node.kind == "MoE") s.tree.push_back(leaf(expert_ids, true));
      else subtree(s, depth - 1, expert_ids);
    }
    s.tree[me] = std::move(node);
  }

  std::vector<int64_t> route() {
    std::vector<int64_t> out(in_.ConsumeIntegralInRange<size_t>(0, 2));
    for (auto& choice : out) choice = in_.ConsumeIntegralInRange<int64_t>(0, 3);
    return out;
  }

  Op op(const ModulePaths& modules) {
    Op op;
    op.kind = pick<OpKind>({{6, OpKind::forward}, {3, OpKind::initialize}, {5, OpKind::backward}, {5, OpKind::step},
                            {1, OpKind::zero_grad}, {3, OpKind::set_attr}, {1, OpKind::del_attr},
                            {1, OpKind::release}, {1, OpKind::save}, {1, OpKind::load}, {1, OpKind::destroy}});
    const auto& [path, params] = modules[in_.ConsumeIntegralInRange<size_t>(0, modules.size() - 1)];
    switch (op.kind) {
      case OpKind::initialize:
        op.optimizer = pick<std::string>({{1, "same"}, {1, "fresh"}});
        op.target = pick<bool>({{3, true}, {1, false}}) ? "" : path;
        break;
      case OpKind::forward: op.route = route(); break;
      case OpKind::set_attr:
      case OpKind::del_attr:
        op.module = path;
        if (!params.empty() && pick<bool>({{3, false}, {1, true}}))
          op.param = params[in_.ConsumeIntegralInRange<size_t>(0, params.size() - 1)];
        op.name = name();
        if (op.kind == OpKind::set_attr) op.value = value();
        break;
      default: break;
    }
    return op;
  }

  FuzzedDataProvider in_;
  const DecodeLimits limits_;
};

}  // namespace

void DecodeLimits::validate() const {
  auto bad = [](const char* field, int64_t value, const std::string& range) {
    throw zero3::UsageError(fmt::format("decode limit {} = {} is outside {}", field, value, range));
  };
  if (world < 0 || world > kMaxDecodedWorld) bad("world", world, fmt::format("0..{} (0: decoded)", kMaxDecodedWorld));
  if (max_nodes < 1 || max_nodes > kMaxDecodedNodes)
    bad("max_nodes", static_cast<int64_t>(max_nodes), fmt::format("1..{}", kMaxDecodedNodes));
  if (max_ops > kMaxDecodedOps) bad("max_ops", static_cast<int64_t>(max_ops), fmt::format("0..{}", kMaxDecodedOps));
}

Scenario scenario_from_bytes(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  limits.validate();
  return Decoder(data, size, limits).scenario();
}

}  // namespace zerocheck
