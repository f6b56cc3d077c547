// GradientBucket: the partitioned gradients of a backward waiting for their reduce-scatter, held
// and flushed by DeepSpeed ZeRO-3's bucket rule (runtime/zero/stage3.py,
// reduce_independent_p_g_buckets_and_remove_grads and __add_grad_to_ipg_bucket: v0.14.5 lines
// 1214-1246, master 1519-1560):
//
//   a gradient of n elements that finds the bucket holding e > 0 elements with
//   e + n > reduce_bucket_size flushes the bucket first, then joins it; the end of the backward
//   flushes whatever is left (independent_gradient_partition_epilogue).
//
// Elements are counted unpadded (DeepSpeed's ds_numel). A gradient larger than the bucket is
// held alone. reduce_bucket_size 0, which DeepSpeed's config accepts (and then divides by in
// report_ipg_memory_usage, #8260), follows the rule as written: every gradient flushes what the
// bucket holds, so each is reduced alone.
//
// One flush is one reduce-scatter (Comm::reduce_scatter_sum) over an input laid out rank by
// rank: rank j's part is chunk j of every held gradient, in the order they joined, so each rank
// receives its chunks of all of them contiguously. Every gradient is padded to chunk*N exactly
// as when it was reduced alone and each element is summed in rank order either way, so the bits
// are the same whatever the bucket size (invariants I3 and I10).
//
// Requires: every rank adds the same parameters in the same order, and flushes together.
// Thread-safety: one bucket per rank, used by that rank's thread.
#pragma once

#include "engine/comm.h"
#include "engine/fault_seams.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace zero3 {

struct ManagedParam;

class GradientBucket {
 public:
  // Receives, per flushed gradient in the order it joined, the padded gradient it was given and
  // this rank's summed chunk of it (a view into the flush's output: copy what you keep).
  using Deliver = std::function<void(ManagedParam& p, const at::Tensor& padded, const at::Tensor& summed)>;

  // `capacity`: reduce_bucket_size, in elements (>= 0).
  GradientBucket(Comm& comm, FaultSeams faults, int64_t capacity)
      : comm_(comm), faults_(faults), capacity_(capacity) {}

  // Adds p's gradient, padded to its layout's chunk*N elements, after flushing the bucket when
  // the rule says so (collective then).
  void add(ManagedParam& p, at::Tensor padded, const Deliver& deliver);
  // Reduce-scatters every held gradient in one collective and delivers each; nothing when empty.
  void flush(const Deliver& deliver);
  // Drops what it holds without communicating (a backward that failed half way).
  void clear();
  // The unpadded elements held, as the rule counts them.
  int64_t elements() const { return elements_; }

 private:
  struct Held {
    ManagedParam* param;
    at::Tensor padded;
  };
  // One reduce-scatter over held_[begin, end).
  void reduce(size_t begin, size_t end, const Deliver& deliver);

  Comm& comm_;
  const FaultSeams faults_;
  const int64_t capacity_;
  std::vector<Held> held_;
  int64_t elements_ = 0;
};

}  // namespace zero3
