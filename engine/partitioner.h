// Partitioner: owns each managed parameter's shard and moves its full data in and out.
//
// For a partitioned parameter the model's tensor holds its full data only between gather() and
// release(); otherwise it is empty and this rank's slice lives in `shard`, in the parameter
// dtype, with its fp32 master in `master` (one tensor when the parameters are fp32). Persistent
// parameters (numel <= threshold) keep their full data in the model tensor, which is also their
// master in fp32. With bf16 parameters (PrecisionOptions::mixed) every master is fp32 and
// separate, and copy_back() rounds it into the parameter-dtype copy after the master changes:
// the parameter-dtype copy is always round_to(master), so a master is all a checkpoint keeps. Gradients are reduced into `grad_shard`, averaged over ranks: a partitioned one's through
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
#include "engine/precision.h"
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
                             // here: `param` itself (fp32) or its fp32 copy (bf16); placed
                             // elsewhere: empty
  at::Tensor shard;          // partitioned: this rank's c elements in the parameter dtype, what
                             // gather() reads (`master` itself in fp32); otherwise `param`
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
  // `precision`: the dtypes the gradients travel in (precision.h).
  Partitioner(Comm& comm, FaultSeams faults, at::Device device, int64_t reduce_bucket_size,
              const PrecisionOptions& precision)
      : comm_(comm), faults_(faults), device_(device), precision_(precision), bucket_(comm, faults, reduce_bucket_size) {}

  // Splits `p` per its layout: keeps this rank's slice in `shard` and `master` and empties the
  // model tensor. Persistent parameters stay whole; placed ones stay whole on their owner only.
  // With bf16 the model tensor is made bf16 first (R1: round to nearest even), by the caller.
  void partition(ManagedParam& p);
  // Rounds `p`'s fp32 master into its parameter-dtype copy (shard, or the whole parameter) to
  // nearest even (R9, stage3.py:2000-2003 (v0.14.5)). No-op in fp32 or where nothing lives here.
  void copy_back(ManagedParam& p);
  // Writes this rank's part of the full data `full` (flat, parameter dtype) into `p`'s shard and
  // master: what an edit published from the modifier rank makes of it.
  void write_from_full(ManagedParam& p, const at::Tensor& full);
  // A zero gradient for `p`'s master in the accumulation dtype.
  at::Tensor zero_gradient(const ManagedParam& p) const;
  // Makes the full data available in the model tensor (collective). No-op when persistent,
  // placed or already available.
  void gather(ManagedParam& p);
  // A module fetch: gathers every partitioned parameter of `params` not yet available, sorted by
  // id, in one coalesced all-gather (coalesced_gather.h; DeepSpeed's fetch_sub_module). Nothing
  // moves when all are persistent, placed or available. Collective.
  void fetch(const std::vector<ManagedParam*>& params);
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
  // What a reduced gradient is divided by: the world size (a planted fault may say otherwise).
  int divisor_of(const ManagedParam& p) const;
  // Averages a summed gradient over the world (the divisor) and adds it into grad_shard.
  void accumulate(ManagedParam& p, at::Tensor summed);
  // Mixed precision: rounds an fp32 sum of divided gradients (gradient_for_sum) as R3 says and
  // adds it into grad_shard in the accumulation dtype (R4).
  void accumulate_mixed(ManagedParam& p, const at::Tensor& summed);
  // One coalesced all-gather of `group` (NotAvailable, distinct), each made available.
  void gather_coalesced(const std::vector<ManagedParam*>& group);
  // The bucket's delivery: this rank's summed chunk of p's gradient, copied into its own buffer.
  void accumulate_chunk(ManagedParam& p, const at::Tensor& padded, const at::Tensor& summed);

  Comm& comm_;
  const FaultSeams faults_;
  const at::Device device_;
  const PrecisionOptions precision_;
  GradientBucket bucket_;
};

}  // namespace zero3
