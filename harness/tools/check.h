// `zerocheck check`: random scenarios against an engine until a violation or the budget ends;
// a violation is shrunk to a minimal scenario, written as JSON, with the command that replays it.
#pragma once

#include "engine/faults.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario/scenario.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace zerocheck {

struct CheckOptions {
  zero3::Fault fault = zero3::Fault::none;
  int fixed_world = 0;      // 0: each case draws its world from 1..4; else every case has 1..8 ranks
  int64_t cases = 100;
  uint64_t seed = 1;
  int max_ops = 24;
  double time_limit_s = 0;  // 0: no limit
  CommKind comm = CommKind::local;
  std::string out_dir = "zerocheck-out";
  int64_t max_shrink_runs = 2000;
  // When set, a violation of another invariant does not end the run: it is counted in
  // CheckResult::other_invariants and the search goes on (`mutants` scores a fault this way:
  // killed only by the invariant the catalogue names).
  std::string wanted_invariant;
  std::set<std::string> disabled_oracles;  // see RunOptions
  double inert_knobs_fraction = 0.25;      // see RunOptions (I10's second run)
  // Draw fp16.enabled for most scenarios (DrawLimits::fp16). Where this LibTorch computes no fp16
  // Linear on CPU (zero3::fp16_refusal_here), a scenario asking fp16 is not run: it is counted
  // in CheckResult::not_runnable and named, never passed, never a violation.
  bool fp16 = false;
  // Runs one scenario (unset: run_scenario, the thread world). `check --procs` runs it on a
  // world of processes (harness/tools/jobs.h).
  std::function<Verdict(const Scenario&, const RunOptions&)> runner;
};

struct Finding {
  Violation violation;        // as seen on the shrunk scenario
  Scenario scenario;          // shrunk
  std::string scenario_file;  // where it was written
  std::string replay_command;
  std::vector<std::string> history;
  int64_t cases_to_find = 0;
  double seconds_to_find = 0;
  int64_t shrink_runs = 0;
};

struct CheckResult {
  int64_t cases_run = 0;
  double seconds = 0;
  std::optional<Finding> finding;
  std::map<std::string, int64_t> other_invariants;  // cases caught by another invariant than the wanted one
  // Shape counts over generated cases, to show the generator reaches what matters.
  int64_t with_tied = 0, with_frozen = 0, with_zero_size = 0, with_experts = 0, with_placement = 0, with_bf16 = 0;
  int64_t with_overflow_protection = 0, with_injection = 0, with_fp16 = 0;
  // Drawn scenarios this LibTorch cannot run (fp16 without a CPU fp16 Linear): not in cases_run.
  int64_t not_runnable = 0;
  std::vector<int64_t> not_runnable_cases;  // their case indices (the first 20), for replay by seed
  std::string not_runnable_reason;          // zero3::fp16_refusal_here's message
};

// Called about twice a second with the cases run so far.
using Progress = std::function<void(int64_t cases, double seconds)>;

// Runs the check. Throws std::filesystem errors only when the out dir cannot be written.
CheckResult run_check(const CheckOptions& options, const Progress& progress = nullptr);

// Returns "zerocheck replay FILE --engine E [--comm gloo] [--inert-fraction F]" (F when not the default).
std::string replay_command(const std::string& file, zero3::Fault fault, CommKind comm,
                           double inert_knobs_fraction = RunOptions().inert_knobs_fraction);

nlohmann::json to_json(const CheckResult& result, zero3::Fault fault);

}  // namespace zerocheck
