// Where each part of a decoded scenario sits in its fuzz input: the map a structure-aware mutator
// (fuzz/choice_mutator.h) edits by.
//
// FuzzedDataProvider reads a choice's bytes from the end of the input backwards, so the choices
// of one part (an operation unit, a leaf, an attribute name: Chooser's ChoiceSpan) are one
// contiguous byte range, and the input reads, from its last byte to its first: the world, the
// rest of the header, the tree, the placement, then the operation units in order, then the ZeRO
// knobs. Removing or inserting whole ranges below a part therefore leaves every choice above it as
// it was (the knobs, below every unit, move with any edit of the units).
//
// A part's bytes decode to the same choices wherever they stand, as long as the part is drawn in
// the same context: an operation unit within its own input (its module choices index that tree),
// a leaf among leaves or an expert among experts (their kind tables differ), an attribute name
// anywhere.
//
// Invariants: spans lie inside the input, are non-empty and whole: a part that ran out of input
// (it read zeros past the start) is left out. They nest or are disjoint, and are listed in the
// order their parts end, so operation units come in operation order, each below the one before.
//
// Thread-safety: a pure function of its input.
#pragma once

#include "harness/scenario/bytes.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zerocheck {

struct ChoiceSpanAt {
  ChoiceSpan kind;
  size_t begin, end;  // the part's bytes: data[begin, end)
  bool operator==(const ChoiceSpanAt& other) const {
    return kind == other.kind && begin == other.begin && end == other.end;
  }
};

// Returns the spans of the parts that decoding `data[0, size)` within `limits` draws.
// Throws UsageError for invalid limits.
std::vector<ChoiceSpanAt> choice_spans(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

// Returns the spans of one kind, in their order.
std::vector<ChoiceSpanAt> spans_of(const std::vector<ChoiceSpanAt>& spans, ChoiceSpan kind);

// "world", "leaf", "expert", "attribute_name", "operation_unit".
const char* to_string(ChoiceSpan kind);

}  // namespace zerocheck
