// I10 on this engine: the ZeRO knobs that promise not to change a number change none. A scenario
// chosen by its seed (RunOptions::inert_knobs_fraction) runs a second time with its knobs drawn
// again (with_zero_knobs_redrawn: sizes anew, every flag the other way); after every operation
// each rank's record of what it saw must be the same in both runs, field for field: the
// outcome, its loss, and the live engine's step counters, reported gradient norm and loss scale,
// every fp32 master, shard gradient and optimizer state, as bits. The knobs are inert by
// construction here (engine/config.h); the oracle keeps them so. A world of processes
// (run_scenario_ranks) runs once: I10 is run_scenario's.
#pragma once

#include "harness/interpreter/interpreter.h"

#include <functional>

namespace zerocheck {

// One run of a scenario with the given options and drivers, on a world made for it.
using ScenarioRun = std::function<RankReports(const Scenario&, const RunOptions&, const RankDrivers&)>;

// Whether `scenario` gets I10's second run under `options`.
bool replays_inert_knobs(const Scenario& scenario, const RunOptions& options);

// Runs `scenario` with `run`, then, when the first run holds, again with its knobs drawn anew
// and every other oracle off; returns the first run's verdict, or I10's on a difference.
Verdict judge_with_inert_knobs(const Scenario& scenario, const RunOptions& options, const ScenarioRun& run);

}  // namespace zerocheck
