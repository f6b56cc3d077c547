// The jobs a world of processes runs, one function per side: the launcher makes a job and
// judges the results every rank sent back; a worker runs a job on its own rank. The one job
// table: a new job is one kind here on each side.
//
// Results are bit-identical to the thread world's: the same interpreter and training code run,
// every rank's part travels as JSON (doubles printed round-trip exact) and the same judge merges.
// Errors travel as their kind (engine/errors.h) and text and are raised again as that kind.
#pragma once

#include "harness/interpreter/interpreter.h"
#include "harness/scenario/scenario.h"
#include "harness/tools/repro_seed.h"
#include "harness/tools/train.h"
#include "harness/world/job_pool.h"
#include "harness/world/world.h"

#include <nlohmann/json.hpp>

namespace zerocheck {

// Runs `scenario` on the pool's processes and judges it as run_scenario does. The scenario
// travels as its JSON (harness/scenario/write.cc). Requires: scenario.world_size <=
// pool.world_size() (ranks beyond the scenario's world sit the job out).
Verdict run_scenario_on(JobPool& pool, const Scenario& scenario, const RunOptions& options);

// Trains on the pool's processes (the world: all of them) and judges as run_training does.
TrainReport run_training_on(JobPool& pool, const TrainOptions& options);

// Replays the seed bug report on the pool's processes (the world: all of them).
ReproReport run_repro_seed_on(JobPool& pool, const ReproOptions& options);

// Worker side: runs `job` on `world` (every process of the pool, this one's rank here) and
// returns its result. Errors come back as {"error": {"kind": ..., "what": ...}} (a rank's
// failure as {"rank_failure": {"rank": ..., "detail": ...}}) so the launcher can raise them again.
nlohmann::json run_job_here(World& world, const nlohmann::json& job);

}  // namespace zerocheck
