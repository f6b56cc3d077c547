// `zerocheck worker`: one rank of a world of processes, from the torchrun environment. Started
// by `--procs` (the launcher posts the jobs) or by torchrun:
//   torchrun --nproc-per-node 4 $(which zerocheck) worker -- check --cases 100
// where rank 0 runs the command after `--` and the other ranks serve its jobs.
#include "engine/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/process_args.h"
#include "harness/tools/jobs.h"
#include "harness/world/rank_env.h"

namespace zerocheck::cli {

void register_worker_command(CLI::App& command, int& exit_code) {
  auto args = std::make_shared<ProcessArgs>();
  args->add_to(command, /*with_procs=*/false);
  command.callback([args, &exit_code] {
    const RankEnv env = RankEnv::from_environment();
    const WorkerOptions options = args->worker_options(env.world_size);
    if (worker_coordinates() && env.rank == 0) {
      set_coordinated_pool(join_as_coordinator(options, run_job_here));  // main runs the command next
      exit_code = kExitOk;
      return;
    }
    exit_code = serve_jobs(options, run_job_here);
  });
}

}  // namespace zerocheck::cli
