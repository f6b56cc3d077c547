// `zerocheck train`: ZeRO-3 next to dense training, losses side by side, and a verdict.
#include "engine/errors.h"
#include "engine/faults.h"
#include "harness/cli/command.h"
#include "harness/cli/process_args.h"
#include "engine/testing/models.h"
#include "harness/tools/jobs.h"
#include "harness/tools/train.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <iostream>

namespace zerocheck::cli {
namespace {

struct TrainArgs {
  TrainOptions options;
  int world = 2;
  std::string comm = "local";
  std::string engine = "reference";
  bool json = false;
  ProcessArgs process;
};

void print_text(const TrainReport& report) {
  fmt::print("zerocheck train: model {} on {} ranks, {} steps\n", report.model, report.world_size,
             report.steps);
  if (report.resumed_from_world > 0)
    fmt::print("resumed after step {} of a checkpoint saved by {} ranks (the dense twin replays those steps)\n",
               report.first_step, report.resumed_from_world);
  fmt::print("{:>5}  {:>22}  {:>22}  {:>10}\n", "step", "zero3 loss", "dense loss", "abs diff");
  for (size_t i = 0; i < report.losses.size(); ++i)
    fmt::print("{:>5}  {:>22.17g}  {:>22.17g}  {:>10.3g}\n", report.first_step + static_cast<int64_t>(i), report.losses[i],
               report.dense_losses[i], std::abs(report.losses[i] - report.dense_losses[i]));
  fmt::print("max |param - dense param|: {:g} (tolerance {:g})\n", report.max_param_abs_diff,
             kParityTolerance);
  for (size_t r = 0; r < report.state_bytes_per_rank.size(); ++r)
    fmt::print("rank {} model-state bytes: {} (expected {})\n", r, report.state_bytes_per_rank[r],
               report.expected_state_bytes_per_rank[r]);
  fmt::print("last step, rank 0, moved: {}\n                  expected: {}\n", report.traffic_last_step.to_text(),
             report.expected_traffic_last_step.to_text());
  for (const auto& p : report.problems) fmt::print("VIOLATION: {}\n", p);
  fmt::print("verdict: {}\n", report.ok() ? "parity and accounting hold" : "FAILED");
}

}  // namespace

void register_train_command(CLI::App& command, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::Option* world = command.add_option("--world", args->world, "number of ranks")->check(CLI::Range(1, 64));
  command.add_option("--steps", args->options.steps, "optimizer steps")->check(CLI::Range(1, 100000));
  command.add_option("--model", args->options.model, "one of: " + model_names());
  command.add_option("--seed", args->options.seed, "seed of parameters and data");
  command.add_option("--comm", args->comm, "local or gloo")->check(CLI::IsMember({"local", "gloo"}));
  command.add_option("--batch", args->options.batch_size, "micro-batch size per rank")
      ->check(CLI::Range(1, 4096));
  command.add_option("--optimizer", args->options.optimizer, "adam or sgd (momentum 0.9)")
      ->check(CLI::IsMember({"adam", "sgd"}));
  command.add_option("--lr", args->options.lr, "the optimizer's learning rate");
  command.add_option("--persistence-threshold", args->options.persistence_threshold,
                     "parameters of at most this many elements stay whole on every rank (0: only empty ones)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  command.add_option("--engine", args->engine, "reference or a catalogue fault: " + zero3::engine_names());
  command.add_option("--fail-rank", args->options.fail_rank,
                     "make this rank throw (to see the world fail fast)");
  command.add_option("--fail-step", args->options.fail_step, "step at which --fail-rank throws");
  command.add_option("--save", args->options.save_dir, "after the last step, save a checkpoint into this directory");
  command.add_option("--resume", args->options.resume_dir,
                     "start from this `train --save` checkpoint (any world size): model, seed, batch and lr "
                     "come from it; --steps more steps run on --world ranks");
  command.add_flag("--json", args->json, "print one JSON object");
  args->process.add_to(command);
  command.callback([args, world, &exit_code] {
    args->options.fault = zero3::engine_by_name(args->engine, "--engine");
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
    const TrainReport report =
        pool ? run_training_on(*pool, args->options) : run_training(args->options, *make_world(args->world, threads));
    if (args->json) std::cout << report.to_json().dump() << std::endl;
    else print_text(report);
    exit_code = report.ok() ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
