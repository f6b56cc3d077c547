// The one interpreter: applies operations to each rank's engine and to the model
// (harness/model), and asks the oracles (harness/oracles) whether what must follow did, after
// every operation: I1, I2, I4, I3, then I8 for the operation's traffic; I5, I6 and I7 where an
// operation makes them checkable. Properties, fuzzers, `zerocheck check/replay/bench/mutants`,
// `train` and `repro seed` all run their operations through here: one code path applies an
// operation and checks it, with one NaN rule (oracles::same_numbers).
//
// All ranks agree after every operation on whether and where an invariant broke (the lowest
// rank's finding wins), so a replay reports the same violation every time.
//
// Reading order: RunOptions, OpOutcome and Verdict (what goes in and comes out), run_scenario
// (the common call), run_ops (a driver's), RankInterpreter (one rank, step by step).
//
// Where an operation lives: the function of its name, taking the rank's state and the operation,
// in the file of its family: lifecycle.cc (initialize, release, destroy), training.cc (forward,
// backward, step, zero_grad, gather), attributes.cc (set_attr, del_attr), checkpoints.cc (save,
// load); checks.cc is what runs after every operation, internal/rank_state.h the state they
// share. rank_interpreter.cc dispatches from ZEROCHECK_OPS (harness/scenario/schema.h), so a row
// with no function does not compile. The Python replay (harness/deepspeed/zerocheck_ds/replay/)
// has the same files.
#pragma once

#include "engine/comm.h"
#include "engine/engine.h"
#include "engine/faults.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"
#include "harness/scenario/scenario.h"
#include "harness/world/world.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace zerocheck {

struct RunOptions {
  RunOptions() = default;
  explicit RunOptions(zero3::Fault planted) : fault(planted) {}
  zero3::Fault fault = zero3::Fault::none;
  // How run_scenario makes the world it runs on: rank threads (LocalComm or Gloo) or fibers of
  // the calling thread (an order of magnitude faster for wide worlds; LocalComm only, and a
  // scenario with a backward is refused: autograd's per-thread state). A world of processes is
  // not made here: a worker hands its own to run_ops.
  WorldOptions world;
  // false skips the sweeps after every operation (I1, I2, I4, I3); the checks an operation makes
  // itself (I3 loss, I5, I6, I7, I8) stay. Only `zerocheck bench` turns them off, to measure
  // what they cost.
  bool checks_after_every_op = true;
  // Oracles switched off ("I3", ...): `zerocheck mutants --ablate` shows which faults only they
  // catch. A switched-off I7 lets an unexpected error end the scenario without a verdict.
  std::set<std::string> disabled_oracles;
  // true: the first violation ends the run on every rank (check, replay, fuzzing). false: every
  // violation is recorded in its operation's outcome and the operations go on (`train` and
  // `repro seed` report all they see).
  bool stop_at_first_violation = true;
  // I10: the share of scenarios run_scenario runs a second time with their ZeRO knobs drawn
  // again (internal/inert_knobs.h), chosen by the scenario's seed so that a replay and its
  // shrinks choose alike; 0 turns the second run off. Costs one run without sweeps or twin.
  double inert_knobs_fraction = 0.25;
  // Told, on rank 0 after each operation, the dense twin as rank 0 reads it and the losses by
  // rank its forward gave (empty for other operations): `zerocheck replay --twin-numbers` prints
  // them for the cross-check with the Python twin. Needs the twin (I3, I6 or I8 on).
  std::function<void(int64_t index, OpKind kind, const model::DenseTwin& twin, const std::vector<double>& losses)>
      twin_observer;

  bool enabled(const std::string& invariant) const { return disabled_oracles.count(invariant) == 0; }
  // Whether a dense twin must be trained alongside: I3 (parity), I6 (the consolidated state
  // dict) and I8 (its traffic trace) read it.
  bool needs_dense_twin() const { return enabled("I3") || enabled("I6") || enabled("I8") || enabled("I11"); }
  // Whether the memory oracle runs, and so the ranks' allocations are counted (rank_memory.h).
  bool counts_rank_memory() const { return enabled("I4") && checks_after_every_op; }
};

// What one operation did on one rank, typed: drivers, tests and properties read these fields.
struct OpOutcome {
  enum class Status { applied, skipped, refused };
  OpKind kind = OpKind::initialize;
  Status status = Status::applied;
  std::string error_kind;     // refused: the error's kind (engine/errors.h), as the model predicted
  std::string error_message;  // refused: the error's message
  std::string detail;         // why skipped, or what was applied ("engine over 'a' (3 parameters)")
  std::optional<double> loss;       // forward: this rank's
  std::optional<double> twin_loss;  // forward: the dense twin's on this rank's micro-batch
  // forward, backward, step, zero_grad: what the operation moved, and what the schedule predicts
  // (I8 compares them; the prediction needs the dense twin).
  std::optional<model::Traffic> traffic, expected_traffic;
  std::vector<std::string> reached;  // backward: the parameters the dense twin's backward reached
  // load with a world_size M: M, and whether that world was made (it is not when the policy
  // cannot place the experts on M ranks).
  int side_world = 0;
  bool side_world_made = false;
  // What broke after this operation (at most one when the run stops at the first).
  std::vector<Violation> violations;

  // "#3 forward: loss 0.25" — the history line.
  std::string to_text(int64_t index) const;
  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed object.
  static OpOutcome from_json(const nlohmann::json& json);
};

