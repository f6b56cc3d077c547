// Engine configurations and aliases the engine tests share.
#pragma once

#include "engine/config.h"
#include "engine/engine.h"

#include <vector>

namespace zero3 {

// Every parameter partitioned, none kept whole for being small.
inline Config all_partitioned() {
  Config c;
  c.zero_optimization.stage3_param_persistence_threshold = 0;
  return c;
}

// All partitioned, and Expert modules placed whole on rank (user attribute `id`) mod N: the
// seed bug's policy.
inline Config placed_by_id() {
  Config c = all_partitioned();
  c.placement.kind = PlacementSpec::Kind::attr_mod;
  c.placement.attr = "id";
  return c;
}

// rows[rank][param] = what that rank holds, gathered from every rank thread.
using ResidencyTable = std::vector<std::vector<ParamResidency>>;

}  // namespace zero3
