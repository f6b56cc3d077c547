// A structure-aware mutator for fuzz_scenario_ops: edits an input part by part
// (harness/scenario/choice_spans.h) the way Hypothesis edits a choice sequence, instead of byte by
// byte.
//
// An input is the sequence of choices the draw makes, read from its end backwards, so an operation
// unit, a leaf or an attribute name is one contiguous byte range, and removing, inserting or
// replacing a whole range leaves the choices of every earlier part as they were. The edits:
//   delete_unit     drop one operation unit (a step, a save and its load, an operation);
//   duplicate_unit  repeat one unit right after itself (initialize twice, step twice, ...);
//   swap_units      exchange two units (a load before its save, a step after a refusal, ...);
//   redraw_world    new bytes for the world-size choice, the tree and operations kept;
//   copy_name       one attribute name's choices copied over another's (two nodes colliding);
//   copy_leaf       one leaf's choices copied over another's, or one expert's over another's;
//   redraw_rest     the parts above a cut kept (none, the header, the header and the first k
//                   units), fresh random bytes for everything after them: random testing's reach
//                   (a whole new scenario, or new operations on a tree the corpus found) inside
//                   the coverage-guided loop;
// and across inputs, splice_unit inserts a unit of one input between two units of another.
// libFuzzer's byte mutations stay: custom_mutate makes half of its mutations with them.
//
// Whether it runs: ZEROCHECK_CHOICE_MUTATOR=on (the default) or off (every mutation is
// libFuzzer's own, crossover included), so one binary measures both (ci/fuzz-fault-hunt
// --choice-mutator). On by default since redraw_rest: with it the fuzzer finds every deep fault
// in every repetition within 10 minutes, which libFuzzer's mutations alone did not
// (fuzz/PERFORMANCE.md, "Time to find: with redraw_rest").
//
// Thread-safety: pure functions of their arguments (and of `rng`'s state).
#pragma once

#include "harness/scenario/choice_spans.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace zerocheck::fuzz {

using Bytes = std::vector<uint8_t>;

enum class ChoiceMutation { delete_unit, duplicate_unit, swap_units, redraw_world, copy_name, copy_leaf, redraw_rest };
inline constexpr ChoiceMutation kChoiceMutations[] = {
    ChoiceMutation::delete_unit, ChoiceMutation::duplicate_unit, ChoiceMutation::swap_units,
    ChoiceMutation::redraw_world, ChoiceMutation::copy_name,    ChoiceMutation::copy_leaf,
    ChoiceMutation::redraw_rest};  // last: custom_mutate gives it a share of its own

// redraw_rest draws 1..kMaxFreshBytes new bytes (about 0.3 operations a byte: up to about 50
// operations, as `zerocheck check`'s 24 units make), kMinScenarioBytes at least for a whole new
// scenario (random inputs that short decode to trees of one or two nodes).
inline constexpr size_t kMaxFreshBytes = 160;
inline constexpr size_t kMinScenarioBytes = 48;
const char* to_string(ChoiceMutation mutation);

// Returns `input` (whose parts are `spans`) with one edit of kind `mutation`, its parts picked with
// `rng`; nothing when the input lacks the parts the edit needs (two units to swap, a world choice
// that read bytes, ...).
std::optional<Bytes> mutate_choices(const Bytes& input, const std::vector<ChoiceSpanAt>& spans,
                                    ChoiceMutation mutation, std::mt19937& rng);

// Where redraw_rest may cut an input of `size` bytes whose parts are `spans`, highest first: the
// top (nothing kept), below the header (above the first unit), and below each whole unit.
std::vector<size_t> redraw_cuts(const std::vector<ChoiceSpanAt>& spans, size_t size);

// Returns `into` with one operation unit of `from` inserted before one of its units or after the
// last (picked with `rng`); nothing when `from` has no unit.
std::optional<Bytes> splice_unit(const Bytes& into, const std::vector<ChoiceSpanAt>& into_spans, const Bytes& from,
                                 const std::vector<ChoiceSpanAt>& from_spans, std::mt19937& rng);

// libFuzzer's LLVMFuzzerMutate: mutates data[0, size) in place within max_size, returns the size.
using ByteMutator = size_t (*)(uint8_t* data, size_t size, size_t max_size);

// The body of LLVMFuzzerCustomMutator for a target decoding within `limits`: half of the seeds
// `byte_mutate`, a quarter redraw_rest, a quarter another edit of kChoiceMutations; `byte_mutate`
// also when no edit applies within max_size. redraw_rest keeps nothing half of the time, the
// header a quarter, the header and the first k units (k >= 0 picked) a quarter.
size_t custom_mutate(uint8_t* data, size_t size, size_t max_size, unsigned seed, const DecodeLimits& limits,
                     ByteMutator byte_mutate);

// The body of LLVMFuzzerCustomCrossOver: splice_unit(a, b) into `out`; 0 (libFuzzer then picks
// another mutation) when b has no unit or the result would not fit in max_out_size.
size_t custom_cross_over(const uint8_t* a, size_t a_size, const uint8_t* b, size_t b_size, uint8_t* out,
                         size_t max_out_size, unsigned seed, const DecodeLimits& limits);

// Returns whether ZEROCHECK_CHOICE_MUTATOR asks for the choice-level edits: unset or "on": yes,
// "off": no. Throws zero3::UsageError naming the variable and both values for anything else.
bool choice_mutator_from_environment();

}  // namespace zerocheck::fuzz
