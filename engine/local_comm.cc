#include "engine/local_comm.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

#include <cstring>

namespace zero3 {
namespace {

// Copies `count` elements of the flat views of `from` and `to`. Ranks are threads of one process,
// so contiguous CPU tensors of one dtype are a memcpy; going through narrow/copy_ costs several
// dispatcher calls per peer per collective, which dominated small scenarios.
void copy_elements(const at::Tensor& from, int64_t from_offset, at::Tensor& to, int64_t to_offset, int64_t count) {
  if (count == 0) return;
  if (from.device().is_cpu() && to.device().is_cpu() && from.scalar_type() == to.scalar_type() &&
      from.is_contiguous() && to.is_contiguous()) {
    const auto size = static_cast<int64_t>(from.element_size());
    std::memcpy(static_cast<char*>(to.data_ptr()) + to_offset * size,
                static_cast<const char*>(from.data_ptr()) + from_offset * size, static_cast<size_t>(count * size));
    return;
  }
  to.view({-1}).narrow(0, to_offset, count).copy_(from.reshape({-1}).narrow(0, from_offset, count));
}

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
    exchange("all_gather", shard, [&](int from, const at::Tensor& theirs) {
      copy_elements(theirs, 0, out, from * c, c);
    });
  }

  void do_all_to_all(const at::Tensor& input, at::Tensor& received) override {
    const int64_t c = input.numel() / world_size();
    exchange("all_to_all", input, [&](int from, const at::Tensor& theirs) {
      copy_elements(theirs, rank_ * c, received, from * c, c);
    });
  }

  void do_broadcast(at::Tensor& tensor, int root) override {
    exchange("broadcast", tensor, [&](int from, const at::Tensor& theirs) {
      if (from == root && from != rank_) tensor.copy_(theirs);
    });
  }

  void do_barrier() override {
    group_->rendezvous(*this, "barrier");
  }

 private:
  // Posts `mine`, waits for all, hands every rank's tensor to `read`, waits again so no rank
  // frees or overwrites its input while a peer still reads it.
  template <class Read>
  void exchange(const char* op, const at::Tensor& mine, Read&& read) {
    {
      std::lock_guard<std::mutex> lock(group_->mutex_);
      group_->posted_[rank_] = &mine;
    }
    group_->rendezvous(*this, op);
    std::string mismatch;
    for (int from = 0; from < world_size(); ++from) {
      const at::Tensor& theirs = *group_->posted_[from];
      if (theirs.numel() != mine.numel() && mismatch.empty())
        mismatch = "rank " + std::to_string(from) + " posted " + std::to_string(theirs.numel()) +
                   " elements, this rank " + std::to_string(mine.numel());
      else if (mismatch.empty())
        read(from, theirs);
    }
    group_->rendezvous(*this, op);
    if (!mismatch.empty()) fail(op, mismatch);
  }

  std::shared_ptr<LocalCommGroup> group_;
  const int rank_;
};

LocalCommGroup::LocalCommGroup(int world_size, CommOptions options)
    : world_size_(world_size), options_(std::move(options)), posted_(world_size, nullptr) {
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

void LocalCommGroup::rendezvous(const Comm& caller, const char* op) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t my_generation = generation_;
  if (++waiting_ == world_size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
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

}  // namespace zero3
