// A world of processes, seen from one of them (a `zerocheck worker`): ProcessRank is this process
// as one rank of it, with the keys the world shares in the store; ProcessWorld is the World
// (world.h) a job runs on: run() runs this process's rank only, over a Gloo (or NCCL) group of
// its own made over the store, and the other processes run theirs.
//
// Store keys (every job's under "job<J>/"): progress/<rank> (the operation a rank is in, so a
// loss names it), failures + first_rank/first_what (the first rank that threw: the cause, as in
// the thread world), timeout/<rank> (who saw a collective time out). World-wide: "lost" and
// "lost_rank": a rank died or hung; every worker stops (exit 1) when it sees them.
//
// Thread-safety: the worker's main thread only (the abort poll may run on it from inside a
// collective's wait).
#pragma once

#include "engine/comm.h"
#include "engine/errors.h"
#include "engine/store.h"
#include "harness/world/rank_env.h"
#include "harness/world/world.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace zerocheck {

// Test hooks that lose a rank in the middle of operation `op` (its first collective, or the
// agreement that ends it): SIGKILL it, or make it hang until it is killed.
struct LostRankHook {
  enum class Kind { none, kill, hang };
  Kind kind = Kind::none;
  int rank = -1;
  int64_t op = -1;
};

// A rank lost during a run: died, hung, or its worker failed outside any job.
class RankLost : public zero3::CommError {
 public:
  using zero3::CommError::CommError;
};

class ProcessRank {
 public:
  // `backend` and `device` as in WorkerOptions (harness/world/worker.h), already checked.
  ProcessRank(RankEnv env, std::shared_ptr<zero3::KeyValueStore> store, std::chrono::milliseconds collective_timeout,
              LostRankHook hook, std::string backend = "gloo", std::string device = "auto");

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  zero3::KeyValueStore& store() { return *store_; }
  std::chrono::milliseconds collective_timeout() const { return collective_timeout_; }

  // From here on, keys and worlds are job `id`'s.
  void begin_job(int64_t id);
  // Returns the prefix of the next world of this job ("job<J>/world<n>"); every rank asks in the
  // same order, so they agree.
  std::string next_world_prefix();
  // A name shared by the ranks of the current job (checkpoint directories).
  std::string job_tag() const;

  // Records that this rank starts operation `index` (kind `what`): posts it for the launcher
  // and arms the test hook.
  void note_operation(int64_t index, const std::string& what);
  // Returns the world-wide loss ("" while none), as posted by the launcher or a worker.
  std::string lost() const;

  // Runs `body` as this process's rank of a world of the first `size` processes (nothing when
  // this rank is outside it), over Gloo or NCCL (the worker's --backend). Every process calls
  // it, in the same order. Throws RankFailure carrying the first rank that threw.
  void run_rank(int size, const RankBody& body);

 private:
  std::string key(const std::string& name) const;
  zero3::CommOptions comm_options(int world_size);
  std::unique_ptr<zero3::Comm> make_comm(const std::string& prefix, int world_size);
  // cuda:<LOCAL_RANK mod device count>'s index. Throws zero3::UsageError without a device.
  int cuda_index() const;
  void before_collective(const char* op);
  std::string poll_abort();
  std::string explain_timeout(const char* op, int world_size);
  // Posts this rank's failure; returns the first failure of the job (rank, what).
  std::pair<int, std::string> report_failure(const std::string& what);

  RankEnv env_;
  std::shared_ptr<zero3::KeyValueStore> store_;
  std::chrono::milliseconds collective_timeout_;
  LostRankHook hook_;
  std::string backend_;
  std::string device_;
  int64_t job_ = -1;
  int worlds_in_job_ = 0;
  int64_t operation_ = -1;
  std::string operation_text_;
};

// The world a job runs on: the first `size` processes of this process's world.
class ProcessWorld final : public World {
 public:
  ProcessWorld(ProcessRank& rank, int size) : rank_(rank), size_(size) {}
  int size() const override { return size_; }
  void run(const RankBody& body) override { rank_.run_rank(size_, body); }
  bool hosts(int rank) const override { return rank == rank_.rank() && rank < size_; }
  std::unique_ptr<World> first(int size) override;
  void note_operation(int64_t index, const std::string& what) override { rank_.note_operation(index, what); }
  std::string fresh_name() override;

 private:
  ProcessRank& rank_;
  int size_;
};

// Milliseconds since the epoch (the clock the processes of one machine share).
int64_t wall_clock_ms();

}  // namespace zerocheck
