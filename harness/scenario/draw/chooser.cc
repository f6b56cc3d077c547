#include "harness/scenario/draw/chooser.h"

#include <cassert>

namespace zerocheck {

size_t Chooser::weighted(const std::vector<int>& weights) {
  int64_t total = 0;
  for (int w : weights) {
    assert(w >= 0);
    total += w;
  }
  assert(total > 0);
  int64_t r = integer(0, total - 1);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (r < weights[i]) return i;
    r -= weights[i];
  }
  return 0;  // unreachable: r < total
}

bool Chooser::boolean(int false_weight, int true_weight) { return weighted({false_weight, true_weight}) == 1; }

}  // namespace zerocheck
