// `zerocheck export`: scenarios for the upstream DeepSpeed replay (harness/deepspeed/), chosen
// to cover the collision dictionary and both forms of repeated initialize, plus the seed bug's
// scenario by name, with a manifest that says what the set covers.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace zerocheck {

struct ExportOptions {
  int64_t cases = 10;  // random scenarios, on top of the dictionary and seed scenarios
  uint64_t seed = 1;
  int world_size = 1;
  std::string out_dir;
  // The index of the first random scenario (random-<first> ...): draw k of a seed is the same
  // scenario whichever export writes it, so a campaign drawing in slices repeats none.
  int64_t first = 0;
  bool random_only = false;  // no dictionary, seed-bug or zero-size scenarios
};

// Writes the scenarios to OUT/scenarios/ and OUT/manifest.json; returns the manifest.
// Throws zero3::UsageError when the directory cannot be written.
nlohmann::json export_scenarios(const ExportOptions& options);

}  // namespace zerocheck
