// Engine configurations, aliases and the small model the engine tests share.
#pragma once

#include "engine/config.h"
#include "engine/engine.h"
#include "engine/layers.h"

#include <memory>
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

// Linear 3->5 then 5->2, its parameters seeded (seed 3): small enough to reason about by hand.
inline std::shared_ptr<Sequential> two_linears() {
  auto root = std::make_shared<Sequential>();
  root->push_back(std::make_shared<Linear>(3, 5));
  root->push_back(std::make_shared<Linear>(5, 2));
  init_parameters(*root, 3);
  return root;
}

// rows[rank][param] = what that rank holds, gathered from every rank thread.
using ResidencyTable = std::vector<std::vector<ParamResidency>>;

}  // namespace zero3
