// The options every command that can run its ranks as processes shares: --procs N (start N
// `zerocheck worker`s), --collective-timeout, and the test hooks that lose a rank.
#pragma once

#include "harness/world/job_pool.h"
#include "harness/world/worker.h"

#include <CLI/CLI.hpp>

#include <memory>

namespace zerocheck::cli {

struct ProcessArgs {
  int procs = 0;  // 0: ranks are threads
  double collective_timeout_s = 30;
  int kill_rank = -1;
  int hang_rank = -1;
  int64_t at_op = -1;
  std::string backend = "gloo";  // WorkerOptions::backend
  std::string device = "auto";   // WorkerOptions::device

  // Registers --collective-timeout and the hooks (and --procs when `with_procs`).
  void add_to(CLI::App& command, bool with_procs = true);
  // Returns the worker options. Throws zero3::UsageError for a hook without --at-op, both hooks,
  // a hook on a rank outside the world, or a --backend/--device this build or machine cannot do.
  WorkerOptions worker_options(int world_size) const;
  // The pool that runs this command's ranks: the torchrun world this process coordinates
  // (`zerocheck worker -- COMMAND`), N new workers for --procs N, or nullptr (threads).
  // Throws zero3::UsageError for --backend/--device other than the defaults without --procs, and
  // for --backend nccl with more processes than CUDA devices (NCCL needs one device per rank).
  std::shared_ptr<JobPool> make_pool() const;
};

// Set by `zerocheck worker -- COMMAND` on rank 0: the torchrun world the command runs on.
void set_coordinated_pool(std::shared_ptr<JobPool> pool);
bool has_coordinated_pool();
// Whether `zerocheck worker` on rank 0 coordinates (a command follows `--`) instead of serving.
void set_worker_coordinates(bool coordinates);
bool worker_coordinates();

}  // namespace zerocheck::cli
