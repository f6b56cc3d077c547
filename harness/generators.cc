#include "harness/generators.h"

#include "harness/collision_names.h"

#include <ATen/ATen.h>

namespace zerocheck {
namespace {

using rc::Gen;
namespace gen = rc::gen;

// A subtree before flattening into the scenario's node list.
struct Subtree {
  NodeSpec node;                  // children filled in when flattened
  std::vector<Subtree> children;
  int tie = -1;                   // >= 0: that child is listed twice (tied weights)
};

Gen<std::string> gen_name() {
  std::vector<std::string> dictionary;
  for (const auto& n : collision_names()) dictionary.push_back(n.name);
  return gen::weightedOneOf<std::string>({
      {4, gen::elementOf(dictionary)},
      {1, gen::map(gen::container<std::string>(gen::inRange('a', static_cast<char>('z' + 1))),
                   [](std::string s) { return s.empty() ? std::string("x") : s.substr(0, 12); })},
  });
}

Gen<zero3::AttrValue> gen_value() {
  using V = zero3::AttrValue;
  return gen::weightedOneOf<V>({
      {6, gen::map(gen::inRange<int64_t>(0, 64), [](int64_t v) { return V(v); })},
      {2, gen::map(gen::elementOf(std::vector<std::string>{"mine", "expert", "", "\xce\xbb"}),
                   [](std::string s) { return V(s); })},
      {1, gen::map(gen::arbitrary<bool>(), [](bool b) { return V(b); })},
      {1, gen::just(V())},
      {1, gen::map(gen::inRange(-40, 40), [](int v) { return V(v / 8.0); })},
      {1, gen::map(gen::container<std::vector<int64_t>>(gen::inRange<int64_t>(0, 9)),
                   [](std::vector<int64_t> v) {
                     V::List list(v.begin(), v.begin() + std::min<size_t>(v.size(), 4));
                     return V(list);
                   })},
      {1, gen::map(gen::inRange(0, 4), [](int n) { return V(at::arange(n, at::kFloat)); })},
  });
}

Gen<std::vector<AttrEntry>> gen_attrs(int max) {
  return gen::map(gen::container<std::vector<std::pair<std::string, zero3::AttrValue>>>(
                      gen::pair(gen_name(), gen_value())),
                  [max](std::vector<std::pair<std::string, zero3::AttrValue>> pairs) {
                    std::vector<AttrEntry> out;
                    for (auto& [name, value] : pairs) {
                      if (static_cast<int>(out.size()) >= max) break;
                      bool seen = false;
                      for (auto& e : out) seen |= e.name == name;
                      if (!seen) out.push_back({name, value});
                    }
                    return out;
                  });
}

Gen<Subtree> gen_leaf(bool expert_ids) {
  return gen::exec([expert_ids] {
    Subtree t;
    t.node.kind = *gen::weightedElement<std::string>(
        {{4, "Linear"}, {2, "LayerNorm"}, {1, "Tanh"}, {3, "Offset"}, {3, "Expert"}});
    if (t.node.kind == "Linear") t.node.bias = *gen::weightedElement<bool>({{4, true}, {1, false}});
    if (t.node.kind == "Offset")
      t.node.shape = *gen::weightedElement<std::vector<int64_t>>(
          {{2, {13}}, {2, {1}}, {2, {0}}, {1, {3, 5}}, {1, {2, 0, 3}}, {1, {7}}, {1, {}}, {1, {4, 4}}});
    t.node.attrs = *gen_attrs(3);
    if (t.node.kind == "Expert" && expert_ids && *gen::weightedElement<bool>({{9, true}, {1, false}})) {
      int64_t id = *gen::inRange<int64_t>(0, 12);
      t.node.attrs.erase(std::remove_if(t.node.attrs.begin(), t.node.attrs.end(),
                                        [](const AttrEntry& e) { return e.name == "id"; }),
                         t.node.attrs.end());
      t.node.attrs.insert(t.node.attrs.begin(), {"id", zero3::AttrValue(id)});
    }
    for (const auto& name : param_names(t.node)) {
      if (*gen::weightedElement<bool>({{3, false}, {1, true}})) t.node.param_attrs[name] = *gen_attrs(2);
      if (t.node.param_attrs.count(name) && t.node.param_attrs[name].empty()) t.node.param_attrs.erase(name);
      if (*gen::weightedElement<bool>({{7, false}, {1, true}})) t.node.frozen.push_back(name);
    }
    return t;
  });
}

Gen<Subtree> gen_subtree(int depth, bool expert_ids) {
  if (depth <= 1) return gen_leaf(expert_ids);
  return gen::weightedOneOf<Subtree>({
      {2, gen_leaf(expert_ids)},
      {3, gen::exec([depth, expert_ids] {
         Subtree t;
         t.node.kind = *gen::weightedElement<std::string>({{3, "Sequential"}, {1, "ModuleList"}, {2, "MoE"}});
         t.node.attrs = *gen_attrs(2);
         const int n = *gen::inRange(1, 4);
         for (int i = 0; i < n; ++i)
           t.children.push_back(t.node.kind == "MoE" ? *gen_leaf(expert_ids) : *gen_subtree(depth - 1, expert_ids));
         if (t.node.kind == "MoE")  // experts are Experts, mostly
           for (auto& c : t.children)
             if (c.node.kind != "Expert" && *gen::weightedElement<bool>({{3, true}, {1, false}})) c.node.kind = "Expert",
                   c.node.shape.clear(), c.node.param_attrs.clear(), c.node.frozen.clear(), c.node.bias = true;
         if (*gen::weightedElement<bool>({{5, false}, {1, true}})) t.tie = *gen::inRange(0, n);
         return t;
       })},
  });
}

void flatten(const Subtree& t, std::vector<NodeSpec>& out) {
  const size_t me = out.size();
  out.push_back(t.node);
  out[me].children.clear();
  for (size_t i = 0; i < t.children.size(); ++i) {
    const int child = static_cast<int>(out.size());
    out[me].children.push_back(child);
    if (static_cast<int>(i) == t.tie) out[me].children.push_back(child);  // the same module again
    flatten(t.children[i], out);
  }
}

Gen<Op> gen_op(const std::vector<std::pair<std::string, std::vector<std::string>>>& modules) {
  return gen::exec([modules] {
    Op op;
    op.kind = *gen::weightedElement<OpKind>({{3, OpKind::initialize}, {6, OpKind::forward}, {5, OpKind::backward},
                                             {5, OpKind::step}, {1, OpKind::zero_grad}, {3, OpKind::set_attr},
                                             {1, OpKind::del_attr}, {1, OpKind::release}, {1, OpKind::save},
                                             {1, OpKind::load}, {1, OpKind::destroy}});
    const auto& [path, params] = *gen::elementOf(modules);
    switch (op.kind) {
      case OpKind::initialize:
        op.optimizer = *gen::elementOf(std::vector<std::string>{"same", "fresh"});
        op.target = *gen::weightedElement<bool>({{3, true}, {1, false}}) ? "" : path;
        break;
      case OpKind::forward:
        op.route = *gen::container<std::vector<int64_t>>(*gen::inRange(0, 3), gen::inRange<int64_t>(0, 4));
        break;
      case OpKind::set_attr:
      case OpKind::del_attr:
        op.module = path;
        if (!params.empty() && *gen::weightedElement<bool>({{3, false}, {1, true}})) op.param = *gen::elementOf(params);
        op.name = *gen_name();
        if (op.kind == OpKind::set_attr) op.value = *gen_value();
        break;
      default: break;
    }
    return op;
  });
}

}  // namespace

std::vector<std::pair<std::string, std::vector<std::string>>> module_paths_of(const Scenario& s) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& entry : zero3::unique_modules(build_tree(s))) {
    std::vector<std::string> params;
    for (const auto& item : entry.module->named_parameters(false)) params.push_back(item.key());
    out.push_back({entry.path, params});
  }
  return out;
}

