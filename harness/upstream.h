// `zerocheck upstream`: export scenarios, replay them on an installed DeepSpeed through the
// Python runner (harness/deepspeed/) on W local ranks, and group what it found.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace zerocheck {

struct UpstreamOptions {
  std::string python = "python3";
  std::string adapter = "deepspeed";  // or passthrough / faulty, to check the runner itself
  int64_t cases = 10;
  uint64_t seed = 1;
  int world_size = 1;
  std::string out_dir = "zerocheck-out/upstream";
  int timeout_s = 1800;
};

struct UpstreamResult {
  int runner_exit = 0;       // the Python runner's exit code (0, 1, 2), or 2 when it could not run
  std::string runner_error;  // what it printed when it exited 2
  nlohmann::json summary;    // the runner's summary.json (empty when it did not finish)
};

// Returns the run's result. Throws zero3::UsageError for bad options.
UpstreamResult run_upstream(const UpstreamOptions& options);

}  // namespace zerocheck
