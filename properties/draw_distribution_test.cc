// The rapidcheck generators and the fuzz decoder draw the same language with the same
// distribution: draw_scenario (harness/scenario/draw/) over an RcChooser and over an FdpChooser fed
// uniform random bytes, N scenarios each, compared classifier by classifier.
//
// Both runs cap the operation list at the same max_ops with budgets that reach it (the RcChooser's
// unit budget is large, the byte strings long), so the only chooser-specific rule, when to stop
// drawing operation units, does not enter; every other choice comes from one table.
#include <gtest/gtest.h>

#include "harness/scenario/draw/draw_scenario.h"
#include "harness/scenario/draw/fdp_chooser.h"
#include "harness/scenario/draw/rc_chooser.h"
#include "harness/scenario/scenario.h"

#include <fmt/format.h>
#include <rapidcheck.h>

#include <cmath>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace zerocheck {
namespace {

constexpr int kCases = 20000;
constexpr size_t kMaxOps = 24;
constexpr size_t kInputBytes = 1024;  // a draw reads a few hundred: the cap, not the input, ends it
constexpr double kSigmas = 4.5;

// Per scenario, each classifier's value in [0, 1]: an indicator, or a share of its ops or nodes.
using Classes = std::map<std::string, double>;

Classes classify(const Scenario& s) {
  Classes out;
  const ScenarioShape shape = shape_of(s);
  out["tied weights"] = shape.tied;
  out["frozen parameters"] = shape.frozen;
  out["zero-size parameter"] = shape.zero_size;
  out["experts"] = shape.experts;
  for (auto kind : {zero3::PlacementSpec::Kind::none, zero3::PlacementSpec::Kind::attr_mod,
                    zero3::PlacementSpec::Kind::map})
    out[fmt::format("placement {}", zero3::to_string(kind))] = s.placement.kind == kind;
  out["placement map owner"] = !s.placement.owners.empty();
  for (const auto& row : schema::optimizers()) out[fmt::format("optimizer {}", row.kind)] = s.optimizer == row.kind;
  for (int w = 1; w <= kMaxDrawnWorld; ++w) out[fmt::format("world {}", w)] = s.world_size == w;
  out["attr_mod expert with id"] = false;
  for (const auto& node : s.tree)
    if (s.placement.kind == zero3::PlacementSpec::Kind::attr_mod && !node.attrs.empty() && node.attrs[0].name == "id")
      out["attr_mod expert with id"] = true;
  for (const auto& kind : schema::node_kinds()) {
    double count = 0;
    for (const auto& node : s.tree) count += node.kind == kind.name;
    out[fmt::format("node share {}", kind.name)] = count / static_cast<double>(s.tree.size());
  }
  int initializes = 0;
  bool saved = false, save_then_load = false, load_elsewhere = false;
  for (const Op& op : s.ops) {
    initializes += op.kind == OpKind::initialize;
    saved |= op.kind == OpKind::save;
    save_then_load |= saved && op.kind == OpKind::load;
    load_elsewhere |= op.kind == OpKind::load && op.world_size != 0;
  }
  out["initialize first"] = !s.ops.empty() && s.ops[0].kind == OpKind::initialize;
  out["repeated initialize"] = initializes >= 2;
  out["save then load"] = save_then_load;
  out["load into a second world"] = load_elsewhere;
  for (size_t row = 0; row < schema::op_rows().size(); ++row) {
    double count = 0;
    for (const Op& op : s.ops) count += op.kind == static_cast<OpKind>(row);
    out[fmt::format("op share {}", schema::op_rows()[row].name)] =
        s.ops.empty() ? 0 : count / static_cast<double>(s.ops.size());
  }
  out["ops / max_ops"] = static_cast<double>(s.ops.size()) / kMaxOps;
  // The ZeRO knobs and gradient_clipping, drawn after the operations: at DeepSpeed's default, at
  // the smallest value the knob takes, or near one of the scenario's sizes (the rest).
  const zero3::ZeroOptimizationConfig& zero = s.config.zero_optimization;
#define ZEROCHECK_CLASSIFY_SIZE(key, def, lo, hi, doc)                                              \
  if (std::string_view(#key) != "stage" && std::string_view(#key) != "stage3_param_persistence_threshold") { \
    out["knob " #key " default"] = zero.key == (def);                                               \
    out["knob " #key " smallest"] = zero.key == (lo);                                               \
  }
  ZERO3_ZERO_INT_KEYS(ZEROCHECK_CLASSIFY_SIZE)
#undef ZEROCHECK_CLASSIFY_SIZE
#define ZEROCHECK_CLASSIFY_FLAG(key, def, doc) out["flag " #key " default"] = zero.key == (def);
  ZERO3_ZERO_BOOL_KEYS(ZEROCHECK_CLASSIFY_FLAG)
#undef ZEROCHECK_CLASSIFY_FLAG
  const auto& clip = s.config.precision.gradient_clipping;
  for (double value : {0.0, 1e-3, 0.1, 1.0, 100.0})
    out[fmt::format("gradient_clipping {}", value)] = clip && *clip == value;
  out["gradient_clipping absent"] = !clip;
  return out;
}

struct Moments {
  double sum = 0, sum_sq = 0;
  int n = 0;
  void add(double x) { sum += x, sum_sq += x * x, ++n; }
  double mean() const { return sum / n; }
  double variance() const { return std::max(0.0, sum_sq / n - mean() * mean()) * n / (n - 1); }
};

std::map<std::string, Moments> tally(const std::vector<Scenario>& scenarios) {
  std::map<std::string, Moments> out;
  for (const auto& s : scenarios)
    for (const auto& [name, value] : classify(s)) out[name].add(value);
  return out;
}

DrawLimits limits() {
  DrawLimits out;
  out.max_ops = kMaxOps;
  return out;
}

std::vector<Scenario> draw_with_rapidcheck() {
  const auto gen = rc::gen::exec([] {
    RcChooser chooser(1000000);  // a budget far past the cap
    return draw_scenario(chooser, limits());
  });
  std::vector<Scenario> out;
  for (int i = 0; i < kCases; ++i)
    out.push_back(gen(rc::Random(20261130ULL + static_cast<uint64_t>(i)), rc::kNominalSize).value());
  return out;
}

std::vector<Scenario> draw_with_fuzz_bytes() {
  std::mt19937 random(20261130);
  std::vector<Scenario> out;
  std::vector<uint8_t> bytes(kInputBytes);
  for (int i = 0; i < kCases; ++i) {
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    FdpChooser chooser(bytes.data(), bytes.size());
    out.push_back(draw_scenario(chooser, limits()));
  }
  return out;
}

// Each classifier's mean under both choosers must agree within kSigmas standard errors of the
// difference, sqrt(var_rc / n + var_fdp / n): for an indicator that is the binomial standard
// error sqrt(p (1 - p) / n) of each side; for a per-scenario share the sample variance also
// carries the correlation of operations within a scenario (a training step is three of them).
// At 4.5 sigma a row fails by chance with probability 7e-6 (about 6e-4 over the table's ~85 rows),
// and the seeds are fixed, so the test is deterministic; a weight changed in one chooser alone
// (forward 6 -> 5 of 28, a share moving by 0.03) fails it.
TEST(DrawDistribution, RapidcheckAndFuzzChoosersDrawTheSameLanguage) {
  const auto rc_tally = tally(draw_with_rapidcheck());
  const auto fdp_tally = tally(draw_with_fuzz_bytes());
  std::string table = fmt::format("{:<28} {:>8} {:>8} {:>8} {:>8}\n", "classifier", "rc", "fuzz", "|diff|", "bound");
  std::string failures;
  for (const auto& [name, rc] : rc_tally) {
    const Moments& fdp = fdp_tally.at(name);
    const double diff = std::abs(rc.mean() - fdp.mean());
    const double bound = kSigmas * std::sqrt(rc.variance() / rc.n + fdp.variance() / fdp.n);
    const bool ok = diff <= bound;
    const std::string line =
        fmt::format("{:<28} {:>8.4f} {:>8.4f} {:>8.4f} {:>8.4f}{}\n", name, rc.mean(), fdp.mean(), diff, bound, ok ? "" : "  FAIL");
    table += line;
    if (!ok) failures += line;
  }
  std::cout << fmt::format("{} scenarios per chooser, max_ops {}:\n", kCases, kMaxOps) << table;
  EXPECT_TRUE(failures.empty()) << "the choosers' distributions differ:\n" << failures;
}

// The sizes a scenario has, where DeepSpeed's bucket and prefetch arithmetic turns: each
// parameter's numel and its partition ceil(numel / W), and the running totals of the numels in
// the tree's pre-order and in reverse (a bucket filling in forward or in backward order).
std::set<int64_t> sizes_of(const Scenario& s) {
  std::vector<int64_t> numels;
  for (const auto& entry : zero3::unique_modules(build_tree(s)))
    for (const auto& [name, param] : entry.module->own_parameters()) numels.push_back(param.numel());
  std::set<int64_t> out;
  int64_t forward = 0, backward = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    out.insert(numels[i]);
    out.insert((numels[i] + s.world_size - 1) / s.world_size);
    out.insert(forward += numels[i]);
    out.insert(backward += numels[numels.size() - 1 - i]);
  }
  return out;
}

// The size knobs land where off-by-one bugs live (draw_scenario.cc, kSizeFrom), not uniformly
// over 1..5e8: a drawn value that is neither DeepSpeed's default nor the smallest the knob takes
// is on, one below or one above a size of its scenario, every time, and each of the three is
// drawn; defaults and other sizes are drawn too.
TEST(DrawDistribution, SizeKnobsLandOnJustBelowAndJustAboveTheScenariosSizes) {
  std::mt19937 random(20261204);
  std::vector<uint8_t> bytes(kInputBytes);
  int64_t knobs = 0, at_default = 0, smallest = 0, near = 0, on = 0, below = 0, above = 0;
  std::string elsewhere;
  for (int i = 0; i < 5000; ++i) {
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    FdpChooser chooser(bytes.data(), bytes.size());
    const Scenario s = draw_scenario(chooser, limits());
    const std::set<int64_t> sizes = sizes_of(s);
    const zero3::ZeroOptimizationConfig& zero = s.config.zero_optimization;
    const auto classify_knob = [&](const char* key, int64_t value, int64_t def, int64_t lo) {
      ++knobs;
      if (value == def) return void(++at_default);
      if (value == lo) return void(++smallest);
      const bool is_on = sizes.count(value) > 0, is_below = sizes.count(value + 1) > 0,
                 is_above = sizes.count(value - 1) > 0;
      if (!is_on && !is_below && !is_above) {
        if (elsewhere.size() < 2000) elsewhere += fmt::format("  case {}: {} = {}\n", i, key, value);
        return;
      }
      ++near, on += is_on, below += is_below, above += is_above;
    };
#define ZEROCHECK_CLASSIFY_KNOB(key, def, lo, hi, doc)                                              \
  if (std::string_view(#key) != "stage" && std::string_view(#key) != "stage3_param_persistence_threshold") \
    classify_knob(#key, zero.key, def, lo);
    ZERO3_ZERO_INT_KEYS(ZEROCHECK_CLASSIFY_KNOB)
#undef ZEROCHECK_CLASSIFY_KNOB
  }
  const auto share = [&](int64_t n) { return static_cast<double>(n) / static_cast<double>(knobs); };
  std::cout << fmt::format("{} size knobs drawn: default {:.3f}, smallest {:.3f}, near a size {:.3f} (on {:.3f}, "
                           "one below {:.3f}, one above {:.3f}; a value can be several)\n",
                           knobs, share(at_default), share(smallest), share(near), share(on), share(below), share(above));
  EXPECT_TRUE(elsewhere.empty()) << "knobs drawn away from every size of their scenario:\n" << elsewhere;
  // kSizeFrom's weights: 3 of 10 default, 1 smallest, 6 near a size (a scenario without
  // parameters falls back to the default); kOffByOne draws -1, 0, +1 alike.
  EXPECT_GT(share(at_default), 0.25);
  EXPECT_GT(share(smallest), 0.05);
  EXPECT_GT(share(near), 0.45);
  for (int64_t n : {on, below, above}) EXPECT_GT(share(n), 0.12);
}

// Every scenario both choosers draw is valid under every limit setting (validate() is the
// reader's check, so a scenario file of it reads back).
TEST(DrawDistribution, EveryDrawnScenarioIsValid) {
  std::mt19937 random(7);
  for (int i = 0; i < 200; ++i) {
    DrawLimits narrow;
    narrow.world = static_cast<int>(random() % (kMaxDrawnWorld + 1));
    narrow.max_nodes = 1 + random() % kMaxDrawnNodes;
    narrow.max_ops = random() % (kMaxDrawnOps + 1);
    narrow.max_depth = static_cast<int>(1 + random() % kMaxDrawnDepth);
    std::vector<uint8_t> bytes(random() % 600);
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    FdpChooser fdp(bytes.data(), bytes.size());
    const Scenario decoded = draw_scenario(fdp, narrow);
    EXPECT_NO_THROW(validate(decoded)) << describe(decoded);
    EXPECT_LE(decoded.tree.size(), narrow.max_nodes);
    EXPECT_LE(decoded.ops.size(), narrow.max_ops);
    const auto gen = rc::gen::exec([narrow] {
      RcChooser chooser(narrow.max_ops);
      return draw_scenario(chooser, narrow);
    });
    const Scenario drawn = gen(rc::Random(static_cast<uint64_t>(i)), i % 100).value();
    EXPECT_NO_THROW(validate(drawn)) << describe(drawn);
    EXPECT_LE(drawn.tree.size(), narrow.max_nodes);
    EXPECT_LE(drawn.ops.size(), narrow.max_ops);
    if (narrow.world > 0) {
      EXPECT_EQ(drawn.world_size, narrow.world);
    }
  }
}

}  // namespace
}  // namespace zerocheck