// What running a scenario found: the first broken invariant (if any) and what each operation did,
// so a failure reads as a story and replays as a command.
struct Verdict {
  std::optional<Violation> violation;
  std::vector<std::string> history;  // one line per operation, as rank 0 saw it
  std::vector<OpOutcome> outcomes;   // the same, typed

  bool ok() const { return !violation.has_value(); }
};

// Runs `scenario` on a world made from options.world (of the scenario's size) and returns what it
// found; for a share of scenarios (RunOptions::inert_knobs_fraction) a second time with the ZeRO
// knobs drawn again, for I10. Throws ScenarioError for a scenario that fails validation (I7 is about the engine, not
// about the harness's input).
Verdict run_scenario(const Scenario& scenario, const RunOptions& options);

// What the ranks of one run reported, before they are judged together: a world of processes
// collects one of these from each worker (each knowing its own rank's part) and merges them.
struct RankReports {
  std::vector<OpOutcome> outcomes;                // rank 0's, one per operation it applied
  std::vector<std::vector<Violation>> found;      // per rank: what it found, in order
  std::optional<int> failed_rank;                 // the first rank that threw, and what
  std::string failure;                            // RankFailure::what() of that rank

  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed report.
  static RankReports from_json(const nlohmann::json& json);
  // Adds `other`'s parts (another process's ranks) to these.
  void merge(const RankReports& other);
};

class RankInterpreter;

// A driver's part in each rank's run: `zerocheck train` plants a failing rank, resumes a
// checkpoint and reads its accounting here, `repro seed` the expert ids. Every call runs on the
// rank, between operations; a call that throws fails the rank (RankFailure).
class RankDriver {
 public:
  virtual ~RankDriver() = default;
  virtual void before(RankInterpreter& rank, int64_t index) {}
  virtual void after(RankInterpreter& rank, int64_t index, const OpOutcome& outcome) {}
  // After the last operation, when no violation stopped the run. Collective calls are fine.
  virtual void finish(RankInterpreter& rank) {}
};
// Makes rank `rank`'s driver (called on that rank).
using RankDrivers = std::function<std::unique_ptr<RankDriver>(int rank)>;

// Runs `ops` of `workload` on `world`: every rank applies each operation in turn and checks the
// invariants after it, then the ranks agree whether one broke (and stop when options say so).
// `world` has at least as many ranks as the run needs; what ranks this process hosts report.
RankReports run_ops(const model::Workload& workload, const std::vector<Op>& ops, const RunOptions& options,
                    World& world, const RankDrivers& drivers = nullptr);

// Runs `scenario` on the first scenario.world_size ranks of `world` (the others sit out).
// Throws ScenarioError for an invalid scenario, zero3::UsageError for a world too small.
RankReports run_scenario_ranks(const Scenario& scenario, const RunOptions& options, World& world);
// The verdict of a run from its ranks' reports (the lowest rank's violation; else I7 for a
// rank that threw).
Verdict judge(const RankReports& reports, const RunOptions& options);

// The dense twin (harness/model) of one run, shared by the ranks of its world: it trains every
// rank's micro-batch, so one copy serves them all instead of one copy per rank doing the world's
// work each. See interpreter/internal/shared_twin.h.
class SharedTwin;
// Returns the twin of `workload` for the ranks of one run.
std::shared_ptr<SharedTwin> make_shared_twin(const model::Workload& workload);

class ScenarioRunner;

// One rank's interpreter, usable step by step (the stateful property drives it directly).
class RankInterpreter {
 public:
  // `shared_twin` (optional, see SharedTwin) replaces this rank's own dense twin.
  // `workload` must outlive the interpreter.
  RankInterpreter(const model::Workload& workload, zero3::Comm& comm, const RunOptions& options,
                  const std::string& checkpoint_dir, std::shared_ptr<SharedTwin> shared_twin = nullptr);
  // The scenario's workload, kept by the interpreter.
  RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                  const std::string& checkpoint_dir);
  ~RankInterpreter();

  // Applies operation `index` and checks the invariants. Throws ViolationFound when an invariant
  // broke and the run stops at the first; otherwise the outcome lists what broke. Other
  // exceptions are unexpected (I7).
  OpOutcome apply(int64_t index, const Op& op);

  // ---- for drivers (RankDriver) ---------------------------------------------------------------

  // The live engine after the operations so far (nullptr: none).
  zero3::Engine* engine();
  // The user's model on this rank.
  const std::shared_ptr<zero3::Module>& model() const;
  // What the live engine's initialize had to do (empty before the first).
  const model::Expectation& expectation() const;
  // The bytes this rank's allocations hold (rank_memory.h), as soon as they are `expected` or
  // after a short patience for memory another thread frees late; -1 when they are not counted.
  int64_t held_bytes(int64_t expected) const;
  // The live engine saves into `dir` with `client_state_json` for the caller. Collective.
  void save_to(const std::string& dir, const std::string& client_state_json);
  // Rank 0 compares the consolidated state dict with the dense twin (I6), parameter by
  // parameter; elsewhere nothing is compared. Collective.
  struct Consolidated {
    oracles::Result violation;
    std::map<std::string, double> max_abs_difference;  // rank 0: per parameter (oracles::max_abs_difference)
  };
  Consolidated check_consolidated();

 private:
  std::unique_ptr<model::Workload> own_workload_;
  std::unique_ptr<ScenarioRunner> impl_;
};

}  // namespace zerocheck
