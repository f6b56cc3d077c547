// Partitioner: owns each managed parameter's shard and moves its full data in and out.
//
// For a partitioned parameter the model's tensor holds its full data only between gather() and
// release(); otherwise it is empty and this rank's fp32 slice lives in `master`. Persistent
// parameters (numel <= threshold) keep their full data in the model tensor, which is also their
// master. Gradients are reduced into `grad_shard`, averaged over ranks.
//
// Requires: every rank calls the collective operations (gather, reduce_gradient, restore_full)
// for the same parameters in the same order.
#pragma once

#include "engine/comm.h"
#include "engine/fault_seams.h"
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
  // `device`: where this rank's placed parameters live.
  Partitioner(Comm& comm, FaultSeams faults, at::Device device)
      : comm_(comm), faults_(faults), device_(device) {}

  // Splits `p` per its layout: keeps this rank's slice in `master` and empties the model tensor.
  // Persistent parameters stay whole; placed ones stay whole on their owner only.
  void partition(ManagedParam& p);
  // Makes the full data available in the model tensor (collective). No-op when persistent,
  // placed or already available.
  void gather(ManagedParam& p);
  // Drops the full data from the model tensor. No-op when persistent or not available.
  void release(ManagedParam& p);
  // Averages the model tensor's full gradient over ranks into grad_shard (collective), frees
  // the full gradient and releases the parameter.
  void reduce_gradient(ManagedParam& p);
  // Gathers the full data into the model tensor for good (collective; placed parameters are
  // broadcast from their owner): used when the engine lets go of the model.
  void restore_full(ManagedParam& p);
  Comm& comm() { return comm_; }
  at::Device device() const { return device_; }

 private:
  Comm& comm_;
  const FaultSeams faults_;
  const at::Device device_;
};

}  // namespace zero3
