// `zerocheck check`, `zerocheck replay` and `zerocheck mutants`: the harness's front door.
#include "engine/errors.h"
#include "engine/faults.h"
#include "harness/check.h"
#include "harness/cli/command.h"
#include "harness/runner.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

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

void add_common(CLI::App& command, std::string& engine, std::string& comm) {
  command.add_option("--engine", engine, "reference or a catalogue fault: " + zero3::engine_names());
  command.add_option("--comm", comm, "local or gloo")->check(CLI::IsMember({"local", "gloo"}));
}

}  // namespace

void register_check_command(CLI::App& command, int& exit_code) {
  struct Args {
    CheckOptions options;
    std::string engine = "reference", comm = "local";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  add_common(command, args->engine, args->comm);
  command.add_option("--world", args->options.world_size, "ranks (0: each case draws 1..4)")->check(CLI::Range(0, 8));
  command.add_option("--cases", args->options.cases, "number of random scenarios")->check(CLI::Range(1, 100000000));
  command.add_option("--seed", args->options.seed, "seed of the scenario generator");
  command.add_option("--max-ops", args->options.max_ops, "operations per scenario")->check(CLI::Range(0, 64));
  command.add_option("--time", args->options.time_limit_s, "stop after this many seconds")->check(CLI::Range(0.0, 1e7));
  command.add_option("--out", args->options.out_dir, "where shrunk scenarios are written");
  command.add_flag("--json", args->json, "print one JSON object");
  command.callback([args, &exit_code] {
    args->options.fault = zero3::engine_by_name(args->engine, "--engine");
    args->options.comm = comm_kind_by_name(args->comm);
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
                 "{} with experts, {} with a placement policy\n",
                 result.with_tied, result.with_frozen, result.with_zero_size, result.with_experts,
                 result.with_placement);
      if (result.finding) print_finding(*result.finding);
      else fmt::print("all invariants held\n");
    }
    exit_code = result.finding ? kExitViolation : kExitOk;
  });
}

void register_replay_command(CLI::App& command, int& exit_code) {
  struct Args {
    std::string file, engine = "reference", comm = "local";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  command.add_option("file", args->file, "a scenario JSON file")->required();
  add_common(command, args->engine, args->comm);
  command.add_flag("--json", args->json, "print one JSON object");
  command.callback([args, &exit_code] {
    RunOptions run;
    run.fault = zero3::engine_by_name(args->engine, "--engine");
    run.comm = comm_kind_by_name(args->comm);
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
    const Verdict verdict = run_scenario(scenario, run);
    if (args->json) {
      nlohmann::json out{{"engine", args->engine}, {"scenario_file", args->file}, {"ok", verdict.ok()},
                         {"history", verdict.history}, {"violation", nullptr}};
      if (verdict.violation) out["violation"] = verdict.violation->to_json();
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

void register_mutants_command(CLI::App& command, int& exit_code) {
  struct Args {
    double time_per_fault = 30;
    int64_t cases = 2000;
    uint64_t seed = 1;
    std::string out = "zerocheck-out/mutants";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  command.add_option("--time-per-fault", args->time_per_fault, "budget per fault in seconds")->check(CLI::Range(0.1, 1e6));
  command.add_option("--cases", args->cases, "at most this many cases per fault")->check(CLI::Range(1, 10000000));
  command.add_option("--seed", args->seed, "seed of the scenario generator");
  command.add_option("--out", args->out, "where shrunk scenarios are written");
  command.add_flag("--json", args->json, "print a JSON list");
  command.callback([args, &exit_code] {
    nlohmann::json rows = nlohmann::json::array();
    bool survivor = false;
    if (!args->json)
      fmt::print("{:<34} {:<7} {:<9} {:>6} {:>8} {:>8} {:>4}\n", "fault", "killed", "invariant", "cases",
                 "seconds", "modules", "ops");
    for (const auto& info : zero3::fault_catalogue()) {
      CheckOptions options;
      options.fault = info.fault;
      options.cases = args->cases;
      options.seed = args->seed;
      options.time_limit_s = args->time_per_fault;
      options.out_dir = args->out;
      const CheckResult result = run_check(options);
      nlohmann::json row{{"fault", info.name}, {"killed", result.finding.has_value()},
                         {"expected_invariant", info.invariant}};
      if (result.finding) {
        const auto shape = shape_of(result.finding->scenario);
        row.update({{"invariant", result.finding->violation.invariant},
                    {"cases_to_kill", result.finding->cases_to_find},
                    {"seconds_to_kill", result.finding->seconds_to_find},
                    {"modules", shape.modules},
                    {"ops", shape.ops},
                    {"scenario_file", result.finding->scenario_file},
                    {"replay", result.finding->replay_command}});
      } else {
        survivor = true;
        row.update({{"invariant", nullptr}, {"cases_to_kill", nullptr}, {"seconds_to_kill", nullptr},
                    {"modules", nullptr}, {"ops", nullptr}, {"cases_run", result.cases_run}});
      }
      if (!args->json) {
        if (result.finding)
          fmt::print("{:<34} {:<7} {:<9} {:>6} {:>8.2f} {:>8} {:>4}\n", info.name, "yes",
                     row["invariant"].get<std::string>(), row["cases_to_kill"].get<int64_t>(),
                     row["seconds_to_kill"].get<double>(), row["modules"].get<int64_t>(), row["ops"].get<int64_t>());
        else
          fmt::print("{:<34} {:<7} {:<9} {:>6} SURVIVED ({} cases)\n", info.name, "NO", "-", "-", result.cases_run);
        std::fflush(stdout);
      }
      rows.push_back(row);
    }
    if (args->json) std::cout << rows.dump() << std::endl;
    exit_code = survivor ? kExitViolation : kExitOk;
  });
}

}  // namespace zerocheck::cli
