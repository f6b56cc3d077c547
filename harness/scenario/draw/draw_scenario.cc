#include "harness/scenario/draw/draw_scenario.h"

#include "harness/scenario/draw/fdp_chooser.h"

#include "engine/errors.h"
#include "engine/layers.h"
#include "harness/scenario/collision_names.h"
#include "harness/scenario/schema.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zerocheck {
namespace {

namespace limits = schema::limits;

// An inclusive range of whole numbers, drawn uniformly.
struct Span {
  int64_t lo, hi;
};
constexpr bool within(Span span, const schema::Limit& limit) { return limit.lo <= span.lo && span.hi <= limit.hi; }

constexpr Span kSeed{0, 999};
constexpr Span kFeatures{1, 4};
constexpr Span kBatch{1, 2};
constexpr Span kChildren{1, 3};
constexpr Span kAttributesChildren{1, 4};  // 64 nodes within depth 5
constexpr Span kExpertId{0, 11};        // more ids than ranks: several experts per owner
constexpr Span kIntValue{0, 63};
constexpr Span kEighths{-40, 39};       // float values: these over 8, exact in binary
constexpr Span kListItems{0, 4};
constexpr Span kListValue{0, 8};
constexpr Span kTensorNumel{0, 3};
constexpr Span kLetters{1, 12};
constexpr Span kRouteLength{0, 2};
constexpr Span kRouteChoice{0, 3};
constexpr int kModuleAttrs = 3, kContainerAttrs = 2, kParamAttrs = 2;
static_assert(kMaxDrawnWorld <= limits::world_size.hi && kMaxAttributesWorld <= limits::world_size.hi &&
              kMaxAttributesNodes <= limits::nodes.hi && within(kSeed, limits::seed) &&
              within(kFeatures, limits::features) && within(kBatch, limits::batch) &&
              kMaxDrawnNodes <= limits::nodes.hi && kMaxDrawnOps <= limits::ops.hi &&
              within(kTensorNumel, limits::tensor_numel) && within(kListItems, limits::value_list_items) &&
              within(kRouteLength, limits::route_length) && within(kRouteChoice, limits::route_choice) &&
              kModuleAttrs <= limits::attr_entries.hi && kMaxDrawnWorld <= limits::world_size.hi);

// A weighted table; its first row is the smallest choice.
template <class T>
struct Row {
  int weight;
  T value;
};
template <class T>
const T& pick(Chooser& chooser, const std::vector<Row<T>>& table) {
  std::vector<int> weights;
  for (const auto& row : table) weights.push_back(row.weight);
  return table[chooser.weighted(weights)].value;
}

const std::vector<Row<double>> kLearningRates = {{1, 0.01}, {1, 0.1}};
const std::vector<Row<int64_t>> kPersistenceThresholds = {{5, 0}, {2, 4}, {1, 100000}};
const std::vector<Row<int64_t>> kAccumulationSteps = {{5, 1}, {1, 2}};
// DeepSpeed's size knobs (engine/config.h) are drawn where off-by-one bugs live: on, one below and
// one above a size the scenario has (a parameter's numel, its partition ceil(numel/W), a running
// total of numels as a bucket fills, in either order), not uniformly over 1..5e8; or left at the
// default; or at the smallest the knob takes.
enum class SizeFrom { default_value, numel, partition, running_total, smallest };
const std::vector<Row<SizeFrom>> kSizeFrom = {{3, SizeFrom::default_value}, {2, SizeFrom::numel},
                                              {2, SizeFrom::partition}, {2, SizeFrom::running_total},
                                              {1, SizeFrom::smallest}};
const std::vector<Row<int64_t>> kOffByOne = {{1, 0}, {1, -1}, {1, 1}};
// A flag keeps DeepSpeed's default first (the smallest choice), else the other value.
const std::vector<Row<bool>> kFlagKeepsDefault = {{3, true}, {1, false}};
// gradient_clipping: absent first (the replayed version's default: 0 here and on v0.14.5, 1.0 on
// master), else off, or a bound that clips every step (1e-3: these models' gradient norms are
// 0.01-10), one that clips some steps, master's default, and one that never clips.
const std::vector<Row<std::optional<double>>> kGradientClipping = {
    {4, std::nullopt}, {1, 0.0}, {2, 1e-3}, {1, 0.1}, {1, 1.0}, {1, 100.0}};
// bf16.enabled: absent first (fp32), else bf16 parameters over fp32 masters, with the
// accumulation and communication dtypes absent (bf16, DeepSpeed's default under ZeRO) or written
// either way. Drawn only without a placement policy (the engine's placed modules are fp32 only).
const std::vector<Row<std::optional<bool>>> kBf16 = {{4, std::nullopt}, {1, true}};
const std::vector<Row<std::optional<std::string>>> kBf16Dtype = {
    {2, std::nullopt}, {1, std::string("fp32")}, {1, std::string("bf16")}};
// fp16.enabled, drawn only with DrawLimits::fp16 (`check --fp16`): mostly on, with the two dtypes
// absent (fp16, DeepSpeed's default) or written either way, and a scaler that is static,
// dynamic with the fp16 section's keys (small scales: an fp16 gradient of these models overflows
// past about 2^12), or dynamic with no key written (v0.14.5: 2^32 and hysteresis 1, so the
// first steps overflow and are skipped until the scale comes down).
const std::vector<Row<bool>> kFp16 = {{1, false}, {3, true}};
const std::vector<Row<std::optional<std::string>>> kFp16Dtype = {
    {2, std::nullopt}, {1, std::string("fp32")}, {1, std::string("fp16")}};
enum class Fp16Scaler { fixed, dynamic_keys, dynamic_defaults };
const std::vector<Row<Fp16Scaler>> kFp16Scalers = {
    {1, Fp16Scaler::fixed}, {4, Fp16Scaler::dynamic_keys}, {1, Fp16Scaler::dynamic_defaults}};
const std::vector<Row<int64_t>> kFp16ScalePowers = {{2, 4}, {1, 0}, {1, 8}, {1, 12}};
const std::vector<Row<int64_t>> kFp16MinScales = {{2, 1}, {1, 4}};
const std::vector<Row<double>> kFp16StaticScales = {{2, 1}, {1, 8}, {1, 3}};
const std::vector<Row<zero3::PlacementSpec::Kind>> kPlacements = {
    {3, zero3::PlacementSpec::Kind::none}, {2, zero3::PlacementSpec::Kind::attr_mod}, {1, zero3::PlacementSpec::Kind::map}};
// Offsets of odd shapes: one element, a prime, zero-size, fewer elements than some worlds have ranks.
const std::vector<Row<std::vector<int64_t>>> kOffsetShapes = {{2, {1}}, {1, {7}},    {2, {13}},      {2, {0}},
                                                              {1, {3, 5}}, {1, {4, 4}}, {1, {2, 0, 3}}, {1, {}}};
const std::vector<Row<bool>> kLinearBias = {{4, true}, {1, false}};
const std::vector<std::string> kStringValues = {"", "mine", "expert", "\xce\xbb"};
// Under `attr_mod id` placement an Expert mostly carries the user's `id`: the seed bug's collision.
const std::string kPlacementAttr = "id";
const std::vector<Row<bool>> kExpertCarriesId = {{9, true}, {1, false}};

enum class NameFrom { dictionary, letters };
const std::vector<Row<NameFrom>> kNames = {{4, NameFrom::dictionary}, {1, NameFrom::letters}};
enum class ValueKind { integer, string, boolean, none, floating, list, tensor };
const std::vector<Row<ValueKind>> kValues = {{6, ValueKind::integer}, {2, ValueKind::string}, {1, ValueKind::boolean},
                                             {1, ValueKind::none},    {1, ValueKind::floating}, {1, ValueKind::list},
                                             {1, ValueKind::tensor}};
// Most scripts start by initializing. Whole training steps come as a unit often enough that state
// builds up between saves, loads and repeated initializes, and a save right before its load comes
// as a unit too: as two single operations, a checkpoint round trip after a step was too rare for
// a fuzzer starting from an empty corpus to reach in minutes.
const std::vector<Row<bool>> kInitializeFirst = {{4, true}, {1, false}};
enum class Unit { single, training_step, checkpoint_round_trip };
const std::vector<Row<Unit>> kUnits = {{5, Unit::single}, {2, Unit::training_step}, {1, Unit::checkpoint_round_trip}};
// A checkpoint round trip's load sometimes also resumes the checkpoint in a world of another size
// (0: none, the smallest choice); up to the widest drawn world, one of them odd.
const std::vector<Row<int>> kLoadElsewhere = {{4, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}};
// Checkpoint tags: mostly none (the default tag, the latest on load), a few shared names so that a
// load names a save that is not the latest, and a default tag's own name.
const std::vector<Row<std::optional<std::string>>> kTags = {
    {4, std::nullopt}, {2, std::string("a")}, {1, std::string("b")}, {1, std::string("global_step1")}};
const std::vector<Row<bool>> kOptimizerStates = {{4, true}, {1, false}};
const std::vector<Row<bool>> kModuleOnly = {{5, false}, {1, true}};
// An initialize is now and then given an invalid config (none: the first, smallest choice).
const std::vector<Row<schema::ConfigErrorKind>> kConfigErrors = {
    {8, schema::ConfigErrorKind::none},
    {1, schema::ConfigErrorKind::train_batch_size},
    {1, schema::ConfigErrorKind::zero_stage},
    {1, schema::ConfigErrorKind::micro_batch},
    {1, schema::ConfigErrorKind::offload_optimizer}};
// A gather's edit: exact in binary, so the twin's product is the engine's.
const std::vector<Row<double>> kScales = {{2, 2.0}, {2, 0.5}, {1, -1.0}};
// Overflow protection (the zerocheck-only key, drawn last): none first; a dynamic scale that
// starts small (2^4, so a few overflows reach its floor) or at DeepSpeed's 2^16, with windows
// where a doubling happens within a scenario; or a static scale, 1 (protection alone), a power of
// two or 3 (whose unscale is not exact in binary: the twin must scale as the engine does).
enum class Protection { none, dynamic, fixed };
const std::vector<Row<Protection>> kProtections = {{2, Protection::none}, {2, Protection::dynamic}, {1, Protection::fixed}};
const std::vector<Row<double>> kScalePowers = {{2, 4}, {1, 0}, {1, 16}};
const std::vector<Row<double>> kScaleWindows = {{2, 2}, {1, 1}, {1, 3}, {1, 1000}};
const std::vector<Row<double>> kHysteresis = {{1, 2}, {1, 1}};
const std::vector<Row<double>> kMinScales = {{2, 1}, {1, 4}};
const std::vector<Row<double>> kStaticScales = {{2, 1}, {1, 4}, {1, 3}};
// Injections (drawn last too): mostly none; each is put right before a forward (input) or a
// backward (loss, gradient), so it is taken; a gradient one names a parameter of the tree.
const std::vector<Row<int64_t>> kInjections = {{3, 0}, {2, 1}, {1, 2}};
const std::vector<Row<std::string>> kInjectInto = {{1, "input"}, {1, "loss"}, {2, "gradient"}};
const std::vector<Row<std::string>> kNonFinite = {{2, "nan"}, {1, "inf"}, {1, "-inf"}};
enum class Target { root, the_module };
const std::vector<Row<Target>> kInitializeTargets = {{3, Target::root}, {1, Target::the_module}};

// The OpKind of schema::op_rows()[row]: OpKind is generated from ZEROCHECK_OPS, in its order.
OpKind op_kind_of_row(size_t row) {
  const auto kind = static_cast<OpKind>(row);
  assert(std::string_view(to_string(kind)) == schema::op_rows()[row].name);
  return kind;
}

bool takes_key(const schema::NodeKind& kind, std::string_view key) {
  return std::find(kind.keys.begin(), kind.keys.end(), key) != kind.keys.end();
}

struct ModuleAt {
  std::string path;
  std::vector<std::string> params;  // as named_parameters() names them, from this module
  std::vector<int64_t> numels;      // each of params' elements
  bool expert = false;              // a child of an MoE
};

// The distinct modules of the tree in pre-order, as operations and placement maps name them.
std::vector<ModuleAt> modules_of(const Scenario& s) {
  const auto entries = zero3::unique_modules(build_tree(s));
  std::set<const zero3::Module*> experts;
  for (const auto& entry : entries)
    if (const auto* moe = dynamic_cast<const zero3::MoE*>(entry.module.get()))
      for (const auto& [name, child] : moe->experts->named_zero3_children()) experts.insert(child.get());
  std::vector<ModuleAt> out;
  for (const auto& entry : entries) {
    ModuleAt at{entry.path, {}, {}, experts.count(entry.module.get()) > 0};
    for (const auto& item : entry.module->own_parameters()) {
      at.params.push_back(item.first);
      at.numels.push_back(item.second.numel());
    }
    out.push_back(std::move(at));
  }
  return out;
}

// Marks the choices made during its lifetime as one part (Chooser::span_begins).
class SpanScope {
 public:
  SpanScope(Chooser& chooser, ChoiceSpan kind) : c_(chooser), kind_(kind) { c_.span_begins(kind_); }
  ~SpanScope() { c_.span_ends(kind_); }
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;

