// Copying a run of a tensor's elements into a new flat tensor: what sharding, gradient padding
// and checkpoint writing all do, for every parameter, several times per training step.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace zero3 {

// Returns a new 1-D tensor of `size` elements of t's dtype and device: elements
// [begin, begin + count) of `t` flattened, then zeros. Never recorded by autograd.
// Requires 0 <= begin, 0 <= count <= size and begin + count <= t.numel().
//
// A contiguous CPU tensor is copied with memcpy and memset (zero bytes are zero in every
// dtype): narrow/reshape/copy_/clone would cost about a dozen operator calls per tensor.
at::Tensor flat_copy_then_zeros(const at::Tensor& t, int64_t begin, int64_t count, int64_t size);

}  // namespace zero3
