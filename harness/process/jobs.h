// The jobs a world of processes runs, one function per side: the launcher makes a job and
// judges the results every rank sent back; a worker runs a job on its own rank.
//
// Results are bit-identical to the thread world's: the same interpreter and training code run,
// every rank's part travels as JSON (doubles printed round-trip exact) and the same judge merges.
#pragma once

#include "harness/interpreter/interpreter.h"
#include "harness/process/job_pool.h"
#include "harness/repro_seed.h"
#include "harness/scenario.h"
#include "harness/train.h"

#include <nlohmann/json.hpp>

namespace zerocheck {

// Runs `scenario` on the pool's processes and judges it as run_scenario does. The scenario
// travels as its JSON (harness/scenario_write.cc). Requires: scenario.world_size <=
// pool.world_size() (ranks beyond the scenario's world sit the job out).
Verdict run_scenario_on(JobPool& pool, const Scenario& scenario, const RunOptions& options);

// Trains on the pool's processes (world size = the pool's) and judges as run_training does.
// Throws RankFailure as run_training does when a rank throws.
TrainReport run_training_on(JobPool& pool, const TrainOptions& options);

// Replays the seed bug report on the pool's processes (world size = the pool's).
ReproReport run_repro_seed_on(JobPool& pool, const ReproOptions& options);

// Worker side: runs `job` as this process's rank and returns its result. Errors come back as
// {"error": {"kind": ..., "what": ..., "rank": ...}} so the launcher can rethrow their kind.
nlohmann::json run_job_here(const nlohmann::json& job);

}  // namespace zerocheck
