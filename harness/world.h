// World: run a function on N ranks, each a thread with its own Comm.
//
// Rank 0 runs on the calling thread and the others on threads kept from one world to the next
// (making and joining threads cost more than a small fuzz input's whole run); every rank starts
// from a new thread's LibTorch thread-local state, and the caller's comes back afterwards.
//
// Comms are LocalComm (shared memory) or real c10d Gloo process groups sharing an in-process
// store. A rank that throws trips the world's abort signal, so peers blocked in a collective
// fail within milliseconds instead of waiting for a timeout; the caller gets the first error
// with its rank (RankFailure), never a hang or std::terminate.
#pragma once

#include "engine/comm.h"
#include "engine/errors.h"

#include <chrono>
#include <functional>
#include <string>

namespace zerocheck {

enum class CommKind { local, gloo };

// Returns "local" or "gloo".
const char* to_string(CommKind kind);
// Returns the kind named `name`. Throws zero3::UsageError for an unknown name.
CommKind comm_kind_by_name(const std::string& name);

struct WorldOptions {
  int world_size = 2;
  CommKind comm = CommKind::local;
  std::chrono::milliseconds timeout{30000};  // per collective
  // Every rank a fiber of the calling thread (harness/fiber_world.h): LocalComm only, and no
  // backward may run.
  bool ranks_as_fibers = false;
  // Threads of this process even inside a `zerocheck worker`: a side world one rank starts for
  // itself (the interpreter's `load` with a world_size), not the world of processes.
  bool in_this_process = false;
};

// The first failure of a world: which rank, and what it threw.
class RankFailure : public zero3::Error {
 public:
  RankFailure(int rank, const std::string& what)
      : zero3::Error("rank " + std::to_string(rank) + ": " + what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Runs `body(comm)` on every rank and waits for all. In a `zerocheck worker` (a current
// ProcessRank, harness/process/process_rank.h) it runs this process's rank only, over Gloo,
// unless `in_this_process`. Throws RankFailure carrying the first
// rank's error when any rank throws, and zero3::UsageError for a world size below 1.
void run_world(const WorldOptions& options, const std::function<void(zero3::Comm&)>& body);

// Runs LibTorch's CPU kernels on one intra-op thread from here on. Tolerance 0 needs it: a
// parallel kernel's bits depend on how many threads split its reduction (LibTorch 2.x's
// LayerNorm backward sums one partial weight gradient per thread), and the count is process-wide
// state that starts at the number of cores. The dense twin used to train before the first world
// set it, on every core, while the ranks ran on one: parity broke on 2.6 (not on 1.13, whose
// LayerNorm backward does not split). So both sides call this before computing, in any order.
void use_sequential_kernels();

}  // namespace zerocheck
