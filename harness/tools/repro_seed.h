// `zerocheck repro seed`: the bug report that started zerocheck, replayed on any engine.
//
// The seed's model (60 experts, each one Linear(128,128), expert i with user attribute id = i,
// placement policy rank = id mod N), Adam lr 3e-5 and the seed's DeepSpeed config. It records
// the expert ids before initialize, after it, and after a second initialize with the same
// optimizer (or the error that refused it), the placement before and after (computed from the
// ids) and as observed (which rank actually holds each expert's bytes, right after the first
// initialize), and runs the seed's forward through all 60 experts. Each run starts the legacy
// counters afresh, as a new process.
//
// The three operations (initialize, initialize again with the same optimizer, forward) run
// through the one interpreter with every oracle on, which does not stop at a violation: the
// report lists every one (I1 for the ids, I2 for the placement, I5 for the repeat, ...).
#pragma once

#include "engine/faults.h"
#include "harness/world/world.h"

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
};

struct ReproReport {
  std::string engine;
  int world_size = 0;
  std::vector<int64_t> ids_before;
  std::vector<int64_t> ids_after_init;
  std::vector<int64_t> ids_after_reinit;
  std::optional<std::string> reinit_error;  // "AlreadyInitialized: <message>" when refused
  std::string reinit_error_kind;            // "AlreadyInitialized" when refused ("" when accepted)
  std::vector<int64_t> placement_before;     // id mod N from the user's attributes
  std::vector<int64_t> placement_after;      // from the ids right after initialize
  std::vector<int64_t> placement_observed;   // the one rank whose model tensor of each expert's
                                             // weight holds storage (-1: none or several)
  std::vector<std::string> violations;       // every oracle's findings, on every rank
  std::optional<std::string> failure;        // a rank threw (the replay stopped there)
  std::optional<double> forward_loss;        // rank 0's, when the forward ran

  bool ids_intact() const;
  // ids and placement (as computed and as observed) unchanged, repeated initialize refused,
  // forward ran, and no oracle found anything.
  bool intact() const;

  nlohmann::json to_json() const;
  // The inverse of to_json. Throws zero3::CommError for a malformed object.
  static ReproReport from_json(const nlohmann::json& json);
  std::string to_text() const;
};

// What one rank of the replay saw; a world of processes sends it to the launcher.
struct ReproRankPart {
  int rank = 0;
  std::vector<int64_t> holds;           // per expert: 1 when this rank holds storage for its weight
  std::vector<std::string> violations;  // what the oracles found on this rank
  nlohmann::json report;                // rank 0: ReproReport::to_json of what it saw; null elsewhere

  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed object.
  static ReproRankPart from_json(const nlohmann::json& json);
};

// Replays the seed on `world` and reports what rank 0 saw and every rank's findings.
ReproReport run_repro_seed(const ReproOptions& options, World& world);
// run_repro_seed in two halves, for worlds of processes: each worker replays its own rank (a
// thread world: all), and the launcher judges every rank's part. judge_repro_seed throws
// zero3::CommError when a rank's part is missing.
std::vector<ReproRankPart> run_repro_seed_ranks(const ReproOptions& options, World& world);
ReproReport judge_repro_seed(const ReproOptions& options, std::vector<ReproRankPart> parts);

}  // namespace zerocheck