 private:
  Chooser& c_;
  const ChoiceSpan kind_;
};

class Draw {
 public:
  Draw(Chooser& chooser, const DrawLimits& limits)
      : c_(chooser), limits_(limits), bounds_(bounds_of(limits.profile)),
        training_(limits.profile == DrawProfile::training) {}

  // I10's second draw of `s`'s ZeRO knobs: each size anew from the same table, each flag the
  // other way (so every flag's other branch runs), nothing else touched.
  void redraw_zero_knobs(Scenario& s) {
    world_ = s.world_size;
    const zero3::ZeroOptimizationConfig first = s.config.zero_optimization;
    zero_knobs(s.config.zero_optimization, modules_of(s));
#define ZEROCHECK_FLIP_FLAG(key, def, doc) s.config.zero_optimization.key = !first.key;
    ZERO3_ZERO_BOOL_KEYS(ZEROCHECK_FLIP_FLAG)
#undef ZEROCHECK_FLIP_FLAG
  }

  Scenario scenario() {
    Scenario s;
    {
      SpanScope world(c_, ChoiceSpan::world);
      s.world_size = static_cast<int>(integer({1, bounds_.max_world}));
    }
    if (limits_.world > 0) s.world_size = limits_.world;  // drawn all the same: the same bytes follow
    s.seed = static_cast<uint64_t>(integer(kSeed));
    s.features = integer(kFeatures);
    s.batch = integer(kBatch);
    std::vector<int> optimizer_weights;
    for (const auto& row : schema::optimizers()) optimizer_weights.push_back(row.draw_weight);
    s.optimizer = schema::optimizers()[c_.weighted(optimizer_weights)].kind;
    s.lr = pick(c_, kLearningRates);
    s.config.zero_optimization.stage3_param_persistence_threshold = pick(c_, kPersistenceThresholds);
    s.config.gradient_accumulation_steps = pick(c_, kAccumulationSteps);
    const auto placement = pick(c_, kPlacements);
    const bool expert_ids = placement == zero3::PlacementSpec::Kind::attr_mod;
    subtree(s, std::min<int>(static_cast<int>(integer({1, bounds_.max_depth})), limits_.max_depth), expert_ids);

    const std::vector<ModuleAt> modules = modules_of(s);
    s.placement.kind = placement;
    if (placement == zero3::PlacementSpec::Kind::attr_mod) s.placement.attr = kPlacementAttr;
    if (placement == zero3::PlacementSpec::Kind::map)
      for (const auto& module : modules)  // place some experts explicitly
        if (module.expert && c_.boolean(1, 1))
          // Drawn from the widest world whatever this one is, so a fixed world reads the same bytes.
          s.placement.owners[module.path] = integer({0, bounds_.max_world - 1}) % s.world_size;

    world_ = s.world_size;
    if (pick(c_, kInitializeFirst) && limits_.max_ops > 0) s.ops.emplace_back(OpKind::initialize);
    while (s.ops.size() < limits_.max_ops && c_.another()) {
      SpanScope unit_span(c_, ChoiceSpan::operation_unit);
      std::vector<Op> unit;
      switch (training_ ? pick(c_, kUnits) : Unit::single) {
        case Unit::single: unit = {op(modules)}; break;
        case Unit::training_step: {
          Op forward(OpKind::forward);
          forward.route = route();
          unit = {forward, Op(OpKind::backward), Op(OpKind::step)};
          break;
        }
        case Unit::checkpoint_round_trip: {
          Op save(OpKind::save), load(OpKind::load);
          checkpoint_options(save);
          checkpoint_options(load);
          // A second world resumes only a load that restores everything (SCENARIO_FORMAT.md).
          const int elsewhere = pick(c_, kLoadElsewhere);
          if (load.optimizer_states && !load.module_only) load.world_size = elsewhere;
          unit = {save, load};
          break;
        }
      }
      for (Op& o : unit)
        if (s.ops.size() < limits_.max_ops) s.ops.push_back(std::move(o));
    }
    // Drawn last, so the bytes before them decode to the scenarios they did before the knobs
    // (and before the precision keys).
    zero_knobs(s.config.zero_optimization, modules);
    s.config.precision.gradient_clipping = pick(c_, kGradientClipping);
    if (s.placement.kind == zero3::PlacementSpec::Kind::none) {
      zero3::PrecisionConfig& precision = s.config.precision;
      precision.bf16_enabled = pick(c_, kBf16);
      if (precision.bf16_enabled) {
        precision.grad_accum_dtype = pick(c_, kBf16Dtype);
        precision.communication_data_type = pick(c_, kBf16Dtype);
      }
    }
    // After every earlier choice, so the bytes before them decode to the scenarios they did
    // before overflow protection and injections existed (the training profile only: the
    // attributes profile never trains).
    if (training_) {
      overflow_protection(s);
      injections(s);
      // Last of all, and only when asked: the default draw reads no byte for it.
      if (limits_.fp16) fp16_keys(s);
    }
    return s;
  }

