// The oracles on their own, and the faults only they catch.
//
// CaughtOnlyByTheSplitOracles.*: one shrunk scenario per fault that passed the oracles before
// the model/interpreter/oracles split (fault_kill_tests runs each with its fault and expects the
// catalogued invariant in the failure). Oracles.*: the model and the oracles fed by hand, so each
// is seen to fail without any engine fault.
#include <gtest/gtest.h>

#include "engine/fp16_probe.h"
#include "engine/layers.h"
#include "engine/testing/fault_under_test.h"
#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zerocheck {
namespace {

namespace fs = std::filesystem;

Scenario scenario_file(const std::string& name) {
  std::ifstream in(fs::path(ZEROCHECK_SOURCE_DIR) / "harness/tests/oracle_scenarios" / (name + ".json"));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str());
}

void expect_holds(const std::string& name) {
  const Verdict v = run_scenario(scenario_file(name), RunOptions{fault_under_test()});
  EXPECT_TRUE(v.ok()) << "VIOLATION " << v.violation->to_text();
}

TEST(CaughtOnlyByTheSplitOracles, PartitionedKeptPersistent) { expect_holds("partitioned-kept-persistent"); }
TEST(CaughtOnlyByTheSplitOracles, PlacedWithoutPolicy) { expect_holds("placed-without-policy"); }
TEST(CaughtOnlyByTheSplitOracles, TensorAttrChangedInPlace) { expect_holds("tensor-attr-changed-in-place"); }
TEST(CaughtOnlyByTheSplitOracles, ShardChunkAligned) { expect_holds("shard-chunk-aligned"); }
TEST(CaughtOnlyByTheSplitOracles, GradShardOverallocated) { expect_holds("grad-shard-overallocated"); }
TEST(CaughtOnlyByTheSplitOracles, ExtraCollectivePerStep) { expect_holds("extra-collective-per-step"); }
// Two Linears, every parameter partitioned, the default bucket: one backward is one reduce-scatter
// of all four gradients, and the fault's is two. No number changes: only the count (I8) sees it.
TEST(CaughtOnlyByI8, BucketFlushedOneGradientEarly) { expect_holds("bucket-flushed-one-gradient-early"); }
// The same two Linears: each fetch (a Linear's weight and bias) is one coalesced all-gather, four
// in a forward and backward; the fault's are eight. The same bits: only the count (I8) sees it.
TEST(CaughtOnlyByI8, FetchGathersLastParameterAlone) { expect_holds("fetch-gathers-last-parameter-alone"); }
TEST(CaughtOnlyByTheSplitOracles, RefuseGradientAccumulation) { expect_holds("refuse-gradient-accumulation"); }
TEST(CaughtOnlyByTheSplitOracles, PlacedCopiesKept) { expect_holds("placed-copies-kept"); }
TEST(CaughtOnlyByTheSplitOracles, RepeatRefusedWithWrongError) { expect_holds("repeat-refused-with-wrong-error"); }
// A shard copied into a member the engine lists nowhere: only what the rank allocated shows it.
TEST(CaughtOnlyByTheSplitOracles, HiddenShardCopy) { expect_holds("hidden-shard-copy"); }
// One rank's step counter behind the others': every number is right, only the ranks' exchange
// of what they hold (I9) sees it.
TEST(CaughtOnlyByTheSplitOracles, StepCountSkippedOnOneRank) { expect_holds("step-count-skipped-on-one-rank"); }
// A load of tag a after a later save of tag b: a load that reads the folder's latest restores b.
TEST(CaughtOnlyByTheSplitOracles, LoadIgnoresTag) { expect_holds("load-ignores-tag"); }
// Rank 0 doubles a Linear inside a gather and publishes it: only a broadcast puts the edit into
// rank 1's shard, as the twin puts it into the whole parameter.
TEST(CaughtOnlyByTheSplitOracles, GatheredEditNotPublished) { expect_holds("gathered-edit-not-published"); }
// An initialize refused for zero_optimization.stage 4, after the engine has partitioned the
// model: it must give the model its data back (the later initialize trains it as the twin does).
TEST(CaughtOnlyByTheSplitOracles, FailedInitializeLeavesState) { expect_holds("failed-initialize-leaves-state"); }
// A Linear used twice (`Sequential(linear, tanh, linear)`): torch's state_dict lists its weight
// and bias under 0. and 2.; a consolidation that walks each module once drops the second place.
TEST(CaughtOnlyByTheSplitOracles, ConsolidatedListsSharedOnce) { expect_holds("consolidated-lists-shared-once"); }

