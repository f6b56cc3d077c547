#include "engine/shard_layout.h"

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

at::Tensor ShardLayout::pad(const at::Tensor& full) const {
  at::Tensor flat = at::zeros({padded_numel()}, full.options());
  if (numel > 0) flat.narrow(0, 0, numel).copy_(full.reshape({-1}));
  return flat;
}

at::Tensor ShardLayout::shard_of(const at::Tensor& full, int64_t rank) const {
  return pad(full).narrow(0, begin(rank), chunk()).clone();
}

}  // namespace zero3
