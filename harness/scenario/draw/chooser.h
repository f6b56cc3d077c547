// Chooser: where a random draw gets its choices (harness/scenario/draw/draw_scenario.h).
//
// The scenario draw asks a Chooser for every choice it makes. Two implementations feed it:
// RcChooser (rapidcheck, shrinking intact: rc_chooser.h) and FdpChooser (libFuzzer bytes:
// fdp_chooser.h). Only integer() and another() are theirs; weighted() and boolean() are built on
// integer() here, once, so a weight table means the same under both.
//
// Every choice's smallest value is its first: integer()'s `lo`, weighted()'s index 0. rapidcheck
// shrinks toward it and an exhausted fuzz input picks it, so tables list their simplest entry first.
//
// Thread-safety: a Chooser is stateful; use one per draw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zerocheck {

class Chooser {
 public:
  virtual ~Chooser() = default;

  // Returns a whole number in [lo, hi], each equally likely.
  // Requires: lo <= hi and hi - lo < 2^32.
  virtual int64_t integer(int64_t lo, int64_t hi) = 0;

  // Returns whether the draw takes one more operation unit (the one chooser-specific rule: the
  // fuzz input continues while bytes remain, rapidcheck draws a budget that shrinks toward none).
  virtual bool another() = 0;

  // Returns an index into `weights` with probability weights[i] / sum (a zero weight is never
  // picked). Requires: every weight >= 0 and the sum > 0.
  size_t weighted(const std::vector<int>& weights);

  // Returns true with probability true_weight / (false_weight + true_weight); false is the
  // smallest choice.
  bool boolean(int false_weight, int true_weight);
};

}  // namespace zerocheck