// Overflow protection (a dynamic scale 2^4), world 2, one Linear, every parameter partitioned.
// A NaN in element 0 of rank 1's weight gradient lands in rank 0's slice: only an all-reduced
// flag skips the step on rank 1 too.
TEST(CaughtByI11, OverflowFlagNotAllReduced) { expect_holds("overflow-flag-not-all-reduced"); }
// A window of 2: the twin's scale stays 16 after the first clean step, the fault's doubles.
TEST(CaughtByI11, ScaleDoubledOneStepEarly) { expect_holds("scale-doubled-one-step-early"); }
// An infinite loss on rank 0: every rank skips, the scale halves, and the norm reported is the
// only number that differs (-1 instead of NaN): no other oracle reads it.
TEST(CaughtOnlyByI11, OverflowNormReportedAsSentinel) { expect_holds("overflow-norm-reported-as-sentinel"); }

// bf16, world 2, SGD: the step's fp32 masters are right and only their bf16 copies are
// truncated; the next forward's loss (or a master after the next step) differs from the twin's.
TEST(CaughtByBf16Parity, CopyBackTruncates) { expect_holds("copy-back-truncates"); }

// fp16 (a dynamic scale of 16), world 2, SGD, gradient_clipping 0.1: the twin's clip
// coefficient comes from the norm with the scale divided out, the fault's from the scaled norm,
// 16 times larger: the first step's fp32 masters differ. Runs where LibTorch computes an fp16
// Linear on CPU (fp16_probe.h; fault_kill_tests skips the fault elsewhere).
TEST(CaughtByFp16Parity, ClipOfScaledNorm) {
  if (!zero3::cpu_fp16_available())
    GTEST_SKIP() << "this LibTorch computes no fp16 Linear on CPU: " << zero3::cpu_fp16_refusal();
  expect_holds("fp16-clip-of-scaled-norm");
}

// Deep faults (engine/faults.h, ZERO3_DEEP_FAULTS): each scenario is the shrunk one `zerocheck
// mutants` found, meeting every condition of its fault's conjunction.
TEST(DeepFaults, TiedExpertWorld3) { expect_holds("tied-expert-world3"); }
TEST(DeepFaults, FrozenReshardRotated) { expect_holds("frozen-reshard-rotated"); }
TEST(DeepFaults, ThirdStepAfterRefusal) { expect_holds("third-step-after-refusal"); }
TEST(DeepFaults, FreshOptimizerZeroSizeRepeat) { expect_holds("fresh-optimizer-zero-size-repeat"); }
TEST(DeepFaults, AccumulationBoundaryOnLoad) { expect_holds("accumulation-boundary-on-load"); }
TEST(DeepFaults, ModuleOnlyLoadResetsAdam) { expect_holds("module-only-load-resets-adam"); }
TEST(DeepFaults, ZeroGradMidAccumulation) { expect_holds("zero-grad-mid-accumulation"); }
TEST(DeepFaults, FrozenTiedKeptGathered) { expect_holds("frozen-tied-kept-gathered"); }
TEST(DeepFaults, PersistentEditFromRank0) { expect_holds("persistent-edit-from-rank0"); }
TEST(DeepFaults, ClipFromRankNorm) { expect_holds("clip-from-rank-norm"); }

