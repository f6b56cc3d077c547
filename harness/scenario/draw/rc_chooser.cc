#include "harness/scenario/draw/rc_chooser.h"

#include <rapidcheck.h>

#include <cassert>

namespace zerocheck {

int64_t RcChooser::integer(int64_t lo, int64_t hi) {
  assert(lo <= hi);
  if (lo == hi) return lo;  // no choice, no pick (FdpChooser reads no byte either)
  // gen::inRange scales its range by the size; at the nominal size it spans all of it.
  return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange<int64_t>(lo, hi + 1));
}

bool RcChooser::another() {
  if (!units_left_) units_left_ = *rc::gen::inRange<size_t>(0, max_units_ + 1);
  if (*units_left_ == 0) return false;
  --*units_left_;
  return true;
}

}  // namespace zerocheck
