#include "fuzz/choice_mutator.h"

#include "engine/errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

namespace zerocheck::fuzz {
namespace {

static_assert(kChoiceMutations[std::size(kChoiceMutations) - 1] == ChoiceMutation::redraw_rest,
              "custom_mutate draws the other edits from all but the last");

size_t below(std::mt19937& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// input[0, at) + insert + input[at, end).
Bytes inserted(const Bytes& input, size_t at, const uint8_t* insert, size_t length) {
  Bytes out(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), insert, insert + length);
  out.insert(out.end(), input.begin() + static_cast<std::ptrdiff_t>(at), input.end());
  return out;
}

// `input` with target's bytes replaced by source's: the part now draws as the source part did.
Bytes copied_over(const Bytes& input, const ChoiceSpanAt& source, const ChoiceSpanAt& target) {
  const Bytes part(input.begin() + static_cast<std::ptrdiff_t>(source.begin),
                   input.begin() + static_cast<std::ptrdiff_t>(source.end));
  Bytes out(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(target.begin));
  out.insert(out.end(), part.begin(), part.end());
  out.insert(out.end(), input.begin() + static_cast<std::ptrdiff_t>(target.end), input.end());
  return out;
}

// Two different parts of one kind, copied source over target; nothing with fewer than two.
std::optional<Bytes> copy_part(const Bytes& input, const std::vector<ChoiceSpanAt>& parts, std::mt19937& rng) {
  if (parts.size() < 2) return std::nullopt;
  const size_t source = below(rng, parts.size());
  size_t target = below(rng, parts.size() - 1);
  if (target >= source) ++target;
  return copied_over(input, parts[source], parts[target]);
}

}  // namespace

const char* to_string(ChoiceMutation mutation) {
  switch (mutation) {
    case ChoiceMutation::delete_unit: return "delete_unit";
    case ChoiceMutation::duplicate_unit: return "duplicate_unit";
    case ChoiceMutation::swap_units: return "swap_units";
    case ChoiceMutation::redraw_world: return "redraw_world";
    case ChoiceMutation::copy_name: return "copy_name";
    case ChoiceMutation::copy_leaf: return "copy_leaf";
    case ChoiceMutation::redraw_rest: return "redraw_rest";
  }
  return "?";
}

std::vector<size_t> redraw_cuts(const std::vector<ChoiceSpanAt>& spans, size_t size) {
  std::vector<size_t> cuts{size};
  for (const auto& unit : spans_of(spans, ChoiceSpan::operation_unit)) {
    if (cuts.back() != unit.end) cuts.push_back(unit.end);
    cuts.push_back(unit.begin);
  }
  return cuts;
}

std::optional<Bytes> mutate_choices(const Bytes& input, const std::vector<ChoiceSpanAt>& spans,
                                    ChoiceMutation mutation, std::mt19937& rng) {
  const std::vector<ChoiceSpanAt> units = spans_of(spans, ChoiceSpan::operation_unit);
  switch (mutation) {
    case ChoiceMutation::delete_unit: {
      if (units.empty()) return std::nullopt;
      const ChoiceSpanAt& unit = units[below(rng, units.size())];
      Bytes out(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(unit.begin));
      out.insert(out.end(), input.begin() + static_cast<std::ptrdiff_t>(unit.end), input.end());
      return out;
    }
    case ChoiceMutation::duplicate_unit: {
      if (units.empty()) return std::nullopt;
      const ChoiceSpanAt& unit = units[below(rng, units.size())];
      // Below the unit: read right after it.
      return inserted(input, unit.begin, input.data() + unit.begin, unit.end - unit.begin);
    }
    case ChoiceMutation::swap_units: {
      if (units.size() < 2) return std::nullopt;
      size_t first = below(rng, units.size()), second = below(rng, units.size() - 1);
      if (second >= first) ++second;
      // Units are listed in operation order, so the later one lies lower in the input.
      const ChoiceSpanAt& early = units[std::min(first, second)];
      const ChoiceSpanAt& late = units[std::max(first, second)];
      auto at = [&](size_t i) { return input.begin() + static_cast<std::ptrdiff_t>(i); };
      Bytes out(input.begin(), at(late.begin));
      out.insert(out.end(), at(early.begin), at(early.end));
      out.insert(out.end(), at(late.end), at(early.begin));
      out.insert(out.end(), at(late.begin), at(late.end));
      out.insert(out.end(), at(early.end), input.end());
      return out;
    }
    case ChoiceMutation::redraw_world: {
      const std::vector<ChoiceSpanAt> world = spans_of(spans, ChoiceSpan::world);
      if (world.empty()) return std::nullopt;
      Bytes out = input;
      // Every byte changes: a different value for the choice unless it wraps to the same one.
      for (size_t i = world[0].begin; i < world[0].end; ++i)
        out[i] = static_cast<uint8_t>(out[i] + 1 + below(rng, 255));
      return out;
    }
    case ChoiceMutation::copy_name: return copy_part(input, spans_of(spans, ChoiceSpan::attribute_name), rng);
    case ChoiceMutation::copy_leaf: {
      // Experts only over experts: their kinds come from another table, so their bytes mean
      // another leaf (of another length) elsewhere.
      const std::vector<ChoiceSpanAt> leaves = spans_of(spans, ChoiceSpan::leaf);
      const std::vector<ChoiceSpanAt> experts = spans_of(spans, ChoiceSpan::expert);
      if (leaves.size() < 2 || (experts.size() >= 2 && rng() % 2 == 0)) return copy_part(input, experts, rng);
      return copy_part(input, leaves, rng);
    }
    case ChoiceMutation::redraw_rest: {
      // Half the time a new scenario, a quarter new operations on this tree, a quarter more after
      // a whole unit. A new scenario gets kMinScenarioBytes at least: fewer cut its tree short.
      const std::vector<size_t> cuts = redraw_cuts(spans, input.size());
      const size_t quarter = cuts.size() == 1 ? 0 : below(rng, 4);
      const size_t cut = quarter <= 1 ? cuts[0] : quarter == 2 ? cuts[1] : cuts[1 + below(rng, cuts.size() - 1)];
      const size_t least = cut == input.size() ? kMinScenarioBytes : 1;
      Bytes out(least + below(rng, kMaxFreshBytes - least + 1));
      for (auto& byte : out) byte = static_cast<uint8_t>(rng());
      // Below the kept top: read after the parts above the cut.
      out.insert(out.end(), input.begin() + static_cast<std::ptrdiff_t>(cut), input.end());
      return out;
    }
  }
  return std::nullopt;
}

std::optional<Bytes> splice_unit(const Bytes& into, const std::vector<ChoiceSpanAt>& into_spans, const Bytes& from,
                                 const std::vector<ChoiceSpanAt>& from_spans, std::mt19937& rng) {
  const std::vector<ChoiceSpanAt> donors = spans_of(from_spans, ChoiceSpan::operation_unit);
  if (donors.empty()) return std::nullopt;
  const ChoiceSpanAt& donor = donors[below(rng, donors.size())];
  // Where a unit can go: above each unit (read before it), or below the last (read after it); an
  // input without units reads its first unit from its lowest bytes.
  const std::vector<ChoiceSpanAt> units = spans_of(into_spans, ChoiceSpan::operation_unit);
  std::vector<size_t> places;
  for (const auto& unit : units) places.push_back(unit.end);
  places.push_back(units.empty() ? 0 : units.back().begin);
  return inserted(into, places[below(rng, places.size())], from.data() + donor.begin, donor.end - donor.begin);
}

size_t custom_mutate(uint8_t* data, size_t size, size_t max_size, unsigned seed, const DecodeLimits& limits,
                     ByteMutator byte_mutate) {
  std::mt19937 rng(seed);
  // Half libFuzzer's, a quarter redraw_rest (random testing's reach, which the deep faults need:
  // fuzz/PERFORMANCE.md), a quarter the other edits.
  const unsigned coin = rng() % 4;
  if (coin >= 2) return byte_mutate(data, size, max_size);
  const Bytes input(data, data + size);
  const std::vector<ChoiceSpanAt> spans = choice_spans(data, size, limits);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const ChoiceMutation mutation = coin == 0 && attempt == 0
                                        ? ChoiceMutation::redraw_rest
                                        : kChoiceMutations[below(rng, std::size(kChoiceMutations) - 1)];
    const std::optional<Bytes> out = mutate_choices(input, spans, mutation, rng);
    if (!out || out->size() > max_size || *out == input) continue;
    std::memcpy(data, out->data(), out->size());
    return out->size();
  }
  return byte_mutate(data, size, max_size);
}

size_t custom_cross_over(const uint8_t* a, size_t a_size, const uint8_t* b, size_t b_size, uint8_t* out,
                         size_t max_out_size, unsigned seed, const DecodeLimits& limits) {
  std::mt19937 rng(seed);
  const Bytes into(a, a + a_size), from(b, b + b_size);
  const std::optional<Bytes> spliced =
      splice_unit(into, choice_spans(a, a_size, limits), from, choice_spans(b, b_size, limits), rng);
  if (!spliced || spliced->empty() || spliced->size() > max_out_size) return 0;
  std::memcpy(out, spliced->data(), spliced->size());
  return spliced->size();
}

bool choice_mutator_from_environment() {
  const char* value = std::getenv("ZEROCHECK_CHOICE_MUTATOR");
  if (value == nullptr || std::string(value) == "on") return true;
  if (std::string(value) == "off") return false;
  throw zero3::UsageError(
      fmt::format("ZEROCHECK_CHOICE_MUTATOR is '{}': it must be 'on' (the default) or 'off'", value));
}

}  // namespace zerocheck::fuzz
