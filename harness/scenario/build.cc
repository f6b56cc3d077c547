// From a Scenario to modules: build_tree through the schema's builders, and the shape summary.
#include "harness/scenario/scenario.h"

#include "engine/layers.h"

#include <functional>
#include <limits>

namespace zerocheck {
namespace {

// Returns the module of `module`'s subtree that registers the parameter named `qualified` from
// `module` ("linear.weight"), and the parameter's local name there: the names are compared whole,
// as named_parameters() makes them, never cut.
std::pair<zero3::Module*, std::string> owner_of(const std::shared_ptr<zero3::Module>& module,
                                                const std::string& qualified) {
  for (const auto& [path, sub] : zero3::unique_modules(module))
    for (const auto& item : sub->own_parameters())
      if ((path.empty() ? item.first : path + "." + item.first) == qualified) return {sub.get(), item.first};
  throw ScenarioError(module->kind() + " has no parameter '" + qualified + "'");
}

}  // namespace

const char* to_string(OpKind kind) { return row_of(kind).name; }

const schema::OpRow& row_of(OpKind kind) { return schema::op_rows().at(static_cast<size_t>(kind)); }

std::shared_ptr<zero3::Module> build_tree(const Scenario& s) {
  validate(s);
  std::vector<std::shared_ptr<zero3::Module>> built(s.tree.size());
  // Children come after parents, so build from the last node back to the root.
  for (size_t k = s.tree.size(); k-- > 0;) {
    const NodeSpec& node = s.tree[k];
    std::vector<std::shared_ptr<zero3::Module>> children;
    for (int c : node.children) children.push_back(built[static_cast<size_t>(c)]);
    std::shared_ptr<zero3::Module> m = schema::find_node_kind(node.kind)->build(node, s.features, children);
    for (const auto& e : node.attrs) m->attrs().set(e.name, e.value);
    for (const auto& [name, entries] : node.param_attrs) {
      auto [owner, local] = owner_of(m, name);
      for (const auto& e : entries) owner->param_attrs(local).set(e.name, e.value);
    }
    for (const auto& name : node.frozen) {
      auto [owner, local] = owner_of(m, name);
      owner->named_parameters(false)[local].set_requires_grad(false);
    }
    built[k] = m;
  }
  zero3::init_parameters(*built[0], s.seed);
  return built[0];
}

zero3::Route route_of(const Op& op) { return zero3::Route::cyclic(op.route); }

float injected_value(const Op& op) {
  const std::string& value = std::get<std::string>(op.value.storage());
  if (value == "nan") return std::numeric_limits<float>::quiet_NaN();
  return value == "-inf" ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
}

std::vector<std::string> parameter_paths(const Scenario& s) {
  // The module paths of SCENARIO_FORMAT.md ("Nodes"), walked as unique_modules walks the built
  // tree: pre-order, a node seen before (shared) not again. From the specs, so validate() can
  // name a parameter without building modules.
  std::vector<std::string> out;
  std::vector<bool> seen(s.tree.size(), false);
  const auto join = [](const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; };
  std::function<void(size_t, const std::string&)> visit = [&](size_t index, const std::string& path) {
    if (index >= s.tree.size() || seen[index]) return;
    seen[index] = true;
    const NodeSpec& node = s.tree[index];
    for (const auto& local : schema::parameter_names(node)) out.push_back(join(path, local));
    const bool moe = schema::find_node_kind(node.kind) != nullptr &&
                     schema::find_node_kind(node.kind)->children == schema::Children::at_least_one;
    for (size_t c = 0; c < node.children.size(); ++c)
      visit(static_cast<size_t>(node.children[c]), join(path, (moe ? "experts." : "") + std::to_string(c)));
  };
  if (!s.tree.empty()) visit(0, "");
  return out;
}

ScenarioShape shape_of(const Scenario& s) {
  ScenarioShape shape;
  // Counted on the built tree: a node may hold submodules of its own (an Expert's linear).
  shape.modules = static_cast<int64_t>(zero3::unique_modules(build_tree(s)).size());
  shape.ops = static_cast<int64_t>(s.ops.size());
  std::vector<int> references(s.tree.size(), 0);
  std::vector<bool> reachable(s.tree.size(), false);
  reachable[0] = true;
  for (size_t i = 0; i < s.tree.size(); ++i) {
    if (!reachable[i]) continue;
    const NodeSpec& node = s.tree[i];
    shape.frozen |= !node.frozen.empty();
    int64_t numel = 1;
    for (int64_t d : node.shape) numel *= d;
    shape.zero_size |= !node.shape.empty() && numel == 0;
    for (int c : node.children) {
      reachable[static_cast<size_t>(c)] = true;
      shape.tied |= ++references[static_cast<size_t>(c)] > 1;
      // An expert: a child of a kind that needs at least one child (an MoE).
      shape.experts |= schema::find_node_kind(node.kind)->children == schema::Children::at_least_one;
    }
  }
  return shape;
}

}  // namespace zerocheck
