#include "harness/tools/check.h"

#include "engine/precision.h"
#include "harness/scenario/generators.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

namespace zerocheck {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Greedy shrinking over rapidcheck's shrink tree: take the first smaller scenario that still
// breaks the same invariant, until none does (or the run budget is spent).
using Runner = std::function<Verdict(const Scenario&, const RunOptions&)>;

rc::Shrinkable<Scenario> shrink(rc::Shrinkable<Scenario> current, const std::string& invariant,
                                const Runner& run_scenario, const RunOptions& run, int64_t budget, int64_t& runs) {
  bool progressed = true;
  while (progressed && runs < budget) {
    progressed = false;
    auto candidates = current.shrinks();
    while (auto candidate = candidates.next()) {
      if (++runs > budget) break;
      const Verdict v = run_scenario(candidate->value(), run);
      if (v.violation && v.violation->invariant == invariant) {
        current = *candidate;
        progressed = true;
        break;
      }
    }
  }
  return current;
}

}  // namespace

std::string replay_command(const std::string& file, zero3::Fault fault, CommKind comm, double inert_knobs_fraction) {
  std::string command = "zerocheck replay " + file + " --engine " + std::string(zero3::fault_name(fault));
  if (comm == CommKind::gloo) command += " --comm gloo";
  // The scenarios I10 runs twice depend on the fraction: a replay must choose as the search did.
  if (inert_knobs_fraction != RunOptions().inert_knobs_fraction)
    command += fmt::format(" --inert-fraction {}", inert_knobs_fraction);
  return command;
}

CheckResult run_check(const CheckOptions& options, const Progress& progress) {
  CheckResult result;
  const auto start = Clock::now();
  auto last_report = start;
  GeneratorOptions generator;
  generator.fixed_world = options.fixed_world;
  generator.max_ops = options.max_ops;
  generator.fp16 = options.fp16;
  const auto gen = gen_scenario(generator);
  RunOptions run;
  run.fault = options.fault;
  run.world.comm = options.comm;
  run.disabled_oracles = options.disabled_oracles;
  run.inert_knobs_fraction = options.inert_knobs_fraction;
  const Runner run_scenario = options.runner ? options.runner : Runner(zerocheck::run_scenario);
  for (int64_t i = 0; i < options.cases; ++i) {
    if (options.time_limit_s > 0 && since(start) > options.time_limit_s) break;
    // Sizes sweep from small to large and again, as rapidcheck does across a run.
    const int size = static_cast<int>((i % 50) * 2 + 2);
    rc::Shrinkable<Scenario> drawn = gen(rc::Random(options.seed * 1000003ULL + static_cast<uint64_t>(i)), size);
    const Scenario scenario = drawn.value();
    if (scenario.config.precision.fp16_enabled.value_or(false)) {
      ++result.with_fp16;
      const std::string refusal =
          zero3::fp16_refusal_here(zero3::precision_in_effect({}, scenario.config.precision));
      if (!refusal.empty()) {  // not runnable here: counted and named, never run, never passed
        ++result.not_runnable;
        if (result.not_runnable_cases.size() < 20) result.not_runnable_cases.push_back(i);
        result.not_runnable_reason = refusal;
        continue;
      }
    }
    const ScenarioShape shape = shape_of(scenario);
    result.with_tied += shape.tied;
    result.with_frozen += shape.frozen;
    result.with_zero_size += shape.zero_size;
    result.with_experts += shape.experts;
    result.with_placement += scenario.placement.kind != zero3::PlacementSpec::Kind::none;
    result.with_bf16 += scenario.config.precision.bf16_enabled.value_or(false);
    result.with_overflow_protection += scenario.overflow_protection.has_value();
    result.with_injection += std::any_of(scenario.ops.begin(), scenario.ops.end(),
                                         [](const Op& op) { return op.kind == OpKind::inject; });
    const Verdict verdict = run_scenario(scenario, run);
    ++result.cases_run;
    if (progress && std::chrono::duration<double>(Clock::now() - last_report).count() > 0.5) {
      progress(result.cases_run, since(start));
      last_report = Clock::now();
    }
    if (verdict.ok()) continue;
    if (!options.wanted_invariant.empty() && verdict.violation->invariant != options.wanted_invariant) {
      ++result.other_invariants[verdict.violation->invariant];
      continue;
    }

    Finding finding;
    finding.cases_to_find = result.cases_run;
    finding.seconds_to_find = since(start);
    const auto small = shrink(drawn, verdict.violation->invariant, run_scenario, run, options.max_shrink_runs, finding.shrink_runs);
    finding.scenario = small.value();
    const Verdict again = run_scenario(finding.scenario, run);
    finding.violation = again.violation ? *again.violation : *verdict.violation;
    finding.history = again.history;
    std::filesystem::create_directories(options.out_dir);
    finding.scenario_file =
        (std::filesystem::path(options.out_dir) /
         fmt::format("{}-{}-seed{}-case{}.json", zero3::fault_name(options.fault), finding.violation.invariant,
                     options.seed, i))
            .string();
    std::ofstream(finding.scenario_file) << to_json(finding.scenario).dump(2) << "\n";
    finding.replay_command = replay_command(finding.scenario_file, options.fault, options.comm, options.inert_knobs_fraction);
    result.finding = std::move(finding);
    break;
  }
  result.seconds = since(start);
  return result;
}

nlohmann::json to_json(const CheckResult& result, zero3::Fault fault) {
  nlohmann::json violations = nlohmann::json::array();
  if (result.finding) {
    const Finding& f = *result.finding;
    const ScenarioShape shape = shape_of(f.scenario);
    violations.push_back({{"invariant", f.violation.invariant},
                          {"message", f.violation.to_text()},
                          {"scenario_file", f.scenario_file},
                          {"replay", f.replay_command},
                          {"ops", shape.ops},
                          {"modules", shape.modules},
                          {"cases_to_find", f.cases_to_find},
                          {"seconds_to_find", f.seconds_to_find}});
  }
  return {{"engine", zero3::fault_name(fault)},
          {"cases_run", result.cases_run},
          {"passed", !result.finding.has_value()},
          {"cases_per_second", result.seconds > 0 ? result.cases_run / result.seconds : 0.0},
          {"generated", {{"tied", result.with_tied}, {"frozen", result.with_frozen},
                         {"zero_size", result.with_zero_size}, {"experts", result.with_experts},
                         {"placement", result.with_placement}, {"bf16", result.with_bf16},
                         {"overflow_protection", result.with_overflow_protection},
                         {"injection", result.with_injection}, {"fp16", result.with_fp16}}},
          {"not_runnable", {{"count", result.not_runnable}, {"cases", result.not_runnable_cases},
                            {"reason", result.not_runnable_reason}}},
          {"violations", violations}};
}

}  // namespace zerocheck
