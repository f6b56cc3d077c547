// `zerocheck worker`: one rank of a world of processes, from the torchrun environment
// (harness/world/rank_env.h). It runs the jobs posted in the world's store (by zerocheck's
// launcher, or by rank 0 under torchrun) until told to exit.
#pragma once

#include "harness/world/job_pool.h"
#include "harness/world/process_world.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace zerocheck {

struct WorkerOptions {
  std::chrono::milliseconds collective_timeout{30000};
  LostRankHook hook;  // test hook
  // The collectives' backend: "gloo" (TCP, tensors on the CPU) or "nccl" (CUDA builds only;
  // each rank on cuda:<LOCAL_RANK mod device count>, one device per rank).
  std::string backend = "gloo";
  // Where a rank's placed modules (experts) live: "auto" (the engine's default, rank_device in
  // engine/engine.h), "cpu", or "cuda" (cuda:<LOCAL_RANK mod device count>; several ranks may
  // share one device). NCCL implies "cuda".
  std::string device = "auto";
};

// Throws zero3::UsageError naming the option (--backend, --device) when `options` asks for
// what this build or machine cannot do: NCCL or CUDA on a build without CUDA (ZEROCHECK_CUDA
// off), or on a machine without a CUDA device; NCCL with --device cpu; an unknown name.
void check_backend_and_device(const WorkerOptions& options);

// Runs one job (what a launcher posted) on `world`, the world of all the processes, as this
// process's rank; returns the result to post. The job table is the caller's
// (harness/tools/jobs.h): this layer only carries jobs and results.
using JobRunner = std::function<nlohmann::json(World& world, const nlohmann::json& job)>;

// Joins the world and serves jobs with `run_job`. Returns the exit code: 0 after an exit job, 1 when a rank
// of the world was lost (it prints which, and in which operation). Throws zero3::UsageError for
// a bad environment, CommError when the store cannot be reached.
int serve_jobs(const WorkerOptions& options, const JobRunner& run_job);

// Under torchrun, rank 0 runs the command itself and posts its jobs: joins the world as rank 0
// and returns the pool that runs each job here and on the serving ranks (it tells them to exit
// when destroyed). Throws as serve_jobs.
std::unique_ptr<JobPool> join_as_coordinator(const WorkerOptions& options, JobRunner run_job);

}  // namespace zerocheck
