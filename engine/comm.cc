#include "engine/comm.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <thread>

namespace zero3 {

void AbortSignal::trip(int rank, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tripped_.load()) return;  // the first failure is the cause; later ones are its echoes
  reason_ = "rank " + std::to_string(rank) + " failed: " + reason;
  tripped_.store(true);
}

std::string AbortSignal::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

void AbortSignal::watch_remote(std::function<std::string()> poll) {
  std::lock_guard<std::mutex> lock(mutex_);
  poll_ = std::move(poll);
  watching_.store(true);
}

bool AbortSignal::poll_remote() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tripped_.load()) return true;
  // A poll is a round trip to the store: at most one per 50 ms, whoever asks.
  const auto now = std::chrono::steady_clock::now();
  if (now < next_poll_) return false;
  next_poll_ = now + std::chrono::milliseconds(50);
  std::string remote = poll_();
  if (remote.empty()) return false;
  reason_ = std::move(remote);
  tripped_.store(true);
  return true;
}

bool AbortSignal::await_remote(std::chrono::milliseconds wait) const {
  if (!watching_.load()) return tripped();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      next_poll_ = {};
    }
    if (tripped()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Comm::enter(const char* op) const {
  if (options_.before_collective) options_.before_collective(op);
  throw_if_aborted(op);
}

void Comm::throw_if_aborted(const char* op) const {
  if (options_.abort && options_.abort->tripped())
    throw CommError("rank " + std::to_string(rank()) + ": " + op + " aborted because " +
                    options_.abort->reason());
}

void Comm::fail(const char* op, const std::string& what) const {
  throw CommError("rank " + std::to_string(rank()) + ": " + op + ": " + what);
}

void Comm::all_gather(const at::Tensor& shard, at::Tensor& out) {
  if (out.numel() != shard.numel() * world_size())
    fail("all_gather", "output has " + std::to_string(out.numel()) + " elements, expected " +
                           std::to_string(shard.numel() * world_size()));
  enter("all_gather");
  if (all_gather_observer_) all_gather_observer_(out.numel());
  ++stats_.collectives;
  ++stats_.all_gathers;
  stats_.all_gather_elements += out.numel();
  if (out.numel() == 0) return;
  do_all_gather(shard.contiguous(), out);
}

void Comm::reduce_scatter_uncounted(const at::Tensor& input, at::Tensor& out) {
  const int64_t n = world_size();
  if (input.numel() != out.numel() * n)
    fail("reduce_scatter", "input has " + std::to_string(input.numel()) +
                               " elements, expected " + std::to_string(out.numel() * n));
  enter("reduce_scatter");
  if (out.numel() == 0) return;
  // All-to-all moves (N-1)/N of the buffer per rank, exactly what a ring reduce-scatter moves;
  // the sum then runs locally in rank order so every backend gives the same bits.
  at::Tensor received = at::empty_like(input);
  do_all_to_all(input.contiguous(), received);
  const int64_t c = out.numel();
  if (received.device().is_cpu() && received.scalar_type() == at::kFloat && out.device().is_cpu() &&
      out.scalar_type() == at::kFloat && out.is_contiguous()) {
    // The same additions in the same order as add_ below (an IEEE sum of two floats is exact to
    // the bit whichever way it is computed), without an operator call per rank: this runs for
    // every partitioned gradient.
    const float* from = received.data_ptr<float>();
    float* sum = out.data_ptr<float>();
    std::copy(from, from + c, sum);
    for (int64_t j = 1; j < n; ++j)
      for (int64_t i = 0; i < c; ++i) sum[i] += from[j * c + i];
    return;
  }
  at::Tensor sum = received.narrow(0, 0, c).clone();
  for (int64_t j = 1; j < n; ++j) sum.add_(received.narrow(0, j * c, c));
  out.copy_(sum);
}

void Comm::reduce_scatter_sum(const at::Tensor& input, at::Tensor& out) {
  ++stats_.collectives;
  ++stats_.reduce_scatters;
  stats_.reduce_scatter_elements += input.numel();
  reduce_scatter_uncounted(input, out);
}

void Comm::all_reduce_sum(at::Tensor& tensor) {
  ++stats_.collectives;
  const int64_t n = world_size();
  const int64_t numel = tensor.numel();
  const int64_t c = (numel + n - 1) / n;
  stats_.all_reduce_elements += 2 * c * n;
  if (numel == 0) return;
  at::Tensor padded = at::zeros({c * n}, tensor.options());
  padded.narrow(0, 0, numel).copy_(tensor.reshape({-1}));
  at::Tensor mine = at::empty({c}, tensor.options());
  reduce_scatter_uncounted(padded, mine);
  at::Tensor full = at::empty({c * n}, tensor.options());
  throw_if_aborted("all_reduce");
  do_all_gather(mine, full);
  tensor.copy_(full.narrow(0, 0, numel).view(tensor.sizes()));
}

void Comm::all_to_all(const at::Tensor& input, at::Tensor& out) {
  if (input.numel() != out.numel() || input.numel() % world_size() != 0)
    fail("all_to_all", "input of " + std::to_string(input.numel()) + " and output of " +
                           std::to_string(out.numel()) + " elements do not split into " +
                           std::to_string(world_size()) + " equal chunks");
  enter("all_to_all");
  ++stats_.collectives;
  stats_.all_to_all_elements += input.numel();
  if (input.numel() == 0) return;
  do_all_to_all(input.contiguous(), out);
}

void Comm::broadcast(at::Tensor& tensor, int root) {
  if (root < 0 || root >= world_size())
    fail("broadcast", "root " + std::to_string(root) + " is outside the world");
  enter("broadcast");
  ++stats_.collectives;
  stats_.broadcast_elements += tensor.numel();
  if (tensor.numel() == 0) return;
  do_broadcast(tensor, root);
}

void Comm::barrier() {
  enter("barrier");
  ++stats_.collectives;
  do_barrier();
}

}  // namespace zero3
