#include "engine/shard_layout.h"

#include "engine/internal/flat_copy.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cassert>

namespace zero3 {

ShardLayout ShardLayout::of(int64_t numel, int64_t world_size) {
  assert(world_size >= 1 && numel >= 0);
  return ShardLayout{numel, world_size};
}

int64_t ShardLayout::real_in_shard(int64_t rank) const {
  return std::clamp<int64_t>(numel - begin(rank), 0, chunk());
}

at::Tensor ShardLayout::pad(const at::Tensor& full) const { return flat_copy_then_zeros(full, 0, numel, padded_numel()); }

at::Tensor ShardLayout::shard_of(const at::Tensor& full, int64_t rank) const {
  return flat_copy_then_zeros(full, std::min(begin(rank), numel), real_in_shard(rank), chunk());
}

}  // namespace zero3
