// Partitioner: owns each managed parameter's shard and moves its full data in and out.
//
// For a partitioned parameter the model's tensor holds its full data only between gather() and
// release(); otherwise it is empty and this rank's fp32 slice lives in `master`. Persistent
// parameters (numel <= threshold) keep their full data in the model tensor, which is also their
// master. Gradients are reduced into `grad_shard`, averaged over ranks: a partitioned one's through
// the gradient bucket (engine/gradient_bucket.h), reduce-scattered when the bucket flushes; a
// persistent one's all-reduced at once.
//
// Persistent parameters stay out of the bucket. DeepSpeed buckets them with the others, because
// it partitions a persistent parameter's gradient like any other (ds_persist only keeps the
// parameter gathered); this engine keeps a persistent parameter's gradient whole on every rank,
// which is an all-reduce, not a slice of a reduce-scatter. So their gradients neither join a
// bucket nor count toward its elements.
//
// Requires: every rank calls the collective operations (gather, reduce_gradient,
// flush_gradients, restore_full) for the same parameters in the same order.
#pragma once

#include "engine/comm.h"
#include "engine/fault_seams.h"
#include "engine/gradient_bucket.h"
#include "engine/param_status.h"
#include "engine/shard_layout.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace zero3 {

struct ManagedParam {
  int64_t id = 0;
  std::string path;          // where the parameter first appears, e.g. "layers.0.weight"
  at::Tensor param;          // the model's tensor (same TensorImpl the user holds)
  std::vector<int64_t> shape;
  ShardLayout layout;
  bool persistent = false;
  int owner = -1;            // placed: the rank that holds it whole (-1: not placed)
  bool trainable = false;
  ParamStatus status = ParamStatus::NotAvailable;
  at::Tensor master;         // partitioned: this rank's c fp32 elements; persistent or placed
                             // here: `param` itself; placed elsewhere: empty
  bool placed() const { return owner >= 0; }
  // Whether the model tensor holds the full data for good (it is its own master).
  bool whole_here(int rank) const { return persistent || owner == rank; }
  at::Tensor grad_shard;     // averaged gradient for `master`; undefined until a backward
  std::shared_ptr<torch::autograd::Node> grad_accumulator;  // kept alive so our hook stays on it
  uintptr_t hook_key = 0;
  bool deep_fault_target = false;  // a deep fault's tree conditions hold for it (faults/deep_faults.cc)
};

class Partitioner {
 public:
  // `faults`: the seams a planted fault reaches the partitioner through (none for the reference).
  // `device`: where this rank's placed parameters live. `reduce_bucket_size`: the elements a
  // gradient bucket holds before it is flushed (the config's key).
  Partitioner(Comm& comm, FaultSeams faults, at::Device device, int64_t reduce_bucket_size)
      : comm_(comm), faults_(faults), device_(device), bucket_(comm, faults, reduce_bucket_size) {}

  // Splits `p` per its layout: keeps this rank's slice in `master` and empties the model tensor.
  // Persistent parameters stay whole; placed ones stay whole on their owner only.
  void partition(ManagedParam& p);
  // Makes the full data available in the model tensor (collective). No-op when persistent,
  // placed or already available.
  void gather(ManagedParam& p);
  // Drops the full data from the model tensor. No-op when persistent or not available.
  void release(ManagedParam& p);
  // Hands the model tensor's full gradient to its reduction, frees it and releases the
  // parameter: a persistent one is all-reduced and averaged into grad_shard at once; a
  // partitioned one joins the gradient bucket, flushing it first when full (collective then).
  void reduce_gradient(ManagedParam& p);
  // Flushes the gradient bucket (collective): every partitioned gradient of the backward is in
  // its grad_shard after it. DeepSpeed's independent_gradient_partition_epilogue.
  void flush_gradients();
  // Forgets the gradients the bucket holds without communicating: a backward that failed.
  void drop_gradients() { bucket_.clear(); }
  // Gathers the full data into the model tensor for good (collective; placed parameters are
  // broadcast from their owner): used when the engine lets go of the model.
  void restore_full(ManagedParam& p);
  Comm& comm() { return comm_; }
  at::Device device() const { return device_; }

 private:
  // Averages a summed gradient over the world (the divisor) and adds it into grad_shard.
  void accumulate(ManagedParam& p, at::Tensor summed);
  // The bucket's delivery: this rank's summed chunk of p's gradient, copied into its own buffer.
  void accumulate_chunk(ManagedParam& p, const at::Tensor& padded, const at::Tensor& summed);

  Comm& comm_;
  const FaultSeams faults_;
  const at::Device device_;
  GradientBucket bucket_;
};

}  // namespace zero3
