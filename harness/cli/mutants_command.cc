// `zerocheck mutants`: every planted fault of the catalogue against the checker, scored
// honestly — a fault counts as killed only when the invariant the catalogue names catches it; a
// violation of another invariant is reported but does not count.
//
// `--ablate` asks the converse: with one oracle switched off at a time, which faults does no
// other oracle catch? The fault x oracle matrix shows each oracle's necessary work; an oracle
// whose column has no survivor would be redundant, and the run fails (exit 1).
#include "engine/faults.h"
#include "engine/fp16_probe.h"
#include "harness/tools/check.h"
#include "harness/cli/command.h"
#include "harness/scenario/invariants.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <limits>
#include <sstream>

namespace zerocheck::cli {
namespace {

struct MutantsArgs {
  double time_per_fault = 30;
  double time_per_deep_fault = 120;  // a conjunction of conditions takes the random draw longer
  int64_t cases = 2000;
  uint64_t seed = 1;
  std::string out = "zerocheck-out/mutants";
  std::string only;  // comma-separated fault names; empty: all
  bool json = false, ablate = false, no_deep = false;
};

std::vector<zero3::FaultInfo> selected_faults(const MutantsArgs& args) {
  std::vector<zero3::FaultInfo> out;
  if (args.only.empty()) {
    for (const auto& info : zero3::fault_catalogue())
      if (!(args.no_deep && info.deep)) out.push_back(info);
    return out;
  }
  std::stringstream in(args.only);
  std::string name;
  while (std::getline(in, name, ',')) {
    const zero3::Fault fault = zero3::engine_by_name(name, "--faults");
    for (const auto& info : zero3::fault_catalogue())
      if (info.fault == fault) out.push_back(info);
  }
  return out;
}

CheckOptions options_for(const MutantsArgs& args, const zero3::FaultInfo& info) {
  CheckOptions options;
  options.fault = info.fault;
  // A deep fault's conjunction takes many cases to meet: only its time bounds it.
  options.cases = info.deep ? std::numeric_limits<int64_t>::max() : args.cases;
  options.seed = args.seed;
  options.time_limit_s = info.deep ? args.time_per_deep_fault : args.time_per_fault;
  options.out_dir = args.out;
  options.fp16 = info.fp16;  // an fp16 fault bites only in fp16 scenarios
  return options;
}

// Whether `info` cannot be run on this LibTorch: an fp16 fault where no fp16 Linear runs on CPU.
// Such a row is reported as not runnable here, neither killed nor a survivor.
bool not_runnable_here(const zero3::FaultInfo& info) { return info.fp16 && !zero3::cpu_fp16_available(); }

std::string others_text(const std::map<std::string, int64_t>& others) {
  std::string out;
  for (const auto& [invariant, cases] : others) out += fmt::format("{}{}x{}", out.empty() ? "" : " ", invariant, cases);
  return out.empty() ? "-" : out;
}

int run_scoring(const MutantsArgs& args) {
  nlohmann::json rows = nlohmann::json::array();
  bool survivor = false;
  if (!args.json)
    fmt::print("{:<32} {:<6} {:<9} {:>6} {:>8} {:>7} {:>4}  {}\n", "fault", "killed", "invariant", "cases", "seconds",
               "modules", "ops", "also caught by (cases)");
  for (const auto& info : selected_faults(args)) {
    if (not_runnable_here(info)) {
      rows.push_back({{"fault", info.name}, {"deep", info.deep}, {"killed", nullptr},
                      {"expected_invariant", info.invariant}, {"not_runnable", zero3::cpu_fp16_refusal()}});
      if (!args.json) {
        fmt::print("{:<32} {:<6} {:<9} NOT RUNNABLE HERE: needs fp16, and this LibTorch has no fp16 Linear on CPU "
                   "({})\n", info.name, "n/a", std::string(info.invariant), zero3::cpu_fp16_refusal());
        std::fflush(stdout);
      }
      continue;
    }
    CheckOptions options = options_for(args, info);
    options.wanted_invariant = std::string(info.invariant);
    const CheckResult result = run_check(options);
    nlohmann::json row{{"fault", info.name},
                       {"deep", info.deep},
                       {"killed", result.finding.has_value()},
                       {"expected_invariant", info.invariant},
                       {"other_invariants", result.other_invariants},
                       {"cases_run", result.cases_run}};
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
                  {"modules", nullptr}, {"ops", nullptr}});
    }
    if (!args.json) {
      if (result.finding)
        fmt::print("{:<32} {:<6} {:<9} {:>6} {:>8.2f} {:>7} {:>4}  {}\n", info.name, "yes", std::string(info.invariant),
                   result.finding->cases_to_find, result.finding->seconds_to_find, row["modules"].get<int64_t>(),
                   row["ops"].get<int64_t>(), others_text(result.other_invariants));
      else
        fmt::print("{:<32} {:<6} {:<9} SURVIVED {} cases; caught only by: {}\n", info.name, "NO",
                   std::string(info.invariant), result.cases_run, others_text(result.other_invariants));
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  if (args.json) std::cout << rows.dump() << std::endl;
  return survivor ? kExitViolation : kExitOk;
}

int run_ablation(const MutantsArgs& args) {
  const auto& columns = reference_invariants();  // an oracle to switch off for each
  const auto faults = selected_faults(args);
  nlohmann::json matrix = nlohmann::json::array();
  std::map<std::string, std::vector<std::string>> only_caught_by;  // oracle -> faults nobody else catches
  size_t name_width = 32;  // the longest fault name sets the first column
  for (const auto& info : faults) name_width = std::max(name_width, info.name.size());
  if (!args.json) {
    fmt::print("fault x oracle switched off: '.' still caught (by another oracle), 'S' survives\n");
    fmt::print("{:<{}}", "fault", name_width);
    for (const auto& c : columns) fmt::print(" {:>3}", c);
    fmt::print("\n");
  }
  for (const auto& info : faults) {
    nlohmann::json row{{"fault", info.name}, {"invariant", info.invariant}};
    if (not_runnable_here(info)) {  // no column: nothing ran, so it shows no oracle necessary
      row["not_runnable"] = zero3::cpu_fp16_refusal();
      if (!args.json) fmt::print("{:<{}} not runnable here (no fp16 Linear on CPU)\n", info.name, name_width);
      matrix.push_back(row);
      continue;
    }
    if (!args.json) fmt::print("{:<{}}", info.name, name_width);
    for (const auto& off : columns) {
      CheckOptions options = options_for(args, info);
      options.disabled_oracles = {off};
      const CheckResult result = run_check(options);
      const bool survives = !result.finding.has_value();
      row[off] = survives ? nlohmann::json("survives") : nlohmann::json(result.finding->violation.invariant);
      if (survives) only_caught_by[off].push_back(std::string(info.name));
      if (!args.json) {
        fmt::print(" {:>3}", survives ? "S" : ".");
        std::fflush(stdout);
      }
    }
    if (!args.json) fmt::print("\n");
    matrix.push_back(row);
  }
  bool redundant = false;
  nlohmann::json necessity = nlohmann::json::object();
  for (const auto& c : columns) {
    necessity[c] = only_caught_by[c];
    redundant |= only_caught_by[c].empty();
    if (!args.json)
      fmt::print("{}: {}\n", c, only_caught_by[c].empty() ? std::string("NOT NECESSARY: every fault is caught without it")
                                                          : "only it catches " + fmt::format("{}", fmt::join(only_caught_by[c], ", ")));
  }
  if (args.json) std::cout << nlohmann::json{{"matrix", matrix}, {"necessary_for", necessity}}.dump() << std::endl;
  return redundant ? kExitViolation : kExitOk;
}

}  // namespace

