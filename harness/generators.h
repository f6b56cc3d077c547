// Random scenarios for rapidcheck properties and `zerocheck check`.
//
// Trees are bounded (depth <= 4) and mix every node kind, Offsets of odd shapes (zero-size,
// prime numel, fewer elements than ranks), tied submodules, frozen parameters and experts.
// User attributes come mostly from the collision dictionary. Operation lists (<= max_ops)
// start with an initialize more often than not and include repeated initializes of every kind.
// Everything is built with rapidcheck combinators, so shrinking drops operations and subtrees,
// shrinks shapes, values and names.
#pragma once

#include "harness/scenario.h"

#include <rapidcheck.h>

namespace zerocheck {

struct GeneratorOptions {
  int world_size = 0;  // 0: drawn from 1..4
  int max_ops = 24;    // at most 64
  int max_depth = 4;
};

rc::Gen<Scenario> gen_scenario(const GeneratorOptions& options);

// Returns the module paths of a tree and each module's parameter names (for attribute ops).
std::vector<std::pair<std::string, std::vector<std::string>>> module_paths_of(const Scenario& scenario);

}  // namespace zerocheck
