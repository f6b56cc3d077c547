#include "engine/gloo_comm.h"

#include "engine/errors.h"
#include "engine/internal/store_rendezvous.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <thread>

namespace zero3 {
namespace {

using internal::StoreRendezvous;

constexpr std::chrono::milliseconds kEchoWait{3000};
constexpr std::chrono::milliseconds kNoWait{0};
constexpr std::chrono::milliseconds kGlooTimeoutMargin{10000};

class GlooComm final : public Comm {
 public:
  GlooComm(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int world_size,
           CommOptions options)
      : Comm(std::move(options)), group_(std::move(group)), rank_(rank), world_size_(world_size) {}

  ~GlooComm() override {
    // A rank that gave up on a collective leaves Gloo's worker thread blocked in it until Gloo's
    // own timeout; destroying the group would join that thread and stall the caller. Leak it:
    // fail-fast matters more than a few bytes at exit.
    if (abandoned_) (void)group_.release();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "gloo"; }

 protected:
  void do_all_gather(const at::Tensor& shard, at::Tensor& out) override {
    const int64_t c = shard.numel();
    std::vector<at::Tensor> inputs{shard.reshape({-1})};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < world_size_; ++r) outputs[0].push_back(out.narrow(0, r * c, c));
    wait(group_->allgather(outputs, inputs), "all_gather");
  }

  void do_all_to_all(const at::Tensor& input, at::Tensor& received) override {
    at::Tensor in = input.contiguous();
    std::vector<int64_t> equal_splits;  // empty: equal chunks
    at::Tensor out = received.is_contiguous() ? received : at::empty_like(received);
    wait(group_->alltoall_base(out, in, equal_splits, equal_splits), "all_to_all");
    if (!received.is_same(out)) received.copy_(out);
  }

  void do_broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    wait(group_->broadcast(tensors, options), "broadcast");
  }

  void do_barrier() override { wait(group_->barrier(), "barrier"); }

 private:
  // Waits in short slices so a peer's failure (the abort signal) ends the wait at once, long
  // before the collective's own timeout.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op) {
    const auto deadline = std::chrono::steady_clock::now() + options().timeout;
    while (true) {
      try {
        work->wait(std::chrono::milliseconds(20));
        return;
      } catch (const std::exception& e) {
        // A peer's failure closes its connections; report the cause, not the symptom (a peer
        // process or its launcher posts it within moments: await it).
        if (options().abort && options().abort->await_remote(work->isCompleted() ? kEchoWait : kNoWait)) {
          abandoned_ = true;
          throw_if_aborted(op);
        }
        // The slice may have ended just as the work completed: wait again, unbounded now, to
        // get either success or Gloo's own error rather than our slice's timeout.
        if (work->isCompleted()) {
          try {
            work->wait();
            return;
          } catch (const std::exception& real) {
            fail(op, real.what());
          }
        }
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

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  const int rank_;
  const int world_size_;
  bool abandoned_ = false;
};

}  // namespace

std::shared_ptr<GlooRendezvous> GlooRendezvous::in_process(const std::string& prefix) {
  c10::intrusive_ptr<c10d::Store> base = c10::make_intrusive<c10d::HashStore>();
  return std::make_shared<StoreRendezvous>(c10::make_intrusive<c10d::PrefixStore>(prefix, base));
}

std::unique_ptr<Comm> make_gloo_comm(const std::shared_ptr<GlooRendezvous>& rendezvous, int rank,
                                     int world_size, CommOptions options) {
  const auto* meeting = dynamic_cast<const StoreRendezvous*>(rendezvous.get());
  if (meeting == nullptr) throw UsageError("make_gloo_comm: unknown rendezvous kind");
  // Gloo's own timeout comes after ours: our wait names what is known about the silent peers
  // (CommOptions::explain_timeout); Gloo's would only say "timed out waiting for recv".
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout + kGlooTimeoutMargin);
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  gloo_options->threads = 1;
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(meeting->store, rank, world_size,
                                                             gloo_options);
    return std::make_unique<GlooComm>(std::move(group), rank, world_size, std::move(options));
  } catch (const c10::Error& e) {
    throw CommError("rank " + std::to_string(rank) + ": Gloo rendezvous of " +
                    std::to_string(world_size) + " ranks failed: " + e.what_without_backtrace());
  }
}

}  // namespace zero3