// ---- the model and the oracles by hand --------------------------------------------------------

Scenario one_node(const std::string& kind, std::vector<int64_t> shape = {}) {
  Scenario s;
  s.world_size = 2;
  NodeSpec node;
  node.kind = kind;
  node.shape = std::move(shape);
  s.tree.push_back(node);
  return s;
}

model::Expectation expectation_of(const std::shared_ptr<zero3::Module>& root, const zero3::PlacementSpec& spec,
                                  int64_t threshold, int world) {
  auto e = model::expect(root, spec, threshold, world);
  EXPECT_TRUE(std::holds_alternative<model::Expectation>(e));
  return std::get<model::Expectation>(e);
}

// What the model's replay of DeepSpeed's coordinator (harness/model/fetch_schedule.cc) gives one
// forward of `root` at world 2 under `knobs` after `memory`.
struct ScheduleSeen {
  model::Traffic forward;
  int64_t peak = 0, prefetched = 0;
  model::FetchMemory after;
};
ScheduleSeen schedule_of(const std::shared_ptr<zero3::Sequential>& root, model::FetchKnobs knobs,
                         model::FetchMemory memory) {
  const model::Expectation e = expectation_of(root, zero3::PlacementSpec{}, 0, 2);
  model::TrafficTrace trace(e, root, 2, knobs, std::move(memory));
  {
    zero3::InterceptorScope scope(&trace);
    zero3::Route route;
    (*root)(at::ones({2, 4}), route);
  }
  return {trace.forward(), trace.gathered_peak(), trace.prefetched(), trace.memory_after()};
}

// One Linear 4->4 (weight 16, bias 4: c*N = 16 + 4 at world 2) called twice by its Sequential.
// The first forward records the trace and gathers it for each call. After it, within the reuse
// distance the Linear stays gathered for its second call: 20 elements in one all-gather; at
// distance 0 it is released and gathered again: 20 more, the price of a small distance.
TEST(Oracles, TheFetchScheduleChargesAReleaseAndRegatherBeyondTheReuseDistance) {
  auto root = std::make_shared<zero3::Sequential>();
  auto linear = std::make_shared<zero3::Linear>(4, 4);
  root->push_back(linear);
  root->push_back(linear);
  const model::FetchKnobs keep{0, 1000000000, 1000000000}, release{0, 1000000000, 0};
  const ScheduleSeen first = schedule_of(root, keep, {});
  EXPECT_EQ(first.forward.all_gather, 40);
  EXPECT_EQ(first.forward.all_gathers, 2);
  EXPECT_TRUE(first.after.complete);
  EXPECT_EQ(first.after.module_order, (std::vector<std::string>{"", "0", "0"}));
  const ScheduleSeen kept = schedule_of(root, keep, first.after);
  EXPECT_EQ(kept.forward.all_gather, 20);
  EXPECT_EQ(kept.forward.all_gathers, 1);
  const ScheduleSeen again = schedule_of(root, release, first.after);
  EXPECT_EQ(again.forward.all_gather, 40);
  EXPECT_EQ(again.forward.all_gathers, 2);
  EXPECT_EQ(again.peak, 20);
}

// Two Linears 4->4: the prefetch at the root's step takes both (40 elements in one all-gather,
// the same elements the plain fetches move); a live limit of 0 takes nothing, and one of 17
// takes the first Linear only (16 < 17: its bias still joins): the peak follows.
TEST(Oracles, TheFetchSchedulePrefetchesUnderTheLiveLimit) {
  auto root = std::make_shared<zero3::Sequential>();
  root->push_back(std::make_shared<zero3::Linear>(4, 4));
  root->push_back(std::make_shared<zero3::Linear>(4, 4));
  const model::FetchMemory trace = schedule_of(root, {}, {}).after;
  const ScheduleSeen all = schedule_of(root, {50000000, 1000000000, 0}, trace);
  EXPECT_EQ(all.forward.all_gather, 40);
  EXPECT_EQ(all.forward.all_gathers, 1);
  EXPECT_EQ(all.prefetched, 40);
  EXPECT_EQ(all.peak, 40);
  const ScheduleSeen none = schedule_of(root, {50000000, 0, 0}, trace);
  EXPECT_EQ(none.forward.all_gathers, 2);
  EXPECT_EQ(none.prefetched, 0);
  EXPECT_EQ(none.peak, 20);
  const ScheduleSeen one = schedule_of(root, {50000000, 17, 0}, trace);
  EXPECT_EQ(one.forward.all_gather, 40);
  EXPECT_EQ(one.forward.all_gathers, 2);
  EXPECT_EQ(one.prefetched, 20);
  EXPECT_EQ(one.peak, 20);
}

