#include "engine/local_comm.h"

#include "engine/awake_wait.h"
#include "engine/errors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace zero3 {
namespace {

bool plain(const at::Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

}  // namespace

class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalCommGroup> group, int rank)
      : Comm(group->options_), group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size_; }
  std::string backend() const override { return "local"; }

 protected:
  void do_all_gather(const at::Tensor& shard, at::Tensor& out) override {
    const int64_t c = shard.numel();
    exchange("all_gather", shard, /*post_data=*/true, [&](int from, const Posted& theirs) {
      copy_elements(theirs, 0, out, from * c, c);
    });
  }

  void do_all_to_all(const at::Tensor& input, at::Tensor& received) override {
    const int64_t c = input.numel() / world_size();
    exchange("all_to_all", input, /*post_data=*/true, [&](int from, const Posted& theirs) {
      copy_elements(theirs, rank_ * c, received, from * c, c);
    });
  }

  void do_broadcast(at::Tensor& tensor, int root) override {
    exchange("broadcast", tensor, /*post_data=*/rank_ == root, [&](int from, const Posted& theirs) {
      if (from != root || from == rank_) return;
      if (plain(tensor)) {
        copy_elements(theirs, 0, tensor, 0, tensor.numel());
      } else {
        tensor.copy_(tensor_of(theirs).view(tensor.sizes()));
      }
    });
  }

  void do_barrier() override {
    group_->rendezvous(*this, "barrier");
  }

 private:
  using Posted = LocalCommGroup::Posted;

  // A posted input as a tensor (a view of the copied bytes, or the clone).
  static at::Tensor tensor_of(const Posted& posted) {
    if (posted.copy.defined()) return posted.copy;
    return at::from_blob(const_cast<char*>(posted.bytes.data()), {posted.numel},
                         at::TensorOptions().dtype(posted.dtype));
  }

  // Copies `count` elements of `from` (flat) into the flat view of `to`. Ranks are threads of one
  // process, so contiguous CPU tensors of one dtype are a memcpy; going through narrow/copy_ costs
  // several dispatcher calls per peer per collective, which dominated small scenarios.
  static void copy_elements(const Posted& from, int64_t from_offset, at::Tensor& to, int64_t to_offset,
                            int64_t count) {
    if (count == 0) return;
    if (!from.copy.defined() && plain(to) && to.scalar_type() == from.dtype) {
      const auto size = static_cast<int64_t>(to.element_size());
      std::memcpy(static_cast<char*>(to.data_ptr()) + to_offset * size, from.bytes.data() + from_offset * size,
                  static_cast<size_t>(count * size));
      return;
    }
    to.view({-1}).narrow(0, to_offset, count).copy_(tensor_of(from).narrow(0, from_offset, count));
  }

  // Posts a copy of `mine` (only its size when `post_data` is false), waits for all, and hands
  // every rank's copy to `read`. One rendezvous: the copies alternate between two sets of slots,
  // and a rank can only write to a set again after every rank has arrived at the collective in
  // between, that is, after every rank has finished reading it.
  template <class Read>
  void exchange(const char* op, const at::Tensor& mine, bool post_data, Read&& read) {
    auto& slots = group_->posted_[parity_];
    parity_ ^= 1;
    Posted& slot = slots[static_cast<size_t>(rank_)];
    slot.numel = mine.numel();
    slot.dtype = mine.scalar_type();
    slot.copy = at::Tensor();
    if (!post_data) {
      slot.bytes.clear();
    } else if (plain(mine)) {
      const char* data = static_cast<const char*>(mine.data_ptr());
      slot.bytes.assign(data, data + mine.numel() * static_cast<int64_t>(mine.element_size()));
    } else {
      slot.copy = mine.detach().contiguous().clone().reshape({-1});
    }
    group_->rendezvous(*this, op);
    for (int from = 0; from < world_size(); ++from) {
      const Posted& theirs = slots[static_cast<size_t>(from)];
      if (theirs.numel != mine.numel())  // every rank sees it, so every rank fails
        fail(op, "rank " + std::to_string(from) + " posted " + std::to_string(theirs.numel) +
                     " elements, this rank " + std::to_string(mine.numel()));
    }
    for (int from = 0; from < world_size(); ++from) read(from, slots[static_cast<size_t>(from)]);
  }

  std::shared_ptr<LocalCommGroup> group_;
  const int rank_;
  int parity_ = 0;  // which set of slots the next collective posts to; the same on every rank
};

