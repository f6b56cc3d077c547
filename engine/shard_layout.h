// ShardLayout: where each rank's slice of a flattened parameter lives.
//
// A parameter of n elements is flattened and padded with zeros to c*N elements, c = ceil(n/N);
// rank r owns [r*c, (r+1)*c). Zero padding makes a gathered parameter bit-identical to the dense
// one and keeps optimizer updates of the padding at exactly zero.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace zero3 {

struct ShardLayout {
  int64_t numel = 0;
  int64_t world_size = 1;
  int64_t alignment = 1;  // c is rounded up to a multiple of this (1: the spec; more only under a planted fault)

  // Returns the layout of `numel` elements over `world_size` ranks. Requires world_size >= 1.
  static ShardLayout of(int64_t numel, int64_t world_size);

  int64_t chunk() const {  // c
    const int64_t c = (numel + world_size - 1) / world_size;
    return (c + alignment - 1) / alignment * alignment;
  }
  int64_t padded_numel() const { return chunk() * world_size; }
  int64_t begin(int64_t rank) const { return rank * chunk(); }
  // Returns how many of rank's c elements are real (not padding).
  int64_t real_in_shard(int64_t rank) const;

  // Returns a new contiguous 1-D tensor of padded_numel() elements: `full` flattened, then zeros.
  at::Tensor pad(const at::Tensor& full) const;
  // Returns a copy of rank's c elements of `full` (zero-padded).
  at::Tensor shard_of(const at::Tensor& full, int64_t rank) const;
};

}  // namespace zero3
