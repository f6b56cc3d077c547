// describe(): a compact, readable rendering of a scenario for reports and failures.
#include "harness/scenario/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <sstream>

namespace zerocheck {

std::string describe(const Scenario& s) {
  std::ostringstream out;
  out << fmt::format("world {}, seed {}, features {}, batch {}, {} lr {}, placement {}{}\n", s.world_size,
                     s.seed, s.features, s.batch, s.optimizer, s.lr, zero3::describe(s.placement),
                     s.construct == "eager" ? "" : ", construct " + s.construct);
  std::function<void(int, int, std::vector<int>&)> show = [&](int index, int depth, std::vector<int>& seen) {
    const NodeSpec& node = s.tree[static_cast<size_t>(index)];
    out << std::string(2 * depth + 2, ' ') << "[" << index << "] " << node.kind;
    const auto& keys = schema::find_node_kind(node.kind)->keys;
    if (std::count(keys.begin(), keys.end(), "shape")) out << fmt::format(" shape [{}]", fmt::join(node.shape, ","));
    if (std::count(keys.begin(), keys.end(), "bias") && !node.bias) out << " bias off";
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
      out << fmt::format(" (optimizer {}, target '{}'{})", op.optimizer, op.target,
                         op.config_error == schema::ConfigErrorKind::none
                             ? ""
                             : std::string(", invalid config ") + schema::to_string(op.config_error));
    if (op.kind == OpKind::forward) out << fmt::format(" route [{}]", fmt::join(op.route, ","));
    if (op.kind == OpKind::set_attr || op.kind == OpKind::del_attr)
      out << fmt::format(" '{}'{}{} .{}", op.module, op.param.empty() ? "" : " param ", op.param, op.name);
    if (op.kind == OpKind::set_attr) out << " = " << op.value.repr();
    if (op.kind == OpKind::inject)
      out << fmt::format(" {} into rank {}'s {}{}", std::get<std::string>(op.value.storage()), op.rank, op.into,
                         op.param.empty() ? "" : " of " + op.param);
    if (op.tag) out << fmt::format(" tag '{}'", *op.tag);
    if (op.kind == OpKind::load && op.module_only) out << " module only";
    else if (op.kind == OpKind::load && !op.optimizer_states) out << " without optimizer states";
    if (op.world_size != 0) out << fmt::format(" (and into a world of {})", op.world_size);
    if (op.kind == OpKind::gather)
      out << fmt::format(" '{}' modifier rank {} scale {}", op.module,
                         op.modifier_rank ? std::to_string(*op.modifier_rank) : "none", op.scale);
    out << "\n";
  }
  return out.str();
}

}  // namespace zerocheck