 private:
  int64_t integer(Span span) { return c_.integer(span.lo, span.hi); }

  // DeepSpeed's ZeRO knobs: sizes near the scenario's sizes, flags either way (defaults likelier);
  // bytes that run out draw every default.
  void zero_knobs(zero3::ZeroOptimizationConfig& zero, const std::vector<ModuleAt>& modules) {
    std::vector<int64_t> numels, partitions, totals;
    for (const auto& module : modules)
      for (int64_t n : module.numels) {
        numels.push_back(n);
        partitions.push_back((n + world_ - 1) / world_);
      }
    int64_t forward = 0, backward = 0;
    for (size_t i = 0; i < numels.size(); ++i) {
      totals.push_back(forward += numels[i]);
      totals.push_back(backward += numels[numels.size() - 1 - i]);
    }
    const auto size = [&](int64_t def, int64_t lo) {
      const std::vector<int64_t>* from = nullptr;
      switch (pick(c_, kSizeFrom)) {
        case SizeFrom::default_value: return def;
        case SizeFrom::smallest: return lo;
        case SizeFrom::numel: from = &numels; break;
        case SizeFrom::partition: from = &partitions; break;
        case SizeFrom::running_total: from = &totals; break;
      }
      if (from->empty()) return def;
      return std::max(lo, element(*from) + pick(c_, kOffByOne));
    };
    // The stage and the persistence threshold are not knobs: they are drawn above, or fixed.
#define ZEROCHECK_DRAW_SIZE(key, def, lo, hi, doc)                                  \
  if (std::string_view(#key) != "stage" && std::string_view(#key) != "stage3_param_persistence_threshold") \
    zero.key = size(def, lo);
    ZERO3_ZERO_INT_KEYS(ZEROCHECK_DRAW_SIZE)
#undef ZEROCHECK_DRAW_SIZE
#define ZEROCHECK_DRAW_FLAG(key, def, doc) zero.key = pick(c_, kFlagKeepsDefault) ? def : !def;
    ZERO3_ZERO_BOOL_KEYS(ZEROCHECK_DRAW_FLAG)
#undef ZEROCHECK_DRAW_FLAG
  }
  template <class T>
  const T& element(const std::vector<T>& items) {
    return items[static_cast<size_t>(c_.integer(0, static_cast<int64_t>(items.size()) - 1))];
  }

  std::string name() {
    SpanScope span(c_, ChoiceSpan::attribute_name);
    if (pick(c_, kNames) == NameFrom::dictionary) return element(collision_names()).name;
    std::string out(static_cast<size_t>(integer(kLetters)), 'a');
    for (char& letter : out) letter = static_cast<char>('a' + c_.integer(0, 25));
    return out;
  }

  zero3::AttrValue value() {
    using V = zero3::AttrValue;
    switch (pick(c_, kValues)) {
      case ValueKind::integer: return V(integer(kIntValue));
      case ValueKind::string: return V(element(kStringValues));
      case ValueKind::boolean: return V(c_.boolean(1, 1));
      case ValueKind::none: return V();
      case ValueKind::floating: return V(static_cast<double>(integer(kEighths)) / 8.0);
      case ValueKind::list: {
        V::List items(static_cast<size_t>(integer(kListItems)));
        for (auto& item : items) item = V(integer(kListValue));
        return V(std::move(items));
      }
      case ValueKind::tensor: return V(at::arange(integer(kTensorNumel), at::kFloat));
    }
    return V();
  }

  std::vector<AttrEntry> attrs(int max) {
    std::vector<AttrEntry> out;
    const int64_t count = c_.integer(0, max);
    for (int64_t i = 0; i < count; ++i) {
      std::string n = name();
      zero3::AttrValue v = value();
      bool seen = false;
      for (const auto& e : out) seen |= e.name == n;
      if (!seen) out.push_back({std::move(n), std::move(v)});  // the first write of a name wins
    }
    return out;
  }

  // A node without children: as a leaf of an ordinary container, or as an MoE's child.
  NodeSpec leaf(bool expert_ids, bool in_moe) {
    SpanScope span(c_, in_moe ? ChoiceSpan::expert : ChoiceSpan::leaf);
    const auto& kinds = schema::node_kinds();
    std::vector<int> weights;
    for (const auto& kind : kinds) weights.push_back(in_moe ? kind.expert_weight : kind.leaf_weight);
    const schema::NodeKind& kind = kinds[c_.weighted(weights)];
    NodeSpec node;
    node.kind = kind.name;
    if (takes_key(kind, "bias")) node.bias = pick(c_, kLinearBias);
    if (takes_key(kind, "shape")) node.shape = pick(c_, kOffsetShapes);
    node.attrs = attrs(kModuleAttrs);
    if (node.kind == "Expert" && expert_ids && pick(c_, kExpertCarriesId)) {
      const int64_t id = integer(kExpertId);
      std::vector<AttrEntry> with_id = {{kPlacementAttr, zero3::AttrValue(id)}};
      for (auto& e : node.attrs)
        if (e.name != kPlacementAttr) with_id.push_back(std::move(e));
      node.attrs = std::move(with_id);
    }
    for (const auto& param : schema::parameter_names(node)) {
      if (c_.boolean(3, 1)) {
        auto entries = attrs(kParamAttrs);
        if (!entries.empty()) node.param_attrs[param] = std::move(entries);
      }
      if (c_.boolean(7, 1)) node.frozen.push_back(param);
    }
    return node;
  }

  // Appends a subtree in pre-order; children always come after their parent.
  void subtree(Scenario& s, int depth, bool expert_ids) {
    const size_t me = s.tree.size();
    s.tree.emplace_back();
    // A container needs room for at least one child.
    const bool container = depth > 1 && s.tree.size() < limits_.max_nodes && c_.boolean(2, 3);
    if (!container) {
      s.tree[me] = leaf(expert_ids, false);
      return;
    }
    const auto& kinds = schema::node_kinds();
    std::vector<int> weights;
    for (const auto& kind : kinds) weights.push_back(kind.container_weight);
    const schema::NodeKind& kind = kinds[c_.weighted(weights)];
    const bool moe = std::string_view(kind.name) == "MoE";
    NodeSpec node;
    node.kind = kind.name;
    node.attrs = attrs(kContainerAttrs);
    const int64_t n = integer(training_ ? kChildren : kAttributesChildren);
    const int64_t tie = c_.boolean(5, 1) ? c_.integer(0, n - 1) : -1;
    for (int64_t i = 0; i < n && s.tree.size() < limits_.max_nodes; ++i) {
      const int child = static_cast<int>(s.tree.size());
      node.children.push_back(child);
      if (i == tie) node.children.push_back(child);  // the same module again: tied weights
      if (moe) s.tree.push_back(leaf(expert_ids, true));
      else subtree(s, depth - 1, expert_ids);
    }
    s.tree[me] = std::move(node);
  }

  std::vector<int64_t> route() {
    std::vector<int64_t> out(static_cast<size_t>(integer(kRouteLength)));
    for (auto& choice : out) choice = integer(kRouteChoice);
    return out;
  }

  void overflow_protection(Scenario& s) {
    const Protection kind = pick(c_, kProtections);
    if (kind == Protection::none) return;
    OverflowProtection protection;
    if (kind == Protection::fixed) {
      protection.loss_scale = pick(c_, kStaticScales);
    } else {
      protection.initial_scale_power = pick(c_, kScalePowers);
      protection.loss_scale_window = pick(c_, kScaleWindows);
      protection.hysteresis = pick(c_, kHysteresis);
      protection.min_loss_scale = pick(c_, kMinScales);
    }
    s.overflow_protection = protection;
  }

  // fp16.enabled with its dtypes and scaler (kFp16*), for scenarios without a placement policy
  // (placed modules are fp32 only). fp16 has its own scaler and always checks for overflow, so
  // it replaces bf16 and the scenario's overflow_protection (scenario validation keeps them
  // apart); the injections stay, and now meet fp16's check.
  void fp16_keys(Scenario& s) {
    if (s.placement.kind != zero3::PlacementSpec::Kind::none || !pick(c_, kFp16)) return;
    zero3::PrecisionConfig& p = s.config.precision;
    p.bf16_enabled.reset();
    p.fp16_enabled = true;
    p.grad_accum_dtype = pick(c_, kFp16Dtype);
    p.communication_data_type = pick(c_, kFp16Dtype);
    switch (pick(c_, kFp16Scalers)) {
      case Fp16Scaler::fixed:
        p.fp16_loss_scale = pick(c_, kFp16StaticScales);
        break;
      case Fp16Scaler::dynamic_keys:
        p.fp16_initial_scale_power = pick(c_, kFp16ScalePowers);
        p.fp16_loss_scale_window = static_cast<int64_t>(pick(c_, kScaleWindows));
        p.fp16_hysteresis = static_cast<int64_t>(pick(c_, kHysteresis));
        p.fp16_min_loss_scale = pick(c_, kFp16MinScales);
        p.fp16_consecutive_hysteresis = c_.boolean(3, 1) ? std::optional<bool>(true) : std::nullopt;  // mostly absent
        break;
      case Fp16Scaler::dynamic_defaults:
        break;
    }
    s.overflow_protection.reset();
  }

  // Inserts each injection right before an operation that takes it (a forward for "input", a
  // backward otherwise), on a rank drawn from the widest world (so a fixed world reads the same
  // bytes). A full operation list (max_ops) drops its last operation for it: a fuzz input reaches
  // these choices only when its operations filled the list (FdpChooser::another() takes units
  // while bytes remain), so an injection must fit a full list.
  void injections(Scenario& s) {
    const int64_t count = pick(c_, kInjections);
    const std::vector<std::string> params = parameter_paths(s);
    for (int64_t i = 0; i < count && limits_.max_ops > 0; ++i) {
      Op op(OpKind::inject);
      op.rank = static_cast<int>(integer({0, bounds_.max_world - 1}) % world_);
      op.into = pick(c_, kInjectInto);
      op.value = zero3::AttrValue(pick(c_, kNonFinite));
      if (op.into == "gradient") {
        if (params.empty()) op.into = "loss";  // a tree without parameters has no gradient to poison
        else op.param = element(params);
      }
      const OpKind taker = op.into == "input" ? OpKind::forward : OpKind::backward;
      const bool full = s.ops.size() >= limits_.max_ops;
      std::vector<size_t> places;  // when full, the taker must not be the operation dropped
      for (size_t k = 0; k < s.ops.size(); ++k)
        if (s.ops[k].kind == taker && (!full || k + 1 < s.ops.size())) places.push_back(k);
      if (places.empty()) return;
      const size_t at = element(places);
      s.ops.insert(s.ops.begin() + static_cast<std::ptrdiff_t>(at), std::move(op));
      if (full) s.ops.pop_back();
    }
  }

  // A save's tag; a load's tag and options.
  void checkpoint_options(Op& op) {
    op.tag = pick(c_, kTags);
    if (op.kind != OpKind::load) return;
    op.optimizer_states = pick(c_, kOptimizerStates);
    op.module_only = pick(c_, kModuleOnly);
  }

  Op op(const std::vector<ModuleAt>& modules) {
    std::vector<int> weights;
    for (const auto& row : schema::op_rows()) weights.push_back(training_ ? row.draw_weight : row.attributes_weight);
    Op op(op_kind_of_row(c_.weighted(weights)));
    const ModuleAt& module = element(modules);
    switch (op.kind) {
      case OpKind::initialize:
        op.optimizer = element(schema::initialize_optimizers());
        op.target = pick(c_, kInitializeTargets) == Target::root ? "" : module.path;
        op.config_error = pick(c_, kConfigErrors);
        break;
      case OpKind::save:
      case OpKind::load: checkpoint_options(op); break;
      case OpKind::gather:
        op.module = module.path;
        // Drawn from the widest world whatever this one is, so a fixed world reads the same bytes.
        if (c_.boolean(1, 3)) op.modifier_rank = static_cast<int>(integer({0, bounds_.max_world - 1}) % world_);
        op.scale = pick(c_, kScales);
        break;
      case OpKind::forward: op.route = route(); break;
      case OpKind::set_attr:
      case OpKind::del_attr:
        op.module = module.path;
        if (!module.params.empty() && c_.boolean(3, 1)) op.param = element(module.params);
        op.name = name();
        if (op.kind == OpKind::set_attr) op.value = value();
        break;
      default: break;
    }
    return op;
  }

  Chooser& c_;
  int world_ = 1;  // the scenario's, once drawn
  const DrawLimits& limits_;
  const ProfileBounds bounds_;
  const bool training_;
};

}  // namespace

ProfileBounds bounds_of(DrawProfile profile) {
  if (profile == DrawProfile::attributes)
    return {kMaxAttributesWorld, kMaxAttributesNodes, kMaxDrawnOps, kMaxAttributesDepth};
  return {kMaxDrawnWorld, kMaxDrawnNodes, kMaxDrawnOps, kMaxDrawnDepth};
}

const char* to_string(DrawProfile profile) {
  return profile == DrawProfile::attributes ? "attributes" : "training";
}

DrawLimits::DrawLimits(DrawProfile p) : profile(p) {
  const ProfileBounds widest = bounds_of(p);
  max_nodes = widest.max_nodes;
  max_ops = widest.max_ops;
  max_depth = widest.max_depth;
}

void DrawLimits::validate() const {
  const ProfileBounds widest = bounds_of(profile);
  auto bad = [&](const char* field, int64_t value, const std::string& range) {
    throw zero3::UsageError(
        fmt::format("draw limit {} = {} is outside {} (profile {})", field, value, range, to_string(profile)));
  };
  if (world < 0 || world > kMaxFixedWorld)
    bad("world", world, fmt::format("0..{} (0: drawn from 1..{})", kMaxFixedWorld, widest.max_world));
  if (max_nodes < 1 || max_nodes > widest.max_nodes)
    bad("max_nodes", static_cast<int64_t>(max_nodes), fmt::format("1..{}", widest.max_nodes));
  if (max_ops > widest.max_ops) bad("max_ops", static_cast<int64_t>(max_ops), fmt::format("0..{}", widest.max_ops));
  if (max_depth < 1 || max_depth > widest.max_depth)
    bad("max_depth", max_depth, fmt::format("1..{}", widest.max_depth));
}

Scenario draw_scenario(Chooser& chooser, const DrawLimits& limits) {
  limits.validate();
  return Draw(chooser, limits).scenario();
}

Scenario with_zero_knobs_redrawn(const Scenario& scenario, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<uint8_t> bytes(256);  // a knob reads a few bytes; 256 never run out
  for (auto& b : bytes) b = static_cast<uint8_t>(random());
  FdpChooser chooser(bytes.data(), bytes.size());
  const DrawLimits limits;
  Scenario out = scenario;
  Draw(chooser, limits).redraw_zero_knobs(out);
  return out;
}

}  // namespace zerocheck