void register_mutants_command(CLI::App& command, int& exit_code) {
  auto args = std::make_shared<MutantsArgs>();
  command.add_option("--time-per-fault", args->time_per_fault, "budget per fault (and per ablated oracle) in seconds")
      ->check(CLI::Range(0.1, 1e6));
  command.add_option("--time-per-deep-fault", args->time_per_deep_fault,
                     "budget per deep fault (engine/faults.h ZERO3_DEEP_FAULTS), and per ablated oracle, in seconds")
      ->check(CLI::Range(0.1, 1e6));
  command.add_option("--cases", args->cases, "at most this many cases per fault (a deep fault: its time only)")
      ->check(CLI::Range(1, 10000000));
  command.add_option("--seed", args->seed, "seed of the scenario generator");
  command.add_option("--out", args->out, "where shrunk scenarios are written");
  command.add_option("--faults", args->only, "comma-separated fault names (default: the whole catalogue)");
  command.add_flag("--ablate", args->ablate, "switch each oracle off in turn and print the fault x oracle matrix");
  command.add_flag("--no-deep", args->no_deep, "leave out the deep faults (engine/faults.h ZERO3_DEEP_FAULTS)");
  command.add_flag("--json", args->json, "print JSON");
  command.callback([args, &exit_code] { exit_code = args->ablate ? run_ablation(*args) : run_scoring(*args); });
}

}  // namespace zerocheck::cli
