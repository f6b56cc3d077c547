// `zerocheck train`: ZeRO-3 training of a named model (engine/testing/models.h) next to the dense
// twin on the same data, with the parity and exact-accounting verdict.
//
// A training run is operations for the one interpreter (harness/interpreter): initialize, then
// forward, backward, step and zero_grad per step, each checked by every oracle on every rank (I3
// parity with the one NaN rule, I4 memory, I8 traffic, ...). On top, after every step each rank's
// allocations must hold exactly the model-state bytes of docs/DESIGN.md
// (model::expected_state_bytes), and at the end the consolidated state dict must equal the twin's.
// The world size is the World's the run is given.
#pragma once

#include "engine/faults.h"
#include "harness/model/model.h"
#include "harness/world/world.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck {

struct TrainOptions {
  int64_t steps = 5;
  std::string model = "mlp";
  uint64_t seed = 1;
  int64_t batch_size = 4;
  std::string optimizer = "adam";     // or "sgd" (momentum 0.9)
  double lr = 1e-2;
  int64_t persistence_threshold = 0;  // 0: every parameter with elements is partitioned
  zero3::Fault fault = zero3::Fault::none;
  // For proving fail-fast: this rank throws at the start of step `fail_step` (-1: nobody).
  int fail_rank = -1;
  int64_t fail_step = 0;
  // After the last step, save a checkpoint here (with what --resume needs in its client state).
  std::string save_dir;
  // Start from the checkpoint here, saved by `train --save` at any world size: the model, seed,
  // batch size, optimizer, learning rate and threshold come from it, `steps` more steps run, and
  // the dense twin replays the saved run's steps at its world size first. The resumed ranks
  // build their model from other initial values (seed + 1): the load must overwrite every one.
  std::string resume_dir;

  // What a worker needs.
  nlohmann::json to_json() const;
  // Throws zero3::UsageError for a malformed object or an unknown engine.
  static TrainOptions from_json(const nlohmann::json& json);
};

// What one rank of a training run measured; a world of processes sends it to the launcher.
struct TrainRankResult {
  int rank = 0;
  std::vector<double> losses;          // per step, this rank's
  std::vector<double> twin_losses;     // per step, the dense twin's on this rank's micro-batch
  model::Traffic last_step, expected_last_step;  // forward + backward of the last step
  int64_t state_bytes = 0;             // after the last step: what the rank's allocations hold
  int64_t expected_state_bytes = 0;    // ... and what they must (harness/model)
  std::vector<std::string> problems;   // this rank's broken promises
  std::string failure;                 // the run's failed rank and what it threw ("" when none)
  // Rank 0 only: its consolidated parameters against the dense twin's.
  double max_param_abs_diff = 0;
  std::vector<std::string> differing_parameters;

  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed object.
  static TrainRankResult from_json(const nlohmann::json& json);
};

struct TrainReport {
  int world_size = 0;
  int64_t steps = 0;
  std::string model;
  int64_t first_step = 0;  // > 0 when resumed: the steps the checkpoint had taken
  int resumed_from_world = 0;
  std::vector<double> losses;        // per step: mean over ranks (summed in rank order)
  std::vector<double> dense_losses;  // the same for the dense twin
  // The largest differences, with the one NaN rule: a NaN on one side only is an infinite one
  // (oracles::max_abs_difference); zero when the two sides agree.
  double max_loss_abs_diff = 0;
  double max_param_abs_diff = 0;
  std::vector<int64_t> state_bytes_per_rank;           // measured after the last step
  std::vector<int64_t> expected_state_bytes_per_rank;  // from harness/model (the spec's sizes)
  // Rank 0's forward + backward of the last step, per collective kind. Every operation of every
  // step on every rank is compared kind by kind (I8); a difference anywhere is in `problems`.
  model::Traffic traffic_last_step, expected_traffic_last_step;
  int64_t elements_moved_per_step() const;  // all kinds, last step, rank 0
  int64_t expected_elements_per_step() const;
  std::vector<std::string> problems;  // every broken promise, in words; empty when all held

  bool ok() const { return problems.empty(); }
  nlohmann::json to_json() const;
};

// The tolerance for parity: zero, because both sides sum in rank order and divide once.
inline constexpr double kParityTolerance = 0.0;

// Trains on `world` and compares. A rank that throws is a problem of the report (a finding), not
// an exception. Throws zero3::UsageError for bad options, CheckpointError for a --resume
// directory that is not a `train --save` checkpoint.
TrainReport run_training(const TrainOptions& options, World& world);
// run_training in two halves, for worlds of processes: each process trains the ranks it hosts
// (a thread world: all), and the launcher judges every rank's result. Throws as run_training;
// judge_training throws zero3::CommError for missing ranks.
std::vector<TrainRankResult> run_training_ranks(const TrainOptions& options, World& world);
TrainReport judge_training(const TrainOptions& options, std::vector<TrainRankResult> parts);

}  // namespace zerocheck
