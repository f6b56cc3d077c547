// Bytes -> Scenario: the decoder behind the scenario_ops fuzzer (fuzz/).
//
// libFuzzer mutates bytes; this turns any byte string into the one Scenario type the properties,
// `zerocheck replay` and the CLI use, so a fuzzer finding is an ordinary scenario file. A thin
// wrapper: the language is draw_scenario's (harness/scenario/draw/draw_scenario.h), the rapidcheck
// generators' too, with its choices read by an FdpChooser (harness/scenario/draw/fdp_chooser.h) and
// operation units drawn while input remains. DecodeLimits narrow it (a fixed world, fewer nodes
// or operations) for fast campaigns without changing which bytes are read.
//
// Invariants: every byte string, the empty one included, decodes to a scenario that passes
// validate() and reads back from its JSON form; a truncated input decodes to a valid, shorter
// scenario; an exhausted input always picks a choice's smallest value.
//
// Thread-safety: a pure function of its input; safe to call from several threads.
#pragma once

#include "harness/scenario/draw/draw_scenario.h"
#include "harness/scenario/scenario.h"

#include <cstddef>
#include <cstdint>

namespace zerocheck {

// The fuzz campaigns' names for the draw's limits (ZEROCHECK_FUZZ_WORLD / _MAX_NODES / _MAX_OPS).
using DecodeLimits = DrawLimits;
inline constexpr int kMaxDecodedWorld = kMaxDrawnWorld;
inline constexpr size_t kMaxDecodedNodes = kMaxDrawnNodes;
inline constexpr size_t kMaxDecodedOps = kMaxDrawnOps;

// Returns the scenario `data[0, size)` encodes. Throws UsageError for invalid limits, never for
// any input.
Scenario scenario_from_bytes(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

}  // namespace zerocheck