// Parity compares two computations as numbers (a NaN matches a NaN: a model that diverges does
// so on both sides alike); round trips and refused calls compare copies bit for bit.
TEST(Oracles, TensorsAreComparedAsNumbersOrBitForBit) {
  const double nan = std::nan("");
  const at::Tensor with_nan = at::tensor({1.0f, static_cast<float>(nan), 0.0f});
  const at::Tensor negative_zero = at::tensor({1.0f, static_cast<float>(nan), -0.0f});
  EXPECT_FALSE(at::equal(with_nan, with_nan.clone())) << "at::equal changed its mind about NaN";
  EXPECT_TRUE(oracles::same_numbers(with_nan, with_nan.clone()));
  EXPECT_TRUE(oracles::same_numbers(with_nan, negative_zero));  // -0 == +0 as numbers
  EXPECT_FALSE(oracles::same_numbers(with_nan, at::tensor({1.0f, 2.0f, 0.0f})));
  EXPECT_FALSE(oracles::same_numbers(at::tensor({1.0f, 2.0f, 0.0f}), with_nan));
  EXPECT_FALSE(oracles::same_numbers(with_nan, with_nan.narrow(0, 0, 2)));
  EXPECT_TRUE(oracles::same_numbers(nan, nan));
  EXPECT_FALSE(oracles::same_numbers(nan, 0.5));
  EXPECT_TRUE(oracles::same_bits(with_nan, with_nan.clone()));
  EXPECT_FALSE(oracles::same_bits(with_nan, negative_zero));  // a zero's sign is a bit
  EXPECT_FALSE(oracles::same_bits(with_nan, with_nan.to(at::kDouble)));
  EXPECT_FALSE(oracles::same_bits(with_nan, with_nan.view({3, 1})));
  EXPECT_FALSE(oracles::same_bits(with_nan, at::Tensor()));
  EXPECT_TRUE(oracles::same_bits(at::Tensor(), at::Tensor()));
  EXPECT_TRUE(oracles::same_bits(at::empty({0}), at::empty({0})));  // no bytes to compare
  EXPECT_FALSE(oracles::same_bits(at::empty({0}), at::empty({0, 2})));
  EXPECT_TRUE(oracles::same_bits(at::arange(6.0f).view({2, 3}).t(), at::arange(6.0f).view({2, 3}).t().contiguous()));
}

TEST(Oracles, TheLedgerKeepsItsOwnCopyOfTensorAttributes) {
  auto root = build_tree(one_node("Tanh"));
  root->attrs().set("scale", zero3::AttrValue(at::arange(3, at::kFloat)));
  const model::AttributeLedger ledger(root);
  EXPECT_FALSE(oracles::attributes(ledger).has_value());
  std::get<at::Tensor>(root->attrs().get("scale").storage()).mul_(0.5);  // same object, new values
  const auto v = oracles::attributes(ledger);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->invariant, "I1");
  EXPECT_EQ(v->attribute, "scale");
}

