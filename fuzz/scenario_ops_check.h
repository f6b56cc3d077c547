// The scenario_ops target's check: bytes -> Scenario (harness/scenario_bytes.h) -> the one
// interpreter (harness/interpreter/interpreter.h) on LocalComm ranks, with oracles I1..I8 after every operation.
//
// The decoded scenario is passed through its JSON form before it runs, so what a violation
// writes to disk is exactly what ran, and `zerocheck replay FILE --engine E` reproduces it.
#pragma once

#include "engine/faults.h"
#include "fuzz/finding.h"
#include "harness/scenario.h"
#include "harness/scenario_bytes.h"
#include "harness/verdict.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace zerocheck::fuzz {

struct OpsRun {
  Scenario scenario;  // as it ran (decoded, then read back from its JSON form)
  Verdict verdict;
};

// Decodes `data` within `limits` and runs it with `fault` planted (Fault::none: the reference
// engine). Throws ScenarioError when the decoded scenario does not read back from JSON (a
// decoder bug).
OpsRun run_scenario_bytes(const uint8_t* data, size_t size, zero3::Fault fault, const DecodeLimits& limits = {});

// Returns the finding for a run whose verdict holds a violation (nothing when it held): the
// signature names the engine, the invariant and the operation kind; the details give the
// violation, the scenario, the history and the command that replays `scenario_file`.
std::optional<Finding> finding_of(const OpsRun& run, zero3::Fault fault, const std::string& scenario_file);

// Returns the engine named by ZEROCHECK_ENGINE (Fault::none when unset or "reference").
// Throws zero3::UsageError listing every engine name for an unknown one.
zero3::Fault engine_from_environment();

// Returns the decode limits from ZEROCHECK_FUZZ_WORLD (1..4), ZEROCHECK_FUZZ_MAX_NODES (1..12) and
// ZEROCHECK_FUZZ_MAX_OPS (0..64); an unset variable keeps the default. Throws zero3::UsageError
// naming the variable for a value that is not a number in range.
DecodeLimits limits_from_environment();

// Returns where a violation's scenario JSON goes: $ZEROCHECK_SCENARIO_OUT when set (a folder when
// it ends in '/'), else ./zerocheck-violation-<hash of the input>.json; a folder gets that name.
std::string violation_scenario_path(const uint8_t* data, size_t size);

// Writes the scenario's JSON form to `path`. Throws zero3::UsageError when it cannot be written.
void write_scenario(const Scenario& scenario, const std::string& path);

}  // namespace zerocheck::fuzz
