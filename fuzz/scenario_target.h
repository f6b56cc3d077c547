// The targets that decode bytes into a Scenario (harness/scenario/bytes.h) and run it through the
// one interpreter (harness/interpreter/interpreter.h) on LocalComm ranks:
//
//  - scenario_ops: the whole language (DrawProfile::training), every oracle, I1..I9, after every
//    operation: deep, a few dozen executions a second;
//  - attrs: the property the project exists for (DrawProfile::attributes: trees of up to 64
//    nodes, worlds of up to 8 ranks, initialize and repeated initialize, attribute writes,
//    forward, release, destroy; nothing that trains), oracles I1, I2, I5 and I7 only, so no dense
//    twin is built: hundreds of executions a second.
//
// The decoded scenario is passed through its JSON form before it runs, so what a violation
// writes to disk is exactly what ran, and `zerocheck replay FILE --engine E` reproduces it.
#pragma once

#include "engine/faults.h"
#include "fuzz/finding.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/bytes.h"
#include "harness/interpreter/interpreter.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace zerocheck::fuzz {

struct ScenarioTarget {
  const char* name;      // "scenario_ops": the binary is fuzz_<name>
  DrawProfile profile;   // the language its bytes decode into; how it runs: profile_run_options
};
const ScenarioTarget& scenario_ops_target();
const ScenarioTarget& attrs_target();

struct OpsRun {
  Scenario scenario;  // as it ran (decoded, then read back from its JSON form)
  Verdict verdict;
};

// Decodes `data` within `limits` (default: the target profile's widest) and runs it with `fault`
// planted (Fault::none: the reference engine). Throws UsageError when the limits' profile is not
// the target's, ScenarioError when the decoded scenario does not read back from JSON (a decoder
// bug).
OpsRun run_scenario_bytes(const ScenarioTarget& target, const uint8_t* data, size_t size, zero3::Fault fault,
                          const std::optional<DecodeLimits>& limits = std::nullopt);

// Returns the finding for a run whose verdict holds a violation (nothing when it held): the
// signature names the target, the engine, the invariant and the operation kind; the details give
// the violation, the scenario, the history and the command that replays `scenario_file`.
std::optional<Finding> finding_of(const ScenarioTarget& target, const OpsRun& run, zero3::Fault fault,
                                  const std::string& scenario_file);

// Returns the engine named by ZEROCHECK_ENGINE (Fault::none when unset or "reference").
// Throws zero3::UsageError listing every engine name for an unknown one.
zero3::Fault engine_from_environment();

// Returns the target's decode limits from ZEROCHECK_FUZZ_WORLD (a fixed world, 1..8 for either
// profile), ZEROCHECK_FUZZ_MAX_NODES and ZEROCHECK_FUZZ_MAX_OPS, within the profile's bounds
// (scenario_ops: 1..12, 0..64; attrs: 1..64, 0..64); an unset variable keeps the widest. Throws zero3::UsageError naming the
// variable and its range for a value that is not a number in range.
DecodeLimits limits_from_environment(const ScenarioTarget& target);

// Returns where a violation's scenario JSON goes: $ZEROCHECK_SCENARIO_OUT when set (a folder when
// it ends in '/'), else ./zerocheck-violation-<hash of the input>.json; a folder gets that name.
std::string violation_scenario_path(const uint8_t* data, size_t size);

// Writes the scenario's JSON form to `path`. Throws zero3::UsageError when it cannot be written.
void write_scenario(const Scenario& scenario, const std::string& path);

// The bodies of the libFuzzer entry points, shared by every scenario target's entry file.
// start_fuzzing reads the environment (engine, limits), prints what runs, and aborts with the
// reason on a bad setting; fuzz_one_input runs one input and, on a violation, writes the scenario,
// prints the finding and its replay command, and aborts.
void start_fuzzing(const ScenarioTarget& target);
int fuzz_one_input(const uint8_t* data, size_t size);

}  // namespace zerocheck::fuzz
