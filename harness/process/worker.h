// `zerocheck worker`: one rank of a world of processes, from the torchrun environment
// (harness/process/rank_env.h). It runs the jobs posted in the world's store (by zerocheck's
// launcher, or by rank 0 under torchrun) until told to exit.
#pragma once

#include "harness/process/job_pool.h"
#include "harness/process/process_rank.h"

#include <chrono>
#include <memory>

namespace zerocheck {

struct WorkerOptions {
  std::chrono::milliseconds collective_timeout{30000};
  LostRankHook hook;  // test hook
};

// Joins the world and serves jobs. Returns the exit code: 0 after an exit job, 1 when a rank
// of the world was lost (it prints which, and in which operation). Throws zero3::UsageError for
// a bad environment, CommError when the store cannot be reached.
int serve_jobs(const WorkerOptions& options);

// Under torchrun, rank 0 runs the command itself and posts its jobs: joins the world as rank 0
// and returns the pool that runs each job here and on the serving ranks (it tells them to exit
// when destroyed). Throws as serve_jobs.
std::unique_ptr<JobPool> join_as_coordinator(const WorkerOptions& options);

}  // namespace zerocheck
