// The choice-level mutator (fuzz/choice_mutator.h) and the spans it edits by
// (harness/scenario/choice_spans.h), over a fixed sample of random inputs: each edit does to the
// decoded scenario exactly what its name says, so a wrong span shows up as a wrong scenario.
#include "engine/errors.h"
#include "fuzz/choice_mutator.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace zerocheck::fuzz {
namespace {

using nlohmann::json;

// 300 inputs of 0..400 random bytes, the same every run.
const std::vector<Bytes>& sample_inputs() {
  static const std::vector<Bytes> inputs = [] {
    std::mt19937 rng(20261202);
    std::vector<Bytes> out;
    for (int i = 0; i < 300; ++i) {
      Bytes bytes(std::uniform_int_distribution<size_t>(0, 400)(rng));
      for (auto& byte : bytes) byte = static_cast<uint8_t>(rng());
      out.push_back(std::move(bytes));
    }
    return out;
  }();
  return inputs;
}

json decoded(const Bytes& bytes) { return to_json(scenario_from_bytes(bytes.data(), bytes.size())); }

std::vector<ChoiceSpanAt> units_of(const std::vector<ChoiceSpanAt>& spans) {
  return spans_of(spans, ChoiceSpan::operation_unit);
}

// The scenario's operations cut into: the ones before the first unit, each unit's, then those of
// a last unit that ran out of input (it has no span). Unit k's are found without the spans'
// say-so: the input cut below unit k decodes to the operations through unit k (nothing is left to
// read after it).
std::vector<json> operation_groups(const Bytes& input, const std::vector<ChoiceSpanAt>& units) {
  const json ops = decoded(input)["ops"];
  std::vector<size_t> ends;
  if (!units.empty()) ends.push_back(decoded(Bytes(input.begin() + units[0].end, input.end()))["ops"].size());
  for (const auto& unit : units) ends.push_back(decoded(Bytes(input.begin() + unit.begin, input.end()))["ops"].size());
  ends.push_back(ops.size());
  std::vector<json> groups;
  size_t from = 0;
  for (size_t end : ends) {
    EXPECT_LE(from, end);
    groups.push_back(json(std::vector<json>(ops.begin() + from, ops.begin() + end)));
    from = end;
  }
  return groups;
}

json joined(const std::vector<json>& groups) {
  json out = json::array();
  for (const auto& group : groups)
    for (const auto& op : group) out.push_back(op);
  return out;
}

// The ZeRO knobs, gradient_clipping, the bf16 keys and overflow_protection are drawn last, below the operation units
// (harness/scenario/draw/draw_scenario.cc): an edit of the units moves the bytes they read, so
// they go with the operations.
json without_ops(json scenario) {
  scenario.erase("ops");
  scenario.erase("overflow_protection");  // drawn after the operations, as the knobs
  json& zero = scenario["config"]["zero_optimization"];
  zero = json{{"stage", zero["stage"]},
              {"stage3_param_persistence_threshold", zero["stage3_param_persistence_threshold"]}};
  scenario["config"].erase("gradient_clipping");  // drawn after the operations, as the knobs
  for (const char* key : {"bf16", "data_types", "communication_data_type"}) scenario["config"].erase(key);
  return scenario;
}

// Whether the scenario holds an `inject`: drawn after the operations, each is put before a
// forward or backward, and one drawn into a full list drops the list's last operation
// (draw_scenario.cc), so the edits' checks of operations and names skip such scenarios.
bool injected(const json& scenario) {
  for (const auto& op : scenario["ops"])
    if (op["op"] == "inject") return true;
  return false;
}

// An input whose operations reached the 64-operation cap had units cut short: left out.
bool uncut(const Bytes& input) { return decoded(input)["ops"].size() < kMaxDecodedOps; }

TEST(ChoiceSpans, LieInsideTheInputAreNonEmptyAndNestOrAreDisjoint) {
  size_t with_units = 0;
  for (const Bytes& input : sample_inputs()) {
    const auto spans = choice_spans(input.data(), input.size());
    for (const auto& span : spans) {
      ASSERT_LT(span.begin, span.end) << to_string(span.kind);
      ASSERT_LE(span.end, input.size()) << to_string(span.kind);
    }
    for (const auto& a : spans)
      for (const auto& b : spans) {
        const bool disjoint = a.end <= b.begin || b.end <= a.begin;
        const bool nested = (a.begin <= b.begin && b.end <= a.end) || (b.begin <= a.begin && a.end <= b.end);
        ASSERT_TRUE(disjoint || nested) << to_string(a.kind) << " and " << to_string(b.kind);
      }
    const auto units = units_of(spans);
    for (size_t k = 1; k < units.size(); ++k) ASSERT_LE(units[k].end, units[k - 1].begin) << "unit " << k;
    if (!input.empty()) {
      ASSERT_FALSE(spans.empty());
      EXPECT_EQ(spans[0].kind, ChoiceSpan::world);
      EXPECT_EQ(spans[0].end, input.size()) << "the world is the first choice, read from the last byte";
    }
    with_units += units.size() >= 2;
  }
  EXPECT_GT(with_units, sample_inputs().size() / 2) << "the sample exercises too few units";
}

// An edit of operation units, checked on every sample input whose operations were not cut: the
// edit's decoded scenario differs from the input's in its operations only, and they are one of
// the lists `candidates` makes from the input's operation groups (first: the operations before
// any unit; last: those of a unit that ran out of input). Returns how many inputs were edited.
using UnitEdit = std::function<std::optional<Bytes>(const Bytes&, const std::vector<ChoiceSpanAt>&)>;
using Candidates = std::function<std::vector<std::vector<json>>(const std::vector<json>& groups)>;
size_t check_unit_edit(const char* what, const UnitEdit& edit, const Candidates& candidates) {
  size_t edited = 0;
  for (const Bytes& input : sample_inputs()) {
    if (!uncut(input)) continue;
    const auto spans = choice_spans(input.data(), input.size());
    const auto out = edit(input, spans);
    if (!out) continue;
    const json before = decoded(input), after = decoded(*out);
    EXPECT_EQ(without_ops(after), without_ops(before)) << what;
    bool matched = false;
    for (const auto& groups : candidates(operation_groups(input, units_of(spans)))) {
      json expected = joined(groups);
      if (expected.size() > kMaxDecodedOps) expected.erase(expected.begin() + kMaxDecodedOps, expected.end());
      matched |= after["ops"] == expected;
    }
    EXPECT_TRUE(matched) << what << ": no such edit gives " << after["ops"].dump();
    ++edited;
  }
  return edited;
}

UnitEdit mutation(ChoiceMutation kind, unsigned seed) {
  return [kind, rng = std::make_shared<std::mt19937>(seed)](const Bytes& input, const auto& spans) {
    return mutate_choices(input, spans, kind, *rng);
  };
}

// Groups 1 .. size-2 are the units.
TEST(ChoiceMutator, DeleteUnitRemovesOneUnitsOperationsAndNothingElse) {
  const size_t edited =
      check_unit_edit("delete_unit", mutation(ChoiceMutation::delete_unit, 1), [](const auto& groups) {
        std::vector<std::vector<json>> out;
        for (size_t k = 1; k + 1 < groups.size(); ++k) {
          out.push_back(groups);
          out.back().erase(out.back().begin() + static_cast<std::ptrdiff_t>(k));
        }
        return out;
      });
  EXPECT_GT(edited, 100u);
}

TEST(ChoiceMutator, DuplicateUnitRepeatsOneUnitRightAfterItself) {
  const size_t edited =
      check_unit_edit("duplicate_unit", mutation(ChoiceMutation::duplicate_unit, 2), [](const auto& groups) {
        std::vector<std::vector<json>> out;
        for (size_t k = 1; k + 1 < groups.size(); ++k) {
          out.push_back(groups);
          out.back().insert(out.back().begin() + static_cast<std::ptrdiff_t>(k), groups[k]);
        }
        return out;
      });
  EXPECT_GT(edited, 100u);
}

TEST(ChoiceMutator, SwapUnitsExchangesTwoUnits) {
  const size_t edited = check_unit_edit("swap_units", mutation(ChoiceMutation::swap_units, 3), [](const auto& groups) {
    std::vector<std::vector<json>> out;
    for (size_t i = 1; i + 1 < groups.size(); ++i)
      for (size_t j = i + 1; j + 1 < groups.size(); ++j) {
        out.push_back(groups);
        std::swap(out.back()[i], out.back()[j]);
      }
    return out;
  });
  EXPECT_GT(edited, 100u);
}

// Spliced into itself: the donor unit reads in the context it was drawn in (the same modules).
TEST(ChoiceMutator, SpliceUnitInsertsAUnitOfTheOtherInput) {
  auto rng = std::make_shared<std::mt19937>(4);
  const UnitEdit splice = [rng](const Bytes& input, const auto& spans) {
    return splice_unit(input, spans, input, spans, *rng);
  };
  const size_t edited = check_unit_edit("splice_unit", splice, [](const auto& groups) {
    std::vector<std::vector<json>> out;
    for (size_t donor = 1; donor + 1 < groups.size(); ++donor)
      for (size_t at = 1; at < groups.size(); ++at) {  // before unit `at`, or before the last group
        out.push_back(groups);
        out.back().insert(out.back().begin() + static_cast<std::ptrdiff_t>(at), groups[donor]);
      }
    return out;
  });
  EXPECT_GT(edited, 100u);
}

TEST(ChoiceMutator, UnitEditsNeedTheUnitsTheyMove) {
  std::mt19937 rng(8);
  for (const Bytes& input : sample_inputs()) {
    const auto spans = choice_spans(input.data(), input.size());
    const size_t units = units_of(spans).size();
    EXPECT_EQ(mutate_choices(input, spans, ChoiceMutation::delete_unit, rng).has_value(), units >= 1);
    EXPECT_EQ(mutate_choices(input, spans, ChoiceMutation::duplicate_unit, rng).has_value(), units >= 1);
    EXPECT_EQ(mutate_choices(input, spans, ChoiceMutation::swap_units, rng).has_value(), units >= 2);
    EXPECT_EQ(splice_unit(input, spans, input, spans, rng).has_value(), units >= 1);
  }
}

// Calls `check(before, after)` with the decoded scenarios of every sample input `kind` edits and
// of its edit; returns how many it edited.
size_t for_each_edit(ChoiceMutation kind, unsigned seed, const std::function<void(const json&, const json&)>& check) {
  std::mt19937 rng(seed);
  size_t edited = 0;
  for (const Bytes& input : sample_inputs()) {
    const auto out = mutate_choices(input, choice_spans(input.data(), input.size()), kind, rng);
    if (!out) continue;
    check(decoded(input), decoded(*out));
    ++edited;
  }
  return edited;
}

void expect_same_operation_kinds(const json& before, const json& after) {
  ASSERT_EQ(after["ops"].size(), before["ops"].size());
  for (size_t i = 0; i < after["ops"].size(); ++i) ASSERT_EQ(after["ops"][i]["op"], before["ops"][i]["op"]);
}

TEST(ChoiceMutator, RedrawWorldKeepsTheTreeAndTheOperationKinds) {
  std::set<int> worlds_seen;
  const size_t edited = for_each_edit(ChoiceMutation::redraw_world, 5, [&](const json& before, const json& after) {
    ASSERT_EQ(after["tree"], before["tree"]);
    expect_same_operation_kinds(before, after);
    if (after["world_size"] != before["world_size"]) worlds_seen.insert(after["world_size"].get<int>());
  });
  const auto empty =
      std::count_if(sample_inputs().begin(), sample_inputs().end(), [](const Bytes& b) { return b.empty(); });
  EXPECT_EQ(edited, sample_inputs().size() - static_cast<size_t>(empty)) << "every non-empty input has a world choice";
  EXPECT_EQ(worlds_seen.size(), static_cast<size_t>(kMaxDecodedWorld)) << "some world was never redrawn to";
}

// Every attribute name a scenario holds: on modules, on parameters, in set_attr/del_attr.
std::set<std::string> names_in(const json& scenario) {
  std::set<std::string> out;
  for (const auto& node : scenario["tree"]) {
    if (node.contains("attrs"))
      for (const auto& entry : node["attrs"]) out.insert(entry["name"].get<std::string>());
    if (node.contains("param_attrs"))
      for (const auto& [param, entries] : node["param_attrs"].items())
        for (const auto& entry : entries) out.insert(entry["name"].get<std::string>());
  }
  for (const auto& op : scenario["ops"])
    if (op.contains("name")) out.insert(op["name"].get<std::string>());
  return out;
}

TEST(ChoiceMutator, CopyNameKeepsTheShapeAndDrawsOnlyNamesTheInputHad) {
  const size_t edited = for_each_edit(ChoiceMutation::copy_name, 6, [](const json& before, const json& after) {
    ASSERT_EQ(after["tree"].size(), before["tree"].size());
    if (injected(before) || injected(after)) return;
    expect_same_operation_kinds(before, after);
    const auto had = names_in(before);
    for (const auto& name : names_in(after)) EXPECT_TRUE(had.count(name)) << "a new name: " << name;
  });
  EXPECT_GT(edited, 100u);
}

// The operations after it may read otherwise (a module's parameter count decides whether a
// set_attr draws a parameter), so only the tree is compared.
TEST(ChoiceMutator, CopyLeafMakesOneNodeACopyOfAnotherAndKeepsTheRestOfTheTree) {
  size_t copies = 0;
  for_each_edit(ChoiceMutation::copy_leaf, 7, [&](const json& before_scenario, const json& after_scenario) {
    const json &before = before_scenario["tree"], &after = after_scenario["tree"];
    ASSERT_EQ(after.size(), before.size());
    std::vector<size_t> changed;
    for (size_t i = 0; i < after.size(); ++i)
      if (after[i] != before[i]) changed.push_back(i);
    ASSERT_LE(changed.size(), 1u) << "more than the copied leaf changed";
    if (changed.empty()) return;  // the two leaves were drawn alike
    bool copy_of_another = false;
    for (size_t i = 0; i < before.size(); ++i) copy_of_another |= i != changed[0] && before[i] == after[changed[0]];
    EXPECT_TRUE(copy_of_another) << "node " << changed[0] << " became " << after[changed[0]].dump();
    ++copies;
  });
  EXPECT_GT(copies, 50u);
}

TEST(ChoiceMutator, RedrawCutsLieBetweenWholeParts) {
  size_t checked = 0;
  for (const Bytes& input : sample_inputs()) {
    if (!uncut(input)) continue;
    const auto spans = choice_spans(input.data(), input.size());
    const auto units = units_of(spans);
    const std::vector<size_t> cuts = redraw_cuts(spans, input.size());
    ASSERT_EQ(cuts.size(), units.empty() ? 1 : units.size() + 2);
    ASSERT_EQ(cuts[0], input.size()) << "the first cut keeps nothing";
    const auto groups = operation_groups(input, units);
    for (size_t i = 1; i < cuts.size(); ++i) {
      const json kept = decoded(Bytes(input.begin() + static_cast<std::ptrdiff_t>(cuts[i]), input.end()));
      EXPECT_EQ(without_ops(kept), without_ops(decoded(input))) << "cut " << i;
      EXPECT_EQ(kept["ops"], joined(std::vector<json>(groups.begin(), groups.begin() + static_cast<std::ptrdiff_t>(i))))
          << "cut " << i << " at byte " << cuts[i];
      ++checked;
    }
  }
  EXPECT_GT(checked, 500u);
}

// Whether `out` ends with input[at, end): the bytes above the cut `at`, kept.
bool keeps_top(const Bytes& out, const Bytes& input, size_t at) {
  const size_t kept = input.size() - at;
  return out.size() > kept && std::equal(input.begin() + static_cast<std::ptrdiff_t>(at), input.end(),
                                         out.end() - static_cast<std::ptrdiff_t>(kept));
}

// A kept top decodes as the input cut there did, and the fresh bytes below it draw more.
TEST(ChoiceMutator, RedrawRestKeepsTheTopAboveACutAndDrawsTheRestAfresh) {
  std::mt19937 rng(9);
  size_t from_scratch = 0, kept_some = 0, grew = 0;
  for (const Bytes& input : sample_inputs()) {
    const auto spans = choice_spans(input.data(), input.size());
    const auto out = mutate_choices(input, spans, ChoiceMutation::redraw_rest, rng);
    ASSERT_TRUE(out.has_value()) << "every input can be drawn afresh";
    std::optional<size_t> cut;  // the cut whose top `out` kept, below at most kMaxFreshBytes new ones
    for (size_t at : redraw_cuts(spans, input.size()))
      if (keeps_top(*out, input, at) && out->size() - (input.size() - at) <= kMaxFreshBytes) cut = at;
    ASSERT_TRUE(cut.has_value()) << "no cut's top kept below 1.." << kMaxFreshBytes << " fresh bytes";
    if (*cut == input.size()) {
      EXPECT_GE(out->size(), kMinScenarioBytes) << "a new scenario too short for a whole tree";
      ++from_scratch;
      continue;
    }
    const json through_cut = decoded(Bytes(input.begin() + static_cast<std::ptrdiff_t>(*cut), input.end()));
    const json after = decoded(*out);
    if (injected(through_cut) || injected(after)) continue;
    EXPECT_EQ(without_ops(after), without_ops(through_cut));
    const json& kept = through_cut["ops"];
    const json& ops = after["ops"];
    ASSERT_GE(ops.size(), kept.size());
    EXPECT_EQ(json(std::vector<json>(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(kept.size()))), kept);
    ++kept_some;
    grew += ops.size() > kept.size();
  }
  EXPECT_GT(from_scratch, 20u);
  EXPECT_GT(kept_some, 100u);
  EXPECT_GT(grew, 100u) << "the fresh bytes drew too few operations";
}

size_t bytes_only(uint8_t*, size_t size, size_t) { return size; }  // marks the byte path: size unchanged
TEST(ChoiceMutator, CustomMutateMixesBothKindsAndStaysWithinMaxSize) {
  size_t choice_level = 0, byte_level = 0;
  for (unsigned seed = 0; seed < 200; ++seed) {
    Bytes input = sample_inputs()[seed % sample_inputs().size()];
    if (input.size() < 8) continue;
    const size_t size = input.size(), max_size = size + 4;
    input.resize(max_size);
    const size_t out = custom_mutate(input.data(), size, max_size, seed, DecodeLimits{}, bytes_only);
    ASSERT_LE(out, max_size);
    ++(out == size && std::equal(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(size),
                                 sample_inputs()[seed % sample_inputs().size()].begin())
           ? byte_level
           : choice_level);
  }
  EXPECT_GT(choice_level, 40u);
  EXPECT_GT(byte_level, 40u);
}

TEST(ChoiceMutator, TheEnvironmentSwitchesItAndABadValueNamesTheVariable) {
  ::unsetenv("ZEROCHECK_CHOICE_MUTATOR");
  EXPECT_TRUE(choice_mutator_from_environment()) << "on by default";
  ::setenv("ZEROCHECK_CHOICE_MUTATOR", "off", 1);
  EXPECT_FALSE(choice_mutator_from_environment());
  ::setenv("ZEROCHECK_CHOICE_MUTATOR", "on", 1);
  EXPECT_TRUE(choice_mutator_from_environment());
  ::setenv("ZEROCHECK_CHOICE_MUTATOR", "yes", 1);
  try {
    choice_mutator_from_environment();
    ADD_FAILURE() << "no UsageError";
  } catch (const zero3::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ZEROCHECK_CHOICE_MUTATOR is 'yes'"), std::string::npos) << e.what();
  }
  ::unsetenv("ZEROCHECK_CHOICE_MUTATOR");
}

}  // namespace
}  // namespace zerocheck::fuzz
