// JobPool: where a command's work runs when its ranks are processes. A job is a JSON object
// ({"kind": "scenario" | "train" | "exit", ...}, harness/tools/jobs.h) that every rank of the
// pool runs; each rank answers with one JSON result.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <vector>

namespace zerocheck {

class JobPool {
 public:
  virtual ~JobPool() = default;
  // The number of ranks (processes) that run each job.
  virtual int world_size() const = 0;
  // Runs `job` on every rank and returns their results in rank order.
  // Throws RankLost (harness/world/process_world.h) when a rank dies or hangs.
  virtual std::vector<nlohmann::json> run(const nlohmann::json& job) = 0;
};

}  // namespace zerocheck
