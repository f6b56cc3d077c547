// The scenario each scenario-target input means, stored beside the corpus.
//
// A corpus or regression input of scenario_ops or attrs is raw bytes: what it means is whatever
// the decoder (harness/scenario/bytes.h over the draw) makes of it today, and a change to the draw
// or the language silently changes every input. Each input therefore has its decoded scenario
// checked in as JSON under fuzz/decoded/ (fuzz/corpus/<target>/<file> ->
// fuzz/decoded/corpus/<target>/<file>.json, and so for fuzz/regressions/; outside the corpus
// folders, which libFuzzer reads whole), and the replay tests fail when an input no longer
// decodes to it.
//
// Thread-safety: pure functions, except write mode's file writes.
#pragma once

#include "fuzz/scenario_target.h"

#include <string>
#include <vector>

namespace zerocheck::fuzz {

// Where the decoded JSON of the input at `input_path` lives (see above). Throws
// std::invalid_argument when the path is under neither fuzz/corpus/ nor fuzz/regressions/.
std::string decoded_json_path(const std::string& input_path);

// Compares what `bytes` (the input at `input_path`) decode to on `target` with the stored JSON:
// "" when they are the same scenario, else a message naming both files, the first JSON path that
// differs, and how to rewrite the stored JSON. With ZEROCHECK_WRITE_DECODED=1 in the environment
// it writes the stored JSON instead and returns "".
std::string decoded_json_problem(const ScenarioTarget& target, const std::string& input_path,
                                 const std::string& bytes);

// The stored JSON files under the decoded folders of `inputs`' folders that belong to none of
// `inputs` (an input merged away or deleted): each should go with its input.
std::vector<std::string> orphan_decoded_files(const std::vector<std::string>& inputs);

}  // namespace zerocheck::fuzz
