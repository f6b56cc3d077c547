// `zerocheck check` and `zerocheck replay`: the harness's front door.
#include "engine/errors.h"
#include "engine/faults.h"
#include "engine/precision.h"
#include "harness/tools/check.h"
#include "harness/cli/command.h"
#include "harness/cli/process_args.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario/draw/draw_scenario.h"
#include "harness/scenario/invariants.h"
#include "harness/tools/jobs.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace zerocheck::cli {
namespace {

void print_finding(const Finding& f) {
  fmt::print("\nVIOLATION {}\n", f.violation.to_text());
  fmt::print("found after {} cases ({:.1f} s); shrunk in {} runs to {} modules, {} operations:\n",
             f.cases_to_find, f.seconds_to_find, f.shrink_runs, shape_of(f.scenario).modules, f.scenario.ops.size());
  fmt::print("{}", describe(f.scenario));
  fmt::print("history (rank 0):\n");
  for (const auto& line : f.history) fmt::print("  {}\n", line);
  fmt::print("scenario written to {}\nreplay with:\n  {}\n", f.scenario_file, f.replay_command);
}

uint32_t float32_bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// What the twin holds after operation `index`: the forward's losses by rank and every parameter
// of its target, as float32 bit patterns (exact, NaN included).
nlohmann::json twin_numbers_after(int64_t index, OpKind kind, const model::DenseTwin& twin,
                                  const std::vector<double>& losses) {
  nlohmann::json losses_bits = nlohmann::json::array();
  for (double loss : losses) losses_bits.push_back(float32_bits(static_cast<float>(loss)));
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, p] : twin.params()) {
    const at::Tensor values = p.detach().contiguous();
    nlohmann::json bits = nlohmann::json::array();
    for (int64_t i = 0; i < values.numel(); ++i) bits.push_back(float32_bits(values.data_ptr<float>()[i]));
    params[name] = std::move(bits);
  }
  return {{"index", index}, {"op", to_string(kind)}, {"losses", losses_bits}, {"params", params}};
}

void add_common(CLI::App& command, std::string& engine, std::string& comm) {
  command.add_option("--engine", engine, "reference or a catalogue fault: " + zero3::engine_names());
  command.add_option("--comm", comm, "local or gloo")->check(CLI::IsMember({"local", "gloo"}));
}

void add_inert_fraction(CLI::App& command, double& fraction) {
  command
      .add_option("--inert-fraction", fraction,
                  "share of scenarios run a second time with their ZeRO knobs drawn again (I10), chosen by each "
                  "scenario's seed; 0 turns it off (thread and fiber worlds; a world of processes runs once)")
      ->check(CLI::Range(0.0, 1.0));
}

}  // namespace

void register_check_command(CLI::App& command, int& exit_code) {
  struct Args {
    CheckOptions options;
    std::string engine = "reference", comm = "local", disable;
    bool json = false;
    ProcessArgs process;
  };
  auto args = std::make_shared<Args>();
  add_common(command, args->engine, args->comm);
  args->process.add_to(command);
  command.add_option("--world", args->options.fixed_world,
                     "ranks of every case, 1..8 (0: each case draws 1..4; with --procs: the processes)")
      ->check(CLI::Range(0, kMaxFixedWorld));
  command.add_option("--cases", args->options.cases, "number of random scenarios")->check(CLI::Range(1, 100000000));
  command.add_option("--seed", args->options.seed, "seed of the scenario generator");
  command.add_option("--max-ops", args->options.max_ops, "operations per scenario")->check(CLI::Range(0, 64));
  command.add_option("--time", args->options.time_limit_s, "stop after this many seconds")->check(CLI::Range(0.0, 1e7));
  command.add_option("--out", args->options.out_dir, "where shrunk scenarios are written");
  command.add_option("--disable", args->disable, "oracles to switch off, e.g. I3,I8 (ablation)");
  add_inert_fraction(command, args->options.inert_knobs_fraction);
  command.add_flag("--fp16", args->options.fp16,
                   "draw fp16.enabled (with its scaler keys) for most scenarios without a placement policy; where "
                   "this LibTorch has no fp16 Linear on CPU they are counted as not runnable here, not run");
  command.add_flag("--json", args->json, "print one JSON object");
  command.callback([args, &exit_code] {
    args->options.fault = zero3::engine_by_name(args->engine, "--engine");
    args->options.disabled_oracles = parse_invariants(args->disable);
    args->options.comm = comm_kind_by_name(args->comm);
    // Processes: every case's world is the process world (a shrunk one may be smaller).
    if (args->process.procs > 0 && args->options.fixed_world != 0 && args->options.fixed_world != args->process.procs)
      throw zero3::UsageError("--world " + std::to_string(args->options.fixed_world) + " differs from --procs " +
                              std::to_string(args->process.procs));
    const std::shared_ptr<JobPool> pool = args->process.make_pool();
    if (pool) {
      if (args->options.fixed_world != 0 && args->options.fixed_world != pool->world_size())
        throw zero3::UsageError("--world " + std::to_string(args->options.fixed_world) + " differs from the " +
                                std::to_string(pool->world_size()) + " processes");
      args->options.fixed_world = pool->world_size();
      args->options.runner = [pool](const Scenario& s, const RunOptions& run) { return run_scenario_on(*pool, s, run); };
    }
    const bool tty = !args->json && ::isatty(2);  // a progress line only where someone watches
    const CheckResult result = run_check(args->options, [&](int64_t cases, double seconds) {
      if (tty)
        std::cerr << fmt::format("\rzerocheck check: {} cases, {:.0f} cases/s, engine {}   ", cases,
                                 cases / std::max(seconds, 1e-9), args->engine)
                  << std::flush;
    });
    if (tty) std::cerr << "\r" << std::string(70, ' ') << "\r";
    if (args->json) {
      std::cout << to_json(result, args->options.fault).dump() << std::endl;
    } else {
      fmt::print("zerocheck check: engine {}, {} cases in {:.1f} s ({:.0f} cases/s)\n", args->engine,
                 result.cases_run, result.seconds, result.cases_run / std::max(result.seconds, 1e-9));
      fmt::print("generated: {} with tied weights, {} with frozen parameters, {} with zero-size parameters, "
                 "{} with experts, {} with a placement policy, {} with bf16, {} with overflow protection, "
                 "{} with an injection\n",
                 result.with_tied, result.with_frozen, result.with_zero_size, result.with_experts,
                 result.with_placement, result.with_bf16, result.with_overflow_protection, result.with_injection);
      if (args->options.fp16)
        fmt::print("fp16: {} drawn, {} run, {} not runnable here{}\n", result.with_fp16,
                   result.with_fp16 - result.not_runnable, result.not_runnable,
                   result.not_runnable > 0 ? fmt::format(" ({})", result.not_runnable_reason) : "");
      if (result.not_runnable > 0) {
        std::string cases;
        for (int64_t i : result.not_runnable_cases) cases += (cases.empty() ? "" : ", ") + std::to_string(i);
        fmt::print("NOT RUNNABLE HERE: {} of {} drawn cases, not checked (case indices, seed {}: {}{})\n",
                   result.not_runnable, result.cases_run + result.not_runnable, args->options.seed, cases,
                   result.not_runnable > static_cast<int64_t>(result.not_runnable_cases.size()) ? ", ..." : "");
      }
      if (result.finding) print_finding(*result.finding);
      else fmt::print("all invariants held on the {} cases run\n", result.cases_run);
    }
    exit_code = result.finding ? kExitViolation : kExitOk;
  });
}

