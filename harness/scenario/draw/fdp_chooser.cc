#include "harness/scenario/draw/fdp_chooser.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <cassert>

namespace zerocheck {

FdpChooser::FdpChooser(const uint8_t* data, size_t size) : in_(std::make_unique<FuzzedDataProvider>(data, size)) {}

FdpChooser::~FdpChooser() = default;

int64_t FdpChooser::integer(int64_t lo, int64_t hi) {
  assert(lo <= hi);
  const uint64_t choices = static_cast<uint64_t>(hi - lo) + 1;
  assert(choices <= (uint64_t{1} << 32));
  if (choices == 1) return lo;
  uint64_t span = 256;  // values of the bytes read: 256^k >= choices
  size_t bytes = 1;     // k
  while (span < choices) span <<= 8, ++bytes;
  const uint64_t accepted = span - span % choices;  // a whole number of copies of the range
  for (;;) {
    // Exhausted: 0, which is accepted, so the loop ends and the choice is lo.
    if (in_->remaining_bytes() < bytes) ++short_reads_;
    const uint64_t value = in_->ConsumeIntegralInRange<uint64_t>(0, span - 1);
    if (value < accepted) return lo + static_cast<int64_t>(value % choices);
  }
}

bool FdpChooser::another() { return in_->remaining_bytes() > 0; }

size_t FdpChooser::remaining() const { return in_->remaining_bytes(); }

}  // namespace zerocheck
