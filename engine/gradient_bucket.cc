#include "engine/gradient_bucket.h"

#include "engine/partitioner.h"

#include <ATen/ATen.h>

namespace zero3 {

void GradientBucket::add(ManagedParam& p, at::Tensor padded, const Deliver& deliver) {
  if (elements_ > 0 && elements_ + p.layout.numel > capacity_) flush(deliver);
  held_.push_back(Held{&p, std::move(padded)});
  elements_ += p.layout.numel;
}

void GradientBucket::flush(const Deliver& deliver) {
  if (held_.empty()) return;
  size_t first = held_.size();
  faults_.bucket_flush_split(held_.size(), first);
  reduce(0, first, deliver);
  if (first < held_.size()) reduce(first, held_.size(), deliver);
  clear();
}

void GradientBucket::clear() {
  held_.clear();
  elements_ = 0;
}

void GradientBucket::reduce(size_t begin, size_t end, const Deliver& deliver) {
  if (begin == end) return;
  const int64_t world = comm_.world_size();
  // Row j of each [N, chunk] view is chunk j of that gradient; side by side, row j of the
  // concatenation is everything rank j receives, contiguous.
  std::vector<at::Tensor> rows;
  int64_t summed_numel = 0;
  for (size_t i = begin; i < end; ++i) {
    rows.push_back(held_[i].padded.view({world, held_[i].param->layout.chunk()}));
    summed_numel += held_[i].param->layout.chunk();
  }
  at::Tensor input = end - begin == 1 ? held_[begin].padded : at::cat(rows, /*dim=*/1).view({-1});
  at::Tensor summed = at::empty({summed_numel}, input.options());
  comm_.reduce_scatter_sum(input, summed);
  int64_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    const int64_t chunk = held_[i].param->layout.chunk();
    deliver(*held_[i].param, held_[i].padded, summed.narrow(0, offset, chunk));
    offset += chunk;
  }
}

}  // namespace zero3
