// C10dComm: the part of a Comm that is the same for every c10d backend (Gloo, NCCL): the four
// primitive collectives over a c10d group, staging tensors onto the device the group moves data
// on, and a wait that ends early when a peer fails and names the silent peers when it times out.
// Private to gloo_comm.cc and nccl_comm.cc.
//
// `Group` is the backend's process group class (c10d::ProcessGroupGloo, c10d::ProcessGroupNCCL):
// a template rather than a base pointer because LibTorch 1.13 derives them from
// c10d::ProcessGroup and 2.x from c10d::Backend, with the same collective methods.
//
// Rank-order sums: the base Comm builds reduce_scatter_sum and all_reduce_sum from all_to_all
// plus a local sum in rank order, never from the backend's own reduction (NCCL's ring and tree
// sums add in an order that depends on the topology), so every backend gives LocalComm's bits.
#pragma once

#include "engine/comm.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace zero3::internal {

template <class Group>
class C10dComm : public Comm {
 public:
  // `transport`: where the group's collectives take their tensors (the CPU for Gloo,
  // cuda:<index> for NCCL); tensors elsewhere are copied there and back.
  C10dComm(c10::intrusive_ptr<Group> group, std::string backend, at::Device transport, int rank,
           int world_size, CommOptions options)
      : Comm(std::move(options)),
        group_(std::move(group)),
        backend_(std::move(backend)),
        transport_(transport),
        rank_(rank),
        world_size_(world_size) {}

  ~C10dComm() override {
    // A rank that gave up on a collective leaves the backend's worker blocked in it until the
    // backend's own timeout; destroying the group would join that worker and stall the caller.
    // Leak it: fail-fast matters more than a few bytes at exit.
    if (abandoned_) (void)group_.release();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return backend_; }

 protected:
  Group& group() { return *group_; }
  at::Device transport() const { return transport_; }

  void do_all_gather(const at::Tensor& shard, at::Tensor& out) override {
    const int64_t c = shard.numel();
    at::Tensor gathered = staged_output(out);
    std::vector<at::Tensor> inputs{staged(shard).reshape({-1})};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < world_size_; ++r) outputs[0].push_back(gathered.narrow(0, r * c, c));
    wait(group_->allgather(outputs, inputs), "all_gather");
    if (!gathered.is_same(out)) out.copy_(gathered);
  }

  void do_all_to_all(const at::Tensor& input, at::Tensor& received) override {
    at::Tensor in = staged(input).contiguous();
    std::vector<int64_t> equal_splits;  // empty: equal chunks
    at::Tensor out = staged_output(received);
    wait(group_->alltoall_base(out, in, equal_splits, equal_splits), "all_to_all");
    if (!received.is_same(out)) received.copy_(out);
  }

  void do_broadcast(at::Tensor& tensor, int root) override {
    at::Tensor moved = staged_output(tensor);
    if (!moved.is_same(tensor)) moved.copy_(tensor);
    std::vector<at::Tensor> tensors{moved};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    wait(group_->broadcast(tensors, options), "broadcast");
    if (!moved.is_same(tensor)) tensor.copy_(moved);
  }

  void do_barrier() override {
    c10d::BarrierOptions options;
    // NCCL's barrier is an all-reduce on a device it would otherwise guess from the rank.
    if (transport_.is_cuda()) options.device_ids = {transport_.index()};
    wait(group_->barrier(options), "barrier");
  }

 private:
  static constexpr std::chrono::milliseconds kSlice{20};
  static constexpr std::chrono::milliseconds kEchoWait{3000};
  static constexpr std::chrono::milliseconds kNoWait{0};

  // Gloo on LibTorch 1.13 has no bf16 at all ("Invalid scalar type"): bf16 travels as fp32,
  // which widening and narrowing back change by no bit (these collectives move data, never add:
  // sums run in Comm, precision.h). fp16 travels the same way, so both 16-bit dtypes take one
  // path whatever Gloo's own fp16 support. NCCL moves both as they are.
  c10::ScalarType wire_dtype(const at::Tensor& t) const {
    const bool sixteen = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
    return sixteen && !transport_.is_cuda() ? at::kFloat : t.scalar_type();
  }
  at::Tensor staged(const at::Tensor& t) const {
    return t.device() == transport_ && wire_dtype(t) == t.scalar_type() ? t : t.to(transport_, wire_dtype(t));
  }
  // A tensor the collective may write: `t` itself when it is contiguous on the transport device.
  at::Tensor staged_output(const at::Tensor& t) const {
    if (t.device() == transport_ && t.is_contiguous() && wire_dtype(t) == t.scalar_type()) return t;
    return at::empty(t.sizes(), t.options().device(transport_).dtype(wire_dtype(t)));
  }

  // Returns true once `work` finished within one slice, false while it still runs; throws what
  // the work threw. Gloo's wait(timeout) blocks for the slice (and throws when it passes). NCCL's
  // only orders the current CUDA stream after the work and returns at once unless blocking wait
  // is on: poll isCompleted(), then wait() once it is done (to order the streams and rethrow).
  bool finished_within(c10d::Work& work) const {
    if (!transport_.is_cuda()) {
      try {
        work.wait(kSlice);
        return true;
      } catch (const std::exception&) {
        // The slice may have ended just as the work completed: wait again, unbounded now, to
        // get either success or the backend's own error rather than our slice's timeout.
        if (!work.isCompleted()) return false;
      }
      work.wait();
      return true;
    }
    const auto until = std::chrono::steady_clock::now() + kSlice;
    while (!work.isCompleted()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    work.wait();
    return true;
  }

  // Waits in short slices so a peer's failure (the abort signal) ends the wait at once, long
  // before the collective's own timeout.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op) {
    const auto deadline = std::chrono::steady_clock::now() + options().timeout;
    while (true) {
      try {
        if (finished_within(*work)) return;
      } catch (const std::exception& e) {
        // A peer's failure closes its connections; report the cause, not the symptom (a peer
        // process or its launcher posts it within moments: await it).
        if (options().abort && options().abort->await_remote(work->isCompleted() ? kEchoWait : kNoWait)) {
          abandoned_ = true;
          throw_if_aborted(op);
        }
        fail(op, e.what());
      }
      if (options().abort && options().abort->tripped()) {
        abandoned_ = true;
        throw_if_aborted(op);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abandoned_ = true;
        std::string why = "timed out after " + std::to_string(options().timeout.count()) + " ms";
        if (options().explain_timeout) why += "; " + options().explain_timeout(op);
        fail(op, why);
      }
    }
  }

  c10::intrusive_ptr<Group> group_;
  const std::string backend_;
  const at::Device transport_;
  const int rank_;
  const int world_size_;
  bool abandoned_ = false;
};

}  // namespace zero3::internal
