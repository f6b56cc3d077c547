// `zerocheck bench`: what one fuzzer execution costs, measured as ratios in one run.
//
// Decodes `inputs` pseudo-random byte strings (or the files of a fuzzer's corpus: `corpus`) with
// the fuzz decoder (harness/scenario/bytes.h)
// under the given limits (their profile says how a scenario runs, as the fuzz target of that
// profile runs it: harness/interpreter/profile_options.h) and runs every scenario through the one
// interpreter twice: with the invariant sweeps after every operation and without them. Counts ATen operator calls with a
// RecordFunction observer, so "scenarios per second" splits into calls per scenario times the
// cost of a call. Nothing here is a pass/fail threshold; the numbers are for notes and trends.
#pragma once

#include "harness/scenario/bytes.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zerocheck {

struct BenchOptions {
  int64_t inputs = 200;
  uint64_t seed = 1;
  size_t max_input_bytes = 400;
  DecodeLimits limits;
  // When not empty: these inputs (a fuzzer's corpus, what its executions really are) instead of
  // random ones; `inputs` and `seed` are then unused. corpus_name says where they came from.
  std::vector<std::vector<uint8_t>> corpus;
  std::string corpus_name;
};

// Returns the files directly inside `dir`, in name order, as bench inputs. Throws UsageError
// naming the folder when it is not one, cannot be read, or holds no file.
std::vector<std::vector<uint8_t>> read_corpus(const std::string& dir);

struct BenchReport {
  int64_t scenarios = 0, operations = 0, nodes = 0, ranks = 0;  // summed over the scenarios
  std::map<std::string, int64_t> operations_by_kind;              // likewise
  double seconds_checked = 0, seconds_unchecked = 0;
  int64_t aten_calls_checked = 0, aten_calls_unchecked = 0;
  int64_t violations = 0;  // on the reference engine: must be 0
  std::vector<std::pair<std::string, int64_t>> top_aten_calls;  // most called operators, both passes

  nlohmann::json to_json(const BenchOptions& options) const;
};

// Throws UsageError for out-of-range options.
BenchReport run_bench(const BenchOptions& options);

}  // namespace zerocheck
