// ProcessLauncher: `--procs N` — starts N `zerocheck worker` processes (this executable, with
// the torchrun environment set) and runs jobs on them.
//
// The launcher hosts the store, not rank 0: the store must outlive any rank so that when a rank
// dies the others can still read why, and the launcher is the one process that sees every death
// (waitpid) and can post it. Workers die with the launcher (PR_SET_PDEATHSIG); the launcher reaps
// them, and kills whoever is left once a rank is lost.
//
// A lost rank (killed, exited, or hung: a worker posts the silent rank after a collective timed
// out) fails the whole world: every worker stops with exit 1 naming the rank and its operation,
// run() throws RankLost with the same words, and no process is left behind.
// Thread-safety: one thread.
#pragma once

#include "engine/store.h"
#include "harness/world/job_pool.h"
#include "harness/world/process_world.h"

#include <chrono>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace zerocheck {

struct LaunchOptions {
  int procs = 2;
  std::chrono::milliseconds collective_timeout{30000};
  LostRankHook hook;  // test hook, passed to every worker
  std::string backend = "gloo";  // passed to every worker (WorkerOptions, harness/world/worker.h)
  std::string device = "auto";
};

class ProcessLauncher final : public JobPool {
 public:
  // Starts the workers. Throws zero3::UsageError for procs < 1, CommError when the store cannot
  // be hosted or a worker cannot be started.
  explicit ProcessLauncher(const LaunchOptions& options);
  // Tells the workers to exit; kills and reaps any that do not within 10 s.
  ~ProcessLauncher() override;

  int world_size() const override { return options_.procs; }
  std::vector<nlohmann::json> run(const nlohmann::json& job) override;

 private:
  void spawn(int rank);
  // Returns why a rank is lost ("" while none is), and which one.
  std::string find_loss(int& lost_rank);
  // Stops every worker (the lost one at once, the others within 10 s, then SIGKILL), reaps
  // them, reports how long they took, and throws RankLost(cause).
  [[noreturn]] void fail_world(const std::string& cause, int lost_rank);
  // Waits until every worker exited or `grace` passed; kills and reaps the rest. Returns the
  // seconds until the last one that exited by itself did.
  double reap_all(std::chrono::milliseconds grace);

  LaunchOptions options_;
  std::shared_ptr<zero3::KeyValueStore> store_;
  std::vector<pid_t> pids_;      // by rank; 0 once reaped
  std::vector<int> statuses_;    // waitpid status, by rank
  int64_t next_job_ = 0;
};

}  // namespace zerocheck
