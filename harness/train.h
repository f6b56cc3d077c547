// `zerocheck train`: ZeRO-3 training next to dense training of the same model on the same data,
// with the parity and exact-accounting verdict.
#pragma once

#include "engine/faults.h"
#include "harness/model/model.h"
#include "harness/world.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck {

struct TrainOptions {
  int world_size = 2;
  int64_t steps = 5;
  std::string model = "mlp";
  uint64_t seed = 1;
  CommKind comm = CommKind::local;
  int64_t batch_size = 4;
  double lr = 1e-2;
  zero3::Fault fault = zero3::Fault::none;
  // For proving fail-fast: this rank throws at the start of step `fail_step` (-1: nobody).
  int fail_rank = -1;
  int64_t fail_step = 0;
  std::chrono::milliseconds timeout{30000};
  // After the last step, save a checkpoint here (with what --resume needs in its client state).
  std::string save_dir;
  // Start from the checkpoint here, saved by `train --save` at any world size: the model, seed,
  // batch size and learning rate come from it, `steps` more steps run at `world_size`, and the
  // dense twin replays the saved run's steps at its world size first.
  std::string resume_dir;

  // What a worker needs (comm and timeout are the process world's own).
  nlohmann::json to_json() const;
  // Throws zero3::UsageError for a malformed object or an unknown engine.
  static TrainOptions from_json(const nlohmann::json& json);
};

// What one rank of a training run measured; a world of processes sends it to the launcher.
struct TrainRankResult {
  int rank = 0;
  std::vector<double> losses;          // per step, this rank's
  model::Traffic last_step;            // forward + backward of the last step
  int64_t state_bytes = 0;             // after the last step
  std::vector<std::string> problems;   // this rank's broken promises
  // Rank 0 only: its consolidated parameters against the dense ones.
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
  std::vector<double> dense_losses;  // the same for the dense baseline
  double max_loss_abs_diff = 0;
  double max_param_abs_diff = 0;
  std::vector<int64_t> state_bytes_per_rank;           // measured after the last step
  std::vector<int64_t> expected_state_bytes_per_rank;  // from harness/model (the spec's sizes)
  // Rank 0's forward + backward of the last step, per collective kind. Every operation of every
  // step on every rank is compared kind by kind; a difference anywhere is in `problems`.
  model::Traffic traffic_last_step, expected_traffic_last_step;
  int64_t elements_moved_per_step() const;  // all kinds, last step, rank 0
  int64_t expected_elements_per_step() const;
  std::vector<std::string> problems;  // every broken promise, in words; empty when all held

  bool ok() const { return problems.empty(); }
  nlohmann::json to_json() const;
};

// The tolerance for parity: zero, because both sides sum in rank order and divide once.
inline constexpr double kParityTolerance = 0.0;

// Trains and compares. Throws RankFailure when a rank throws; zero3::UsageError for bad options.
TrainReport run_training(const TrainOptions& options);
// run_training in two halves, for worlds of processes: each worker trains its own rank (a thread
// world: all ranks), and the launcher judges every rank's result (sorted by rank) against a dense
// run of its own. Throws as run_training; judge_training zero3::CommError for missing ranks.
std::vector<TrainRankResult> run_training_ranks(const TrainOptions& options);
TrainReport judge_training(const TrainOptions& options, const std::vector<TrainRankResult>& parts);

}  // namespace zerocheck