rc::Gen<Scenario> gen_scenario(const GeneratorOptions& options) {
  return gen::exec([options] {
    Scenario s;
    s.world_size = options.world_size > 0 ? options.world_size : *gen::inRange(1, 5);
    s.seed = *gen::inRange<uint64_t>(0, 1000);
    s.features = *gen::inRange<int64_t>(1, 5);
    s.batch = *gen::inRange<int64_t>(1, 3);
    s.optimizer = *gen::weightedElement<std::string>({{3, "adam"}, {1, "sgd"}});
    s.lr = *gen::elementOf(std::vector<double>{0.01, 0.1});
    s.config.zero_optimization.stage3_param_persistence_threshold =
        *gen::weightedElement<int64_t>({{5, 0}, {2, 4}, {1, 100000}});
    s.config.gradient_accumulation_steps = *gen::weightedElement<int64_t>({{5, 1}, {1, 2}});
    const int placement = *gen::weightedElement<int>({{3, 0}, {2, 1}, {1, 2}});
    const Subtree root = *gen_subtree(*gen::inRange(1, options.max_depth + 1), placement == 1);
    flatten(root, s.tree);
    const auto modules = module_paths_of(s);
    if (placement == 1) {
      s.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
      s.placement.attr = "id";
    } else if (placement == 2) {
      s.placement.kind = zero3::PlacementSpec::Kind::map;
      for (const auto& [path, params] : modules)  // place some experts explicitly
        if (path.find("experts.") != std::string::npos && path.find("linear") == std::string::npos &&
            *gen::arbitrary<bool>())
          s.placement.owners[path] = *gen::inRange<int64_t>(0, s.world_size);
    }
    const int n = *gen::inRange(0, std::min(options.max_ops, 64) + 1);
    if (n > 0 && *gen::weightedElement<bool>({{4, true}, {1, false}})) s.ops.push_back(Op{OpKind::initialize});
    // Whole training steps (forward, backward, step) come as a unit often enough that state
    // builds up between saves, loads and repeated initializes.
    const auto chunks = *gen::container<std::vector<std::vector<Op>>>(
        static_cast<size_t>(n), gen::weightedOneOf<std::vector<Op>>({
                                    {5, gen::map(gen_op(modules), [](Op op) { return std::vector<Op>{op}; })},
                                    {2, gen::map(gen::container<std::vector<int64_t>>(gen::inRange<int64_t>(0, 4)),
                                                 [](std::vector<int64_t> route) {
                                                   Op forward{OpKind::forward};
                                                   forward.route = route;
                                                   return std::vector<Op>{forward, Op{OpKind::backward}, Op{OpKind::step}};
                                                 })},
                                }));
    for (const auto& chunk : chunks)
      for (const Op& op : chunk)
        if (static_cast<int>(s.ops.size()) < n) s.ops.push_back(op);
    return s;
  });
}

}  // namespace zerocheck
