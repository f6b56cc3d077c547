// Random scenarios for rapidcheck properties, `zerocheck check` and `zerocheck export`.
//
// A thin wrapper: the language is draw_scenario's (harness/scenario/draw/draw_scenario.h), drawn with an
// RcChooser inside gen::exec, so the scenarios are the fuzz decoder's (same tables, same
// distribution) and a failing one shrinks: every choice toward its smallest value (a table's
// first row), and the operation list from its end. rapidcheck's size scales only the number of
// operation units.
#pragma once

#include "harness/scenario/draw/draw_scenario.h"
#include "harness/scenario/scenario.h"

#include <rapidcheck.h>

namespace zerocheck {

struct GeneratorOptions {
  int fixed_world = 0;  // 0: each scenario draws its world from 1..kMaxDrawnWorld; else 1..kMaxFixedWorld
  int max_ops = 24;    // 0..kMaxDrawnOps
  int max_depth = kMaxDrawnDepth;
  bool fp16 = false;   // DrawLimits::fp16: draw fp16.enabled for most scenarios
};

// Returns the generator. Throws UsageError (when drawn) for options out of range.
rc::Gen<Scenario> gen_scenario(const GeneratorOptions& options);

}  // namespace zerocheck