void register_replay_command(CLI::App& command, int& exit_code) {
  struct Args {
    std::string file, engine = "reference", comm = "local", disable;
    bool json = false, twin_numbers = false;
    double inert_knobs_fraction = RunOptions().inert_knobs_fraction;
    ProcessArgs process;
  };
  auto args = std::make_shared<Args>();
  command.add_option("file", args->file, "a scenario JSON file")->required();
  add_common(command, args->engine, args->comm);
  args->process.add_to(command);
  command.add_option("--disable", args->disable, "oracles to switch off, e.g. I3,I8 (ablation)");
  add_inert_fraction(command, args->inert_knobs_fraction);
  command.add_flag("--json", args->json, "print one JSON object");
  command.add_flag("--twin-numbers", args->twin_numbers,
                   "with --json: the dense twin's losses and parameters after every operation, as float32 bits "
                   "(the cross-check with the Python twin)");
  command.callback([args, &exit_code] {
    RunOptions run;
    run.disabled_oracles = parse_invariants(args->disable);
    run.inert_knobs_fraction = args->inert_knobs_fraction;
    auto twin_numbers = std::make_shared<nlohmann::json>(nlohmann::json::array());
    if (args->twin_numbers) {
      if (!args->json) throw zero3::UsageError("--twin-numbers needs --json");
      if (!run.needs_dense_twin())
        throw zero3::UsageError("--twin-numbers needs the dense twin: keep one of I3, I6, I8 or I11 on");
      run.twin_observer = [twin_numbers](int64_t index, OpKind kind, const model::DenseTwin& twin,
                                         const std::vector<double>& losses) {
        twin_numbers->push_back(twin_numbers_after(index, kind, twin, losses));
      };
    }
    run.fault = zero3::engine_by_name(args->engine, "--engine");
    run.world.comm = comm_kind_by_name(args->comm);
    std::ifstream in(args->file, std::ios::binary);
    if (!in) throw zero3::UsageError("cannot read scenario file '" + args->file + "'");
    std::ostringstream text;
    text << in.rdbuf();
    Scenario scenario;
    try {
      scenario = parse_scenario(text.str());
    } catch (const ScenarioError& e) {
      throw zero3::UsageError(args->file + ": " + e.what());
    }
    // A scenario this LibTorch cannot run (fp16 without a CPU fp16 Linear) is neither passed nor
    // a violation: bad input for this build, with the reason.
    if (const std::string refusal = zero3::fp16_refusal_here(zero3::precision_in_effect({}, scenario.config.precision));
        !refusal.empty())
      throw zero3::UsageError(args->file + ": not runnable here: " + refusal);
    const std::shared_ptr<JobPool> pool = args->process.make_pool();
    if (pool && args->twin_numbers)
      throw zero3::UsageError("--twin-numbers reads the twin of ranks in this process: drop --procs");
    const Verdict verdict = pool ? run_scenario_on(*pool, scenario, run) : run_scenario(scenario, run);
    if (args->json) {
      nlohmann::json out{{"engine", args->engine}, {"scenario_file", args->file}, {"ok", verdict.ok()},
                         {"history", verdict.history}, {"violation", nullptr}};
      if (verdict.violation) out["violation"] = verdict.violation->to_json();
      if (args->twin_numbers) out["twin"] = *twin_numbers;
      std::cout << out.dump() << std::endl;
    } else {
      fmt::print("{}", describe(scenario));
      fmt::print("history (rank 0):\n");
      for (const auto& line : verdict.history) fmt::print("  {}\n", line);
      if (verdict.violation) fmt::print("VIOLATION {}\n", verdict.violation->to_text());
      else fmt::print("all invariants held\n");
    }
    exit_code = verdict.ok() ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
