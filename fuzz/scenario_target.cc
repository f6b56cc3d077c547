#include "fuzz/scenario_target.h"

#include "engine/errors.h"
#include "harness/tools/check.h"
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/profile_options.h"
#include "harness/scenario/bytes.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <type_traits>

namespace zerocheck::fuzz {

const ScenarioTarget& scenario_ops_target() {
  static const ScenarioTarget target{"scenario_ops", DrawProfile::training};
  return target;
}

const ScenarioTarget& attrs_target() {
  static const ScenarioTarget target{"attrs", DrawProfile::attributes};
  return target;
}

OpsRun run_scenario_bytes(const ScenarioTarget& target, const uint8_t* data, size_t size, zero3::Fault fault,
                          const std::optional<DecodeLimits>& limits) {
  const DecodeLimits decode = limits.value_or(DecodeLimits(target.profile));
  if (decode.profile != target.profile)
    throw zero3::UsageError(fmt::format("target {} decodes the {} profile, not {}", target.name,
                                        to_string(target.profile), to_string(decode.profile)));
  OpsRun run;
  run.scenario = parse_scenario(to_json(scenario_from_bytes(data, size, decode)).dump());
  run.verdict = run_scenario(run.scenario, profile_run_options(target.profile, fault));
  return run;
}

std::optional<Finding> finding_of(const ScenarioTarget& target, const OpsRun& run, zero3::Fault fault,
                                  const std::string& scenario_file) {
  if (run.verdict.ok()) return std::nullopt;
  const Violation& v = *run.verdict.violation;
  const std::string op = v.op_index >= 0 && v.op_index < static_cast<int64_t>(run.scenario.ops.size())
                             ? to_string(run.scenario.ops[static_cast<size_t>(v.op_index)].kind)
                             : "the run";
  Finding finding;
  finding.signature = fmt::format("{} {} {} after {}", target.name, zero3::fault_name(fault), v.invariant, op);
  finding.details = fmt::format("VIOLATION {}\n{}history (rank 0):\n", v.to_text(), describe(run.scenario));
  for (const auto& line : run.verdict.history) finding.details += "  " + line + "\n";
  finding.details += fmt::format("scenario written to {}\nreplay with:\n  {}\n", scenario_file,
                                 replay_command(scenario_file, fault, CommKind::local));
  return finding;
}

zero3::Fault engine_from_environment() {
  const char* name = std::getenv("ZEROCHECK_ENGINE");
  if (name == nullptr || *name == '\0') return zero3::Fault::none;
  return zero3::engine_by_name(name, "ZEROCHECK_ENGINE");
}

DecodeLimits limits_from_environment(const ScenarioTarget& target) {
  DecodeLimits limits(target.profile);
  const ProfileBounds widest = bounds_of(target.profile);
  auto read = [](const char* variable, int64_t low, int64_t high, auto& field) {
    const char* text = std::getenv(variable);
    if (text == nullptr || *text == '\0') return;
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < low || value > high)
      throw zero3::UsageError(fmt::format("{}='{}' is not a whole number in {}..{}", variable, text, low, high));
    field = static_cast<std::decay_t<decltype(field)>>(value);
  };
  read("ZEROCHECK_FUZZ_WORLD", 1, kMaxFixedWorld, limits.world);
  read("ZEROCHECK_FUZZ_MAX_NODES", 1, static_cast<int64_t>(widest.max_nodes), limits.max_nodes);
  read("ZEROCHECK_FUZZ_MAX_OPS", 0, static_cast<int64_t>(widest.max_ops), limits.max_ops);
  limits.validate();
  return limits;
}

std::string violation_scenario_path(const uint8_t* data, size_t size) {
  // FNV-1a: a stable name per input, so re-running a crash overwrites its own file.
  uint64_t hash = 14695981039346656037ULL;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ULL;
  const std::string name = fmt::format("zerocheck-violation-{:016x}.json", hash);
  const char* out = std::getenv("ZEROCHECK_SCENARIO_OUT");
  if (out == nullptr || *out == '\0') return "./" + name;
  const std::string path = out;
  return path.back() == '/' ? path + name : path;
}

void write_scenario(const Scenario& scenario, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << to_json(scenario).dump(2) << "\n";
  file.close();
  if (!file) throw zero3::UsageError("cannot write the scenario to '" + path + "'");
}

namespace {
// What start_fuzzing read; libFuzzer calls fuzz_one_input on the same thread, one input at a time.
const ScenarioTarget* g_target = nullptr;
zero3::Fault g_engine = zero3::Fault::none;
DecodeLimits g_limits;
}  // namespace

void start_fuzzing(const ScenarioTarget& target) {
  try {
    g_target = &target;
    g_engine = engine_from_environment();
    g_limits = limits_from_environment(target);
  } catch (const zero3::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::abort();
  }
  const ProfileBounds widest = bounds_of(target.profile);
  const std::string world = g_limits.world > 0 ? std::to_string(g_limits.world) : fmt::format("1..{}", widest.max_world);
  std::string off;
  for (const auto& name : profile_run_options(target.profile).disabled_oracles) off += (off.empty() ? "" : ",") + name;
  std::fprintf(stderr, "zerocheck-fuzz: %s against engine %s (world %s, at most %zu nodes and %zu operations%s)\n",
               target.name, std::string(zero3::fault_name(g_engine)).c_str(), world.c_str(), g_limits.max_nodes,
               g_limits.max_ops, off.empty() ? "" : (", oracles " + off + " off").c_str());
}

int fuzz_one_input(const uint8_t* data, size_t size) {
  OpsRun run;
  try {
    run = run_scenario_bytes(*g_target, data, size, g_engine, g_limits);
  } catch (const std::exception& e) {
    report_and_abort({std::string(g_target->name) + ": decoding or running threw " + exception_type(e), e.what()});
  }
  if (run.verdict.ok()) return 0;
  const std::string path = violation_scenario_path(data, size);
  try {
    write_scenario(run.scenario, path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zerocheck-fuzz: %s\n", e.what());
  }
  report_and_abort(*finding_of(*g_target, run, g_engine, path));
}

}  // namespace zerocheck::fuzz
