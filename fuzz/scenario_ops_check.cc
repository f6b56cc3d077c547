#include "fuzz/scenario_ops_check.h"

#include "engine/errors.h"
#include "harness/check.h"
#include "harness/interpreter/interpreter.h"
#include "harness/scenario_bytes.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <type_traits>
#include <fstream>

namespace zerocheck::fuzz {

OpsRun run_scenario_bytes(const uint8_t* data, size_t size, zero3::Fault fault, const DecodeLimits& limits) {
  OpsRun run;
  run.scenario = parse_scenario(to_json(scenario_from_bytes(data, size, limits)).dump());
  RunOptions options;
  options.fault = fault;  // comm: LocalComm ranks, the default
  run.verdict = run_scenario(run.scenario, options);
  return run;
}

std::optional<Finding> finding_of(const OpsRun& run, zero3::Fault fault, const std::string& scenario_file) {
  if (run.verdict.ok()) return std::nullopt;
  const Violation& v = *run.verdict.violation;
  const std::string op = v.op_index >= 0 && v.op_index < static_cast<int64_t>(run.scenario.ops.size())
                             ? to_string(run.scenario.ops[static_cast<size_t>(v.op_index)].kind)
                             : "the run";
  Finding finding;
  finding.signature = fmt::format("scenario_ops {} {} after {}", zero3::fault_name(fault), v.invariant, op);
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

DecodeLimits limits_from_environment() {
  DecodeLimits limits;
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
  read("ZEROCHECK_FUZZ_WORLD", 1, kMaxDecodedWorld, limits.world);
  read("ZEROCHECK_FUZZ_MAX_NODES", 1, static_cast<int64_t>(kMaxDecodedNodes), limits.max_nodes);
  read("ZEROCHECK_FUZZ_MAX_OPS", 0, static_cast<int64_t>(kMaxDecodedOps), limits.max_ops);
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

}  // namespace zerocheck::fuzz
