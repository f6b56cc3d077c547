// `zerocheck upstream`: export scenarios (or take the maintainer's own), then hand over to the
// Python supervisor (harness/deepspeed/, `python -m zerocheck_ds suite`), which replays them on
// supervised rank processes, groups findings by signature, compares with a baseline and shrinks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck {

struct UpstreamOptions {
  std::string python = "python3";
  std::string adapter = "deepspeed";  // or passthrough / faulty, to check the runner itself
  int64_t cases = 10;
  uint64_t seed = 1;
  int world_size = 1;
  int stage = 3;                        // the ZeRO stage the scenarios are replayed with
  std::string disable;                  // of I3, I4, I9: invariants not to check ("I3,I9")
  bool ablate = false;                  // replay again with each of I3, I4, I6, I9 off in turn
  bool keep_checkpoints = false;        // keep OUT/checkpoints/<scenario> (removed by default)
  std::string out_dir = "zerocheck-out/upstream";
  std::vector<std::string> scenarios;  // given: replay these instead of exporting
  std::string deepspeed_tree;          // a DeepSpeed source tree instead of the installed one
  std::string baseline;                // an earlier out_dir
  bool shrink = false;
  double shrink_seconds = 300;
  double scenario_timeout = 120;
  int batch = 50;
  bool json = false;
};

// The supervisor's command line for these options (exported scenarios under out_dir/scenarios).
std::vector<std::string> supervisor_command(const UpstreamOptions& options, const std::string& self);

// Exports when no scenarios are given, then replaces this process with the supervisor (so
// Ctrl-C and exit codes are the supervisor's own). Returns only on failure, with exit code 2
// after printing why. Throws zero3::UsageError for bad options.
int run_upstream(const UpstreamOptions& options);

}  // namespace zerocheck