TEST(Oracles, OwnersComeFromTheUsersAttributesByPythonsModulo) {
  zero3::PlacementSpec spec;
  spec.kind = zero3::PlacementSpec::Kind::attr_mod;
  spec.attr = "id";
  Scenario s = one_node("MoE");
  s.tree[0].children = {1, 2};
  NodeSpec expert;
  expert.kind = "Expert";
  expert.attrs = {{"id", zero3::AttrValue(int64_t{5})}};
  s.tree.push_back(expert);
  expert.attrs = {{"id", zero3::AttrValue(int64_t{-1})}};
  s.tree.push_back(expert);
  s.features = 2;
  const auto root = build_tree(s);
  const auto e = expectation_of(root, spec, 0, 4);
  EXPECT_EQ(e.module_owner.at(""), -1);
  EXPECT_EQ(e.module_owner.at("experts.0"), 1);
  EXPECT_EQ(e.module_owner.at("experts.1"), 3);  // -1 mod 4, as Python computes it
  for (const auto& p : e.params) EXPECT_EQ(p.owner, p.path.rfind("experts.0", 0) == 0 ? 1 : 3) << p.path;
  root->named_zero3_children()[0].second->named_zero3_children()[0].second->attrs().del("id");
  EXPECT_TRUE(std::holds_alternative<model::PlacementRefusal>(model::expect(root, spec, 0, 4)));
}

TEST(Oracles, ShardsAreCeilNOverNWithZeroPadding) {
  const at::Tensor full = at::arange(1, 6, at::kFloat);  // 5 elements over 2 ranks: c = 3
  EXPECT_TRUE(at::equal(model::expected_shard(full, 2, 0), at::tensor({1.f, 2.f, 3.f})));
  EXPECT_TRUE(at::equal(model::expected_shard(full, 2, 1), at::tensor({4.f, 5.f, 0.f})));
  EXPECT_EQ(model::chunk_of(5, 2), 3);
  EXPECT_EQ(model::chunk_of(0, 3), 0);
}

TEST(Oracles, EveryParameterOnEitherSideMustBeMatched) {
  Scenario s = one_node("Linear");
  s.features = 3;
  const auto root = build_tree(s);
  const auto e = expectation_of(root, {}, 0, 2);
  ASSERT_EQ(e.params.size(), 2u);  // weight and bias
  std::vector<oracles::ObservedParam> observed;
  for (const auto& p : e.params) {
    oracles::ObservedParam o;
    o.path = p.path;
    o.master_bytes = p.chunk * 4;
    observed.push_back(o);
  }
  EXPECT_FALSE(oracles::memory(e, observed, "").has_value());
  auto missing = observed;
  missing.pop_back();
  for (const auto& check : {oracles::memory(e, missing, ""), oracles::placement(e, missing, 0, "")}) {
    ASSERT_TRUE(check.has_value());
    EXPECT_EQ(check->attribute, e.params.back().path);
  }
  auto extra = observed;
  extra.push_back(observed.front());
  extra.back().path = "ghost";
  ASSERT_TRUE(oracles::memory(e, extra, "").has_value());
  EXPECT_EQ(oracles::memory(e, extra, "")->attribute, "ghost");
  observed.front().reported_persistent = true;  // the engine's word does not set the expectation
  ASSERT_TRUE(oracles::memory(e, observed, "").has_value());
  EXPECT_EQ(oracles::memory(e, observed, "")->invariant, "I4");
}

