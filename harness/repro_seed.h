// `zerocheck repro seed`: the bug report that started zerocheck, replayed on any engine.
//
// The seed's model (60 experts, each one Linear(128,128), expert i with user attribute id = i,
// placement policy rank = id mod N), Adam lr 3e-5 and the seed's DeepSpeed config. It records
// the expert ids before initialize, after it, and after a second initialize with the same
// optimizer (or the error that refused it), the placement before and after (computed from the
// ids) and as observed (which rank actually holds each expert's bytes, right after the first
// initialize), and runs the seed's forward through all 60 experts. Each run starts the legacy counters afresh, as a new process.
#pragma once

#include "engine/faults.h"
#include "harness/world.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace zerocheck {

// The seed's DeepSpeed config, verbatim.
inline constexpr const char* kSeedConfig =
    R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,)"
    R"( "steps_per_print": 1, "zero_optimization": {"stage": 3}})";

struct ReproOptions {
  zero3::Fault fault = zero3::Fault::none;
  int world_size = 2;
  CommKind comm = CommKind::local;
};

struct ReproReport {
  std::string engine;
  int world_size = 0;
  std::vector<int64_t> ids_before;
  std::vector<int64_t> ids_after_init;
  std::vector<int64_t> ids_after_reinit;
  std::optional<std::string> reinit_error;  // "AlreadyInitialized: ..." when refused
  std::vector<int64_t> placement_before;     // id mod N from the user's attributes
  std::vector<int64_t> placement_after;      // from the ids right after initialize
  std::vector<int64_t> placement_observed;   // from residency: the one rank holding each expert
                                             // (-1: none or several)
  std::vector<std::string> placement_oracle;  // I2 (harness/oracles) on each rank that found a violation
  std::optional<std::string> forward_error;
  double forward_output_sum = 0;

  bool ids_intact() const;
  // ids and placement (as computed and as observed) unchanged, repeated initialize refused,
  // forward ran.
  bool intact() const;
  nlohmann::json to_json() const;
  // The inverse of to_json. Throws zero3::CommError for a malformed object.
  static ReproReport from_json(const nlohmann::json& json);
  std::string to_text() const;
};

// What one rank of the replay saw; a world of processes sends it to the launcher.
struct ReproRankPart {
  int rank = 0;
  std::vector<int64_t> holds;    // per expert: 1 when this rank holds storage for its weight
  std::string placement_oracle;  // I2's finding on this rank ("" when none)
  nlohmann::json report;         // rank 0: ReproReport::to_json of what it saw; null elsewhere

  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed object.
  static ReproRankPart from_json(const nlohmann::json& json);
};

// Replays the seed on `options.world_size` ranks and reports what rank 0 saw.
// Throws RankFailure when a rank fails outside the steps the report records.
ReproReport run_repro_seed(const ReproOptions& options);
// run_repro_seed in two halves, for worlds of processes: each worker replays its own rank (a
// thread world: all), and the launcher judges every rank's part. judge_repro_seed throws
// zero3::CommError when a rank's part is missing.
std::vector<ReproRankPart> run_repro_seed_ranks(const ReproOptions& options);
ReproReport judge_repro_seed(const ReproOptions& options, std::vector<ReproRankPart> parts);

}  // namespace zerocheck
