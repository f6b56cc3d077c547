#include "engine/shard_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cassert>
#include <cstring>

namespace zero3 {

ShardLayout ShardLayout::of(int64_t numel, int64_t world_size) {
  assert(world_size >= 1 && numel >= 0);
  return ShardLayout{numel, world_size};
}

int64_t ShardLayout::real_in_shard(int64_t rank) const {
  return std::clamp<int64_t>(numel - begin(rank), 0, chunk());
}

namespace {

// Elements [begin, begin + count) of `full` flattened, then zeros, as a new 1-D tensor of
// `size` elements. A contiguous CPU tensor outside autograd is a memcpy and a memset: these
// run for every parameter at every initialize, backward and load, and narrow/copy_/clone
// cost a dozen operator calls each time. Zero bytes are zero in every dtype.
at::Tensor copy_then_zeros(const at::Tensor& full, int64_t begin, int64_t count, int64_t size) {
  assert(begin >= 0 && count >= 0 && count <= size && begin + count <= full.numel());
  const bool recorded = full.requires_grad() && at::GradMode::is_enabled();
  if (full.device().is_cpu() && full.is_contiguous() && !recorded) {
    at::Tensor out = at::empty({size}, full.options());
    const auto element = static_cast<size_t>(full.element_size());
    auto* to = static_cast<char*>(out.data_ptr());
    if (count > 0) std::memcpy(to, static_cast<const char*>(full.data_ptr()) + begin * element, count * element);
    if (size > count) std::memset(to + count * element, 0, (size - count) * element);
    return out;
  }
  at::Tensor out = at::zeros({size}, full.options());
  if (count > 0) out.narrow(0, 0, count).copy_(full.reshape({-1}).narrow(0, begin, count));
  return out;
}

}  // namespace

at::Tensor ShardLayout::pad(const at::Tensor& full) const { return copy_then_zeros(full, 0, numel, padded_numel()); }

at::Tensor ShardLayout::shard_of(const at::Tensor& full, int64_t rank) const {
  return copy_then_zeros(full, std::min(begin(rank), numel), real_in_shard(rank), chunk());
}

}  // namespace zero3
