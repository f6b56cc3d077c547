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
// The draw also says where the choices of some parts begin and end (span_begins/span_ends): a
// recorder (harness/scenario/choice_spans.h) listens, so a structure-aware fuzz mutator can move an
// operation unit or an attribute name as a whole; the answers never depend on it.
//
// Thread-safety: a Chooser is stateful; use one per draw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zerocheck {

// The parts of a draw whose choices can be moved, copied or redrawn as a whole.
enum class ChoiceSpan {
  world,           // the world size's choice
  leaf,            // a node without children under an ordinary container, its attributes included
  expert,          // an MoE's child (drawn from the kinds' expert weights), its attributes included
  attribute_name,  // the name of a module's, a parameter's or a set_attr/del_attr's attribute
  operation_unit,  // one unit of the operation list: an operation, a training step or a save and its load
};

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

  // Called before the first and after the last choice of a part; spans nest (a leaf holds names).
  virtual void span_begins(ChoiceSpan) {}
  virtual void span_ends(ChoiceSpan) {}
};

}  // namespace zerocheck
