// `zerocheck repro seed`: replay the bug report on the reference engine, a legacy mode or a fault.
#include "engine/errors.h"
#include "engine/faults.h"
#include "harness/cli/command.h"
#include "harness/cli/process_args.h"
#include "harness/tools/jobs.h"
#include "harness/tools/repro_seed.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace zerocheck::cli {

void register_repro_command(CLI::App& command, int& exit_code) {
  command.require_subcommand(1);
  CLI::App& seed = *command.add_subcommand(
      "seed", "the seed bug: 60 experts with user ids, initialize twice, placement by id mod N");
  struct Args {
    std::string engine = "reference";
    int world = 2;
    std::string comm = "local";
    bool json = false;
    ProcessArgs process;
  };
  auto args = std::make_shared<Args>();
  seed.add_option("--engine", args->engine, "reference or a catalogue fault: " + zero3::engine_names());
  CLI::Option* world = seed.add_option("--world", args->world, "number of ranks")->check(CLI::Range(1, 64));
  seed.add_option("--comm", args->comm, "local or gloo")->check(CLI::IsMember({"local", "gloo"}));
  seed.add_flag("--json", args->json, "print one JSON object");
  args->process.add_to(seed);
  seed.callback([args, world, &exit_code] {
    ReproOptions options;
    options.fault = zero3::engine_by_name(args->engine, "--engine");
    // Refused before any worker starts.
    if (args->process.procs > 0 && world->count() > 0 && args->world != args->process.procs)
      throw zero3::UsageError("--world " + std::to_string(args->world) + " differs from --procs " +
                              std::to_string(args->process.procs));
    const std::shared_ptr<JobPool> pool = args->process.make_pool();
    if (pool && world->count() > 0 && args->world != pool->world_size())
      throw zero3::UsageError("--world " + std::to_string(args->world) + " differs from the " +
                              std::to_string(pool->world_size()) + " processes");
    WorldOptions threads;
    threads.comm = comm_kind_by_name(args->comm);
    const ReproReport report =
        pool ? run_repro_seed_on(*pool, options) : run_repro_seed(options, *make_world(args->world, threads));
    if (args->json) std::cout << report.to_json().dump() << std::endl;
    else std::cout << report.to_text();
    exit_code = report.intact() ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
