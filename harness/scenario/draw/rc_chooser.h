// RcChooser: a Chooser that draws with rapidcheck, so a drawn scenario shrinks.
//
// Every choice is one `*gen` pick, so rapidcheck's gen::exec records it and shrinks it toward
// its smallest value (integer()'s lo, a table's first entry), re-running the draw after each
// shrink. Choices are drawn at rapidcheck's nominal size, uniformly whatever the current size,
// so their distribution is the fuzz decoder's (FdpChooser); the size only scales the operation
// budget (another()), so small sizes give short scenarios and a shrink drops operations from the end.
//
// Requires: used inside rc::gen::exec or a property body (picks need rapidcheck's context).
// Thread-safety: one per draw.
#pragma once

#include "harness/scenario/draw/chooser.h"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace zerocheck {

class RcChooser final : public Chooser {
 public:
  // another() answers yes for a budget of units drawn once, from 0..max_units scaled by size.
  explicit RcChooser(size_t max_units) : max_units_(max_units) {}

  int64_t integer(int64_t lo, int64_t hi) override;
  bool another() override;

 private:
  size_t max_units_;
  std::optional<size_t> units_left_;
};

}  // namespace zerocheck
