// World: N ranks, each with its own Comm, running one body together. The one place a world
// size lives while a run runs: everything below a driver asks its World.
//
// Three kinds, one interface:
//  - threads (make_world, RankKind::threads): rank 0 on the calling thread, the others on
//    threads kept from one world to the next; LocalComm (shared memory) or real c10d Gloo groups
//    over an in-process store;
//  - fibers (RankKind::fibers): every rank on the calling thread, switching in user space while
//    it waits in a collective (fiber_world.cc); LocalComm only, and no backward may run;
//  - processes (harness/world/process_world.h): this process is one rank of a world of
//    `zerocheck worker`s; a World for it is handed to each job by the worker (worker.h).
// A driver makes a world (or is given one) and passes it down; nothing looks one up.
//
// Failure: a rank that throws trips the world's abort signal, so peers blocked in a collective
// fail within milliseconds instead of waiting for a timeout; the caller gets the first error
// with its rank (RankFailure), never a hang or std::terminate.
// Thread-safety: a World runs one body at a time; its ranks run concurrently inside run().
#pragma once

#include "engine/comm.h"
#include "engine/errors.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace zerocheck {

enum class CommKind { local, gloo };
// Returns "local" or "gloo".
const char* to_string(CommKind kind);
// Returns the kind named `name`. Throws zero3::UsageError for an unknown name.
CommKind comm_kind_by_name(const std::string& name);

enum class RankKind { threads, fibers };

// How make_world makes a world of threads or fibers.
struct WorldOptions {
  RankKind ranks = RankKind::threads;
  CommKind comm = CommKind::local;            // fibers: local only
  std::chrono::milliseconds timeout{30000};  // per collective
};

// The first failure of a world: which rank, and what it threw.
class RankFailure : public zero3::Error {
 public:
  RankFailure(int rank, std::string detail)
      : zero3::Error("rank " + std::to_string(rank) + ": " + detail), rank_(rank), detail_(std::move(detail)) {}
  int rank() const { return rank_; }
  // What the rank threw, without the "rank R: " that what() starts with.
  const std::string& detail() const { return detail_; }

 private:
  int rank_;
  std::string detail_;
};

using RankBody = std::function<void(zero3::Comm&)>;

class World {
 public:
  virtual ~World() = default;

  // The number of ranks.
  virtual int size() const = 0;

  // Runs body(comm) on every rank this process hosts (all of them for threads and fibers, its own
  // for a process) and waits for them. Throws RankFailure carrying the first rank that threw.
  virtual void run(const RankBody& body) = 0;

  // Whether this process runs `rank`'s body (and so holds what that rank reports).
  virtual bool hosts(int rank) const = 0;

  // Returns a world of `size` (1..this size) ranks made as this one is, for a run that needs
  // fewer (a shrunk scenario on the processes of a bigger world): threads or fibers anew; for
  // processes the first `size` of them, the others sitting each run() out.
  // Throws zero3::UsageError for a size outside 1..size().
  virtual std::unique_ptr<World> first(int size) = 0;

  // Says that this process's ranks start operation `index` (kind `what`): a world of processes
  // posts it, so that if a rank is lost its peers name the operation it was in. Called from
  // inside run(); threads and fibers have nothing to post.
  virtual void note_operation(int64_t index, const std::string& what) {}

  // Returns a name the ranks of this world agree on and no other world of this machine uses
  // while this one runs (a scenario's checkpoint directory). Call once per run, on every rank.
  virtual std::string fresh_name() = 0;
};

// Returns a world of `size` threads or fibers. Throws zero3::UsageError for a size below 1, or
// fibers over a comm other than LocalComm.
std::unique_ptr<World> make_world(int size, const WorldOptions& options = {});

// Runs LibTorch's CPU kernels on one intra-op thread from here on. Tolerance 0 needs it: a
// parallel kernel's bits depend on how many threads split its reduction (LibTorch 2.x's
// LayerNorm backward sums one partial weight gradient per thread), and the count is process-wide
// state that starts at the number of cores. The dense twin used to train before the first world
// set it, on every core, while the ranks ran on one: parity broke on 2.6 (not on 1.13, whose
// LayerNorm backward does not split). So both sides call this before computing, in any order.
void use_sequential_kernels();

}  // namespace zerocheck
