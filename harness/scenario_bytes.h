// Bytes -> Scenario: the decoder behind the scenario_ops fuzzer (fuzz/).
//
// libFuzzer mutates bytes; this turns any byte string into the one Scenario type the properties,
// `zerocheck replay` and the CLI use, so a fuzzer finding is an ordinary scenario file. The
// shapes follow harness/generators.cc (node kinds and their weights, Offset shapes, values,
// operation mix, expert ids under `attr_mod id` placement) but stay small, so one input runs in
// milliseconds: world 1..4, features 1..4, at most kMaxDecodedNodes nodes and kMaxDecodedOps
// operations; DecodeLimits narrows that further (a fixed world, fewer nodes or operations) for
// fast campaigns. Attribute names come mostly from the collision dictionary (collision_names.h).
//
// Invariants: every byte string, the empty one included, decodes to a scenario that passes
// validate() and reads back from its JSON form. Choices are drawn with FuzzedDataProvider, which
// takes integers from the end of the input and strings from the front; operations are decoded
// until the input runs out, so a truncated input decodes to a valid, shorter scenario. An
// exhausted input always picks a table's first entry (the smallest choice).
//
// Thread-safety: a pure function of its input; safe to call from several threads.
#pragma once

#include "harness/scenario.h"

#include <cstddef>
#include <cstdint>

namespace zerocheck {

inline constexpr int kMaxDecodedWorld = 4;
inline constexpr size_t kMaxDecodedNodes = 12;
inline constexpr size_t kMaxDecodedOps = 64;

// Narrows what the decoder produces without changing which bytes it reads: a fixed world still
// consumes the world byte, so one corpus serves every setting, and the limits only cut the tree
// and the operation list short.
struct DecodeLimits {
  int world = 0;                      // 0: decoded from the input; else 1..kMaxDecodedWorld, fixed
  size_t max_nodes = kMaxDecodedNodes;  // 1..kMaxDecodedNodes
  size_t max_ops = kMaxDecodedOps;      // 0..kMaxDecodedOps

  // Throws UsageError naming the field and value when a limit is out of range.
  void validate() const;
};

// Returns the scenario `data[0, size)` encodes. Never throws for any input (limits validated).
Scenario scenario_from_bytes(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

}  // namespace zerocheck
