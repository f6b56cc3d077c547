// draw_scenario: the one random scenario language, for the rapidcheck properties, `zerocheck
// check`, `zerocheck export` and the scenario_ops fuzzer alike.
//
// The tables of kinds, operations and optimizers, with their draw weights, are harness/scenario/schema.h's;
// every other choice (ranges, Offset shapes, attribute names and values, expert ids, placement,
// config values, routes, operation units) is a table of its own, once, in draw_scenario.cc.
// A scenario is drawn in this order:
// - world (1..kMaxDrawnWorld), seed, features, batch, optimizer, learning rate, persistence
//   threshold, gradient accumulation, placement kind;
// - a tree of depth <= kMaxDrawnDepth: containers of one to three children (sometimes one listed
//   twice: tied weights), MoE children drawn by their kinds' expert weights, Offsets of odd shapes
//   (zero-size, prime numel, fewer elements than ranks), frozen parameters, user attributes on
//   modules and parameters named mostly from the collision dictionary (collision_names.h), and
//   under `attr_mod id` placement Experts that mostly carry the user's `id`;
// - a placement map's owners for some experts;
// - operations: an initialize first more often than not, then units while Chooser::another()
//   says so: one operation, a training step (forward, backward, step) or a save with its load
//   (which sometimes also loads into a world of 1..kMaxDrawnWorld ranks);
// - last (training profile): the ZeRO knobs and precision keys, then overflow protection and up
//   to two `inject`s, each inserted right before a forward or backward that takes it; with
//   DrawLimits::fp16 only, after all of them, fp16.enabled and its keys.
//
// Invariants: every drawn scenario passes validate() and stays inside schema::limits. DrawLimits
// only cut: a fixed world still draws the world (then replaces it) and every later choice's range
// is independent of the world, so a fuzz input decodes to the same tree and operations whatever
// the world; max_depth and max_nodes stop the tree early, max_ops the operation list.
//
// Thread-safety: a pure function of its chooser's answers.
#pragma once

#include "harness/scenario/draw/chooser.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

#include <cstddef>
#include <cstdint>

namespace zerocheck {

inline constexpr int kMaxDrawnWorld = 4;
inline constexpr size_t kMaxDrawnNodes = 12;
inline constexpr size_t kMaxDrawnOps = 64;
inline constexpr int kMaxDrawnDepth = 4;

// What a draw is for. `training`: the whole language (properties, `check`, the scenario_ops
// fuzzer). `attributes`: the property the project exists for, fast: no operation that trains or
// checkpoints (initialize and repeated initialize with the same or a fresh optimizer, attribute
// writes and deletes, forward, release, destroy; single operations, no units), trees of up to
// kMaxAttributesNodes nodes (containers of up to four children, depth up to five) over worlds of
// up to kMaxAttributesWorld ranks: the fuzz_attrs target's language.
enum class DrawProfile { training, attributes };
inline constexpr int kMaxAttributesWorld = 8;
inline constexpr size_t kMaxAttributesNodes = 64;
inline constexpr int kMaxAttributesDepth = 5;

// The widest limits of a profile.
struct ProfileBounds {
  int max_world;
  size_t max_nodes, max_ops;
  int max_depth;
};
ProfileBounds bounds_of(DrawProfile profile);
// "training" / "attributes".
const char* to_string(DrawProfile profile);

// A fixed world may be any size the language allows (1..8: eight ranks is the common node),
// whatever the profile draws on its own (training: 1..kMaxDrawnWorld, so the corpora keep their
// meaning).
inline constexpr int kMaxFixedWorld = static_cast<int>(schema::limits::world_size.hi);

struct DrawLimits {
  DrawLimits() = default;
  // The widest limits of `profile`.
  explicit DrawLimits(DrawProfile p);
  DrawProfile profile = DrawProfile::training;
  int world = 0;                       // 0: as drawn; else 1..kMaxFixedWorld, fixed
  size_t max_nodes = kMaxDrawnNodes;   // 1..the profile's max_nodes
  size_t max_ops = kMaxDrawnOps;       // 0..kMaxDrawnOps
  int max_depth = kMaxDrawnDepth;      // 1..the profile's max_depth
  // Training profile: after every other choice, draw fp16.enabled (with its dtypes and scaler
  // keys) for most scenarios without a placement policy (`check --fp16`, `mutants` for the fp16
  // faults). Off, the draw reads no byte for it: the default draw, the corpora and the upstream
  // export (DeepSpeed's CPU accelerator refuses fp16 at initialize) never draw fp16.
  bool fp16 = false;

  // Throws UsageError naming the field, its value and the range when a limit is out of range.
  void validate() const;
};

// Returns a scenario drawn with `chooser`'s answers. Throws UsageError for invalid limits.
Scenario draw_scenario(Chooser& chooser, const DrawLimits& limits = {});

// `scenario` with its ZeRO knobs drawn again from `seed`, for I10 (the knobs that must not change
// a number): each size knob anew from the draw's own table (on, one below or one above one of the
// scenario's sizes, the default or the smallest), each flag the other way; the stage, the
// persistence threshold and everything else as they were. A pure function of both.
Scenario with_zero_knobs_redrawn(const Scenario& scenario, uint64_t seed);

}  // namespace zerocheck