LocalCommGroup::LocalCommGroup(int world_size, CommOptions options)
    : world_size_(world_size), options_(std::move(options)) {
  for (auto& slots : posted_) slots.resize(static_cast<size_t>(std::max(world_size, 0)));
  if (world_size < 1) throw UsageError("world size must be >= 1, got " + std::to_string(world_size));
}

std::shared_ptr<LocalCommGroup> LocalCommGroup::create(int world_size, CommOptions options) {
  return std::shared_ptr<LocalCommGroup>(new LocalCommGroup(world_size, std::move(options)));
}

std::unique_ptr<Comm> LocalCommGroup::comm_for(int rank) {
  if (rank < 0 || rank >= world_size_)
    throw UsageError("rank " + std::to_string(rank) + " is outside a world of " +
                     std::to_string(world_size_));
  return std::make_unique<LocalComm>(shared_from_this(), rank);
}

// Whether a rank waits, and how long, depends on timing: not counted as coverage.
ZERO3_TIMING_DEPENDENT void LocalCommGroup::rendezvous(const Comm& caller, const char* op) {
  if (options_.yield) return rendezvous_by_yielding(caller, op);
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t my_generation = generation_;
  if (++waiting_ == world_size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  // Peers mostly arrive within microseconds: wait for them awake first (engine/awake_wait.h),
  // then asleep. This happens for every collective.
  lock.unlock();
  if (wait_awake([&] { return generation_.load(std::memory_order_acquire) != my_generation; },
                 std::chrono::microseconds(50)))
    return;
  lock.lock();
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  // Wake up periodically: a peer that failed never arrives, and the abort signal must win over
  // the (much longer) timeout.
  while (generation_ == my_generation) {
    arrived_.wait_for(lock, std::chrono::milliseconds(20));
    if (generation_ != my_generation) break;
    if (options_.abort && options_.abort->tripped()) {
      --waiting_;
      lock.unlock();
      throw CommError("rank " + std::to_string(caller.rank()) + ": " + op +
                      " aborted because " + options_.abort->reason());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      const int arrived = waiting_;
      --waiting_;
      lock.unlock();
      throw CommError("rank " + std::to_string(caller.rank()) + ": " + op + " timed out after " +
                      std::to_string(options_.timeout.count()) + " ms; " +
                      std::to_string(arrived) + " of " + std::to_string(world_size_) +
                      " ranks arrived");
    }
  }
}

// Ranks are fibers of one thread: nothing runs concurrently, so no lock is taken, and none may
// be held across `yield` (the next fiber would lock the same mutex on the same thread).
void LocalCommGroup::rendezvous_by_yielding(const Comm& caller, const char* op) {
  const uint64_t my_generation = generation_;
  if (++waiting_ == world_size_) {
    waiting_ = 0;
    ++generation_;
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (generation_ == my_generation) {
    options_.yield();
    if (generation_ != my_generation) break;
    if (options_.abort && options_.abort->tripped()) {
      --waiting_;
      throw CommError("rank " + std::to_string(caller.rank()) + ": " + op + " aborted because " +
                      options_.abort->reason());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      const int arrived = waiting_--;
      throw CommError("rank " + std::to_string(caller.rank()) + ": " + op + " timed out after " +
                      std::to_string(options_.timeout.count()) + " ms; " + std::to_string(arrived) + " of " +
                      std::to_string(world_size_) + " ranks arrived");
    }
  }
}

}  // namespace zero3
