// Comm: the collectives the ZeRO-3 schedule needs, with timeouts and element accounting.
//
// Implementations: LocalComm (ranks are threads sharing memory; fast and deterministic, for
// tests and fuzzing) and internal::C10dComm (a real c10d backend: Gloo on CPU, gloo_comm.h;
// NCCL on GPU, nccl_comm.h, CUDA builds only). Both sum
// reductions in rank order 0..N-1, so they give bit-identical training and a dense baseline
// that accumulates micro-batch gradients in the same order matches them exactly.
//
// Accounting: each call adds the size of the full (world-wide) buffer it moves: all_gather its
// output (c*N), reduce_scatter its input (c*N), all_reduce 2*c*N for n elements (a padded
// reduce-scatter followed by an all-gather), all_to_all its input. Reduce-scatter is never
// all-reduce + slice. reduce_scatter_sum also counts its calls (reduce_scatters): one per
// gradient bucket flushed; all_reduce's inner reduce-scatter is not one of them. all_gather
// counts its calls too (all_gathers): one per module fetch (coalesced_gather.h) or gathered
// parameter; all_reduce's inner all-gather is not one of them.
//
// Requires: every rank calls the collectives in the same order with the same sizes.
// Thread-safety: one Comm per rank; a Comm is used by one thread at a time.
#pragma once

#include <ATen/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace zero3 {

// Shared by the ranks of one world: the first failing rank trips it, and every rank waiting in
// a collective then throws CommError instead of waiting for its timeout.
//
// Ranks that are processes cannot share one: `watch_remote` adds a poll (a key in the world's
// store, harness/world/process_world.h) that tripped() consults at most every 50 ms, so a rank waiting in a
// collective learns within that time that a peer process failed, died or hung.
class AbortSignal {
 public:
  void trip(int rank, const std::string& reason);
  // Returns true once tripped, locally or by the remote poll.
  bool tripped() const { return tripped_.load() || (watching_.load() && poll_remote()); }
  // Returns "rank R failed: reason" (empty when not tripped).
  std::string reason() const;
  // `poll` returns the reason a peer process failed ("" while none did), already naming it.
  // Requires: called before the ranks start.
  void watch_remote(std::function<std::string()> poll);
  // Returns tripped(), polling the remote at once and then until `wait` passes: a collective
  // that failed with a transport error (a peer's connection closed) is usually the echo of a
  // cause the peer or the launcher is about to post. Without a remote: tripped() at once.
  bool await_remote(std::chrono::milliseconds wait) const;

 private:
  bool poll_remote() const;

  mutable std::atomic<bool> tripped_{false};  // mutable: the remote poll may trip it
  std::atomic<bool> watching_{false};
  mutable std::mutex mutex_;
  mutable std::string reason_;
  std::function<std::string()> poll_;
  mutable std::chrono::steady_clock::time_point next_poll_{};
};

struct CommOptions {
  std::chrono::milliseconds timeout{30000};
  std::shared_ptr<AbortSignal> abort = std::make_shared<AbortSignal>();
  // LocalComm only. When set, a rank waiting for its peers calls it instead of blocking: the
  // ranks are fibers of one thread (harness/world/fiber_world.h) and `yield` runs the others.
  std::function<void()> yield;
  // Test hook: runs on entry to every collective with its name, before any data moves (the
  // process-world tests kill or hang a rank there, in the middle of an operation).
  std::function<void(const char* op)> before_collective;
  // When a collective times out, returns what is known about the peers that did not arrive
  // ("rank 2 did not respond ...") for the error message; unset: nothing is added.
  std::function<std::string(const char* op)> explain_timeout;
  // This rank's device: where the engine places the modules this rank owns (engine.h) and, for
  // NCCL, where the collectives run (make_nccl_comm sets it). Unset: the engine's default,
  // rank_device(rank, EngineOptions::ranks_per_device).
  std::optional<at::Device> device;
};

struct CommStats {
  int64_t all_gather_elements = 0;
  int64_t reduce_scatter_elements = 0;
  int64_t all_reduce_elements = 0;
  int64_t all_to_all_elements = 0;
  int64_t broadcast_elements = 0;
  int64_t reduce_scatters = 0;  // reduce_scatter_sum calls
  int64_t all_gathers = 0;      // all_gather calls
  int64_t collectives = 0;
};

class Comm {
 public:
  explicit Comm(CommOptions options) : options_(std::move(options)) {}
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "local", "gloo", "nccl".
  virtual std::string backend() const = 0;

  // Fills `out` (c*N elements) with every rank's `shard` (c elements) in rank order.
  // Throws CommError on timeout, abort or size mismatch.
  void all_gather(const at::Tensor& shard, at::Tensor& out);
  // Fills `out` (c elements) with the rank-order sum of every rank's slice [rank*c, (rank+1)*c)
  // of `input` (c*N elements). Throws CommError on timeout, abort or size mismatch.
  void reduce_scatter_sum(const at::Tensor& input, at::Tensor& out);
  // Replaces `tensor` (1-D, any size) with the rank-order sum over ranks.
  void all_reduce_sum(at::Tensor& tensor);
  // Sends chunk j of `input` (N equal chunks) to rank j; `out` chunk j comes from rank j.
  void all_to_all(const at::Tensor& input, at::Tensor& out);
  // Copies root's `tensor` into every rank's `tensor` (same shape everywhere).
  void broadcast(at::Tensor& tensor, int root);
  void barrier();

  const CommStats& stats() const { return stats_; }
  // Observation hook (the harness measures from it what a rank holds when a gather begins):
  // runs on entry to every all_gather with its output's elements, before any data moves.
  // Unset (the default): nothing runs.
  void set_all_gather_observer(std::function<void(int64_t elements)> observer) {
    all_gather_observer_ = std::move(observer);
  }
  void reset_stats() { stats_ = CommStats{}; }
  const CommOptions& options() const { return options_; }

 protected:
  // Implementations move contiguous fp32/any-dtype 1-D tensors; the base class checks sizes,
  // counts elements and turns aborts and timeouts into CommError.
  virtual void do_all_gather(const at::Tensor& shard, at::Tensor& out) = 0;
  // Fills `received` (c*N) so that chunk j holds rank j's slice for this rank.
  virtual void do_all_to_all(const at::Tensor& input, at::Tensor& received) = 0;
  virtual void do_broadcast(at::Tensor& tensor, int root) = 0;
  virtual void do_barrier() = 0;

  // Throws CommError when a peer failed. Implementations call it while they wait.
  void throw_if_aborted(const char* op) const;
  // Every collective's entry: the test hook, then throw_if_aborted.
  void enter(const char* op) const;
  [[noreturn]] void fail(const char* op, const std::string& what) const;

 private:
  void reduce_scatter_uncounted(const at::Tensor& input, at::Tensor& out);

  CommOptions options_;
  CommStats stats_;
  std::function<void(int64_t)> all_gather_observer_;
};

}  // namespace zero3