// The whole-rank memory check against its two ways to fail, and a NaN on one side of a difference.
TEST(Oracles, WhatARankHoldsIsAccountedForByteForByte) {
  EXPECT_FALSE(oracles::unlisted_memory(4096, 4096, "").has_value());
  const auto more = oracles::unlisted_memory(4096 + 52, 4096, "a");
  ASSERT_TRUE(more.has_value());
  EXPECT_EQ(more->invariant, "I4");
  EXPECT_NE(more->message.find("52 bytes that no tensor of a parameter accounts for"), std::string::npos) << more->message;
  const auto less = oracles::unlisted_memory(4000, 4096, "a");
  ASSERT_TRUE(less.has_value());
  EXPECT_NE(less->message.find("96 bytes"), std::string::npos) << less->message;
  const double nan = std::nan("");
  EXPECT_EQ(oracles::max_abs_difference(at::tensor({1.0f, static_cast<float>(nan)}), at::tensor({1.0f, static_cast<float>(nan)})), 0.0);
  EXPECT_TRUE(std::isinf(oracles::max_abs_difference(at::tensor({1.0f, static_cast<float>(nan)}), at::tensor({1.0f, 2.0f}))));
  EXPECT_EQ(oracles::max_abs_difference(at::tensor({1.0f, 2.0f}), at::tensor({1.5f, 2.0f})), 0.5);
}

TEST(Oracles, TrafficIsComparedKindByKind) {
  model::Traffic expected{10, 10, 0, 0, 0};
  EXPECT_FALSE(oracles::traffic("backward", expected, expected, "").has_value());
  model::Traffic measured = expected;
  measured.broadcast = 1;  // a kind the model does not use must stay at zero
  const auto v = oracles::traffic("backward", expected, measured, "");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->invariant, "I8");
  measured = expected;
  measured.all_gathers = 1;  // the same elements in another number of all-gathers
  EXPECT_TRUE(oracles::traffic("forward", expected, measured, "").has_value());
}

// I9 compares what each rank holds as digests: it names the first field that differs and the
// ranks that differ from rank 0.
TEST(Oracles, RanksAgreeFieldByField) {
  const oracles::AgreementDigest same{1, 2, 3, 4, 5, 6, 7};
  EXPECT_FALSE(oracles::agreement({same, same, same}, "").has_value());
  EXPECT_FALSE(oracles::agreement({same}, "").has_value());
  oracles::AgreementDigest steps_behind = same, list_differs = same;
  steps_behind[5] = 60;
  list_differs[1] = 20;
  list_differs[5] = 60;
  const auto v = oracles::agreement({same, steps_behind, list_differs, same}, "");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->invariant, "I9");
  EXPECT_EQ(v->attribute, "parameter list") << "the first field that differs, in digest order";
  EXPECT_EQ(v->rank, 2);
  const auto later = oracles::agreement({same, steps_behind, steps_behind}, "");
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->attribute, "step counters");
  EXPECT_NE(later->message.find("rank(s) 1, 2"), std::string::npos) << later->message;
  EXPECT_EQ(oracles::agreement_fields()[5], std::string("step counters"));
  // No engine: a rank that has none digests to zeros, so one with an engine beside it disagrees.
  EXPECT_EQ(oracles::agreement_digest(nullptr), oracles::AgreementDigest{});
}

TEST(Oracles, AnUnexpectedRefusalNamesTheEnginesMessage) {
  const std::string config = zero3::kind_name<zero3::ConfigError>();
  const auto refused = oracles::initialize_outcome(std::nullopt, false, config, "bucket size 0 on module 'a.b'", "a");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->invariant, "I7");
  EXPECT_EQ(refused->actual, config) << "the kind stays the value compared";
  EXPECT_NE(refused->message.find("bucket size 0 on module 'a.b'"), std::string::npos) << refused->message;
  const std::string repeat = zero3::kind_name<zero3::AlreadyInitialized>();
  const auto wrong = oracles::initialize_outcome(repeat, false, config, "why", "");
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->invariant, "I5");
  EXPECT_NE(wrong->message.find(": why"), std::string::npos) << wrong->message;
  EXPECT_FALSE(oracles::initialize_outcome(repeat, false, repeat, "why", "").has_value());
}

TEST(Oracles, EachInvariantCanBeSwitchedOffByName) {
  EXPECT_EQ(parse_invariants("I3,I9,I11"), (std::set<std::string>{"I3", "I9", "I11"}));
  EXPECT_THROW(parse_invariants("I12"), zero3::UsageError);
}

}  // namespace
}  // namespace zerocheck
