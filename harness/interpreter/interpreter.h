// The one interpreter: runs a Scenario's operations on a world of ranks' engines, asks the
// model (harness/model) what must follow and the oracles (harness/oracles) whether it did, after
// every operation: I1, I2, I4, I3, then I8 for the operation's traffic; I5, I6 and I7 where an
// operation makes them checkable. Properties, fuzzers, `zerocheck check/replay/bench/mutants`
// all run scenarios through here.
//
// All ranks agree after every operation on whether and where an invariant broke (the lowest
// rank's finding wins), so a replay reports the same violation every time.
#pragma once

#include "engine/comm.h"
#include "engine/engine.h"
#include "engine/faults.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"
#include "harness/scenario.h"
#include "harness/verdict.h"
#include "harness/world.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace zerocheck {

struct RunOptions {
  RunOptions() = default;
  explicit RunOptions(zero3::Fault planted) : fault(planted) {}
  zero3::Fault fault = zero3::Fault::none;
  CommKind comm = CommKind::local;
  std::chrono::milliseconds timeout{30000};
  // false skips the sweeps after every operation (I1, I2, I4, I3); the checks an operation makes
  // itself (I3 loss, I5, I6, I7, I8) stay. Only `zerocheck bench` turns them off, to measure
  // what they cost.
  bool checks_after_every_op = true;
  // Oracles switched off ("I3", ...): `zerocheck mutants --ablate` shows which faults only they
  // catch. A switched-off I7 lets an unexpected error end the scenario without a verdict.
  std::set<std::string> disabled_oracles;
  // Every rank a fiber of the calling thread instead of a thread (harness/fiber_world.h): an
  // order of magnitude faster for wide worlds; LocalComm only, and run_scenario refuses a
  // scenario with a backward (autograd's per-thread state).
  bool ranks_as_fibers = false;
  // Told, on rank 0 after each operation, the dense twin as rank 0 reads it and the losses by
  // rank its forward gave (empty for other operations): `zerocheck replay --twin-numbers` prints
  // them for the cross-check with the Python twin. Needs the twin (I3 or I8 on).
  std::function<void(int64_t index, OpKind kind, const model::DenseTwin& twin, const std::vector<double>& losses)>
      twin_observer;

  // Whether a dense twin must be trained alongside: only I3 (parity) and I8 (its traffic trace)
  // read it.
  bool needs_dense_twin() const { return disabled_oracles.count("I3") == 0 || disabled_oracles.count("I8") == 0; }
};

// What one operation did on one rank, typed: tests and properties read these fields.
struct OpOutcome {
  enum class Status { applied, skipped, refused };
  OpKind kind = OpKind::initialize;
  Status status = Status::applied;
  std::string refused_with;   // the error kind, when refused ("AlreadyInitialized", ...)
  std::string detail;         // why skipped, or what was applied ("engine over 'a' (3 parameters)")
  std::optional<double> loss;  // forward
  bool violated = false;      // the history line of an operation after which a violation was found

  // "#3 forward: loss 0.25" — the history line.
  std::string to_text(int64_t index) const;
};

// Runs `scenario` and returns what it found. Throws ScenarioError for a scenario that fails
// validation (I7 is about the engine, not about the harness's input).
Verdict run_scenario(const Scenario& scenario, const RunOptions& options);

// What the ranks of one run reported, before they are judged together: a world of processes
// collects one of these from each worker (each knowing its own rank's part) and merges them.
struct RankReports {
  std::vector<std::string> history;              // rank 0's lines
  std::vector<std::optional<Violation>> found;   // per rank: the violation it found
  std::optional<int> failed_rank;                // the first rank that threw, and what
  std::string failure;                           // RankFailure::what() of that rank

  nlohmann::json to_json() const;
  // Throws zero3::CommError for a malformed report.
  static RankReports from_json(const nlohmann::json& json);
  // Adds `other`'s parts (another process's ranks) to these.
  void merge(const RankReports& other);
};

// Runs `scenario` on this process's ranks (all of them, or one in a `zerocheck worker`).
RankReports run_scenario_ranks(const Scenario& scenario, const RunOptions& options);
// The verdict of a run from its ranks' reports (the lowest rank's violation; else I7 for a
// rank that threw).
Verdict judge(const RankReports& reports, const RunOptions& options);

// What this rank holds for each parameter the engine reports, measured from the tensors (the
// oracles' observation).
std::vector<oracles::ObservedParam> observe(const zero3::Engine& engine);

// Returns what the engine's world holds, parameter by parameter (params() order), joined whole
// from the ranks: values and optimizer state. Collective: every rank of the engine's comm calls it.
std::vector<oracles::WholeParam> gather_whole_state(zero3::Engine& engine);

// Returns the bytes this rank holds for model state, measured from the storage behind the
// engine's tensors (model tensors, fp32 copies, gradients; each storage once) plus optimizer state.
int64_t measured_state_bytes(const zero3::Engine& engine);

class ScenarioRunner;

// The dense twin (harness/model) of one run of a scenario, shared by the ranks of its world: it
// trains every rank's micro-batch, so one copy serves them all instead of one copy per rank
// doing the world's work each. The first rank to make a call on it computes, the others read
// what it gave; a rank whose calls differ from the shared ones (a fault that makes ranks
// disagree) goes on with its own twin, rebuilt from its own calls, so every rank always sees the
// twin its own operations imply.
//
// Requires: every rank sharing it finishes reading the twin after operation i before any rank
// starts operation i + 1 (run_scenario's agreement after every operation does this).
// Thread-safety: shared by the rank threads (or fibers) of one world.
class SharedTwin;
// Returns the twin of `scenario` for the ranks of one run.
std::shared_ptr<SharedTwin> make_shared_twin(const Scenario& scenario);

// One rank's interpreter, usable step by step (the stateful property drives it directly).
class RankInterpreter {
 public:
  // `shared_twin` (optional, see SharedTwin) replaces this rank's own dense twin.
  RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                  const std::string& checkpoint_dir, std::shared_ptr<SharedTwin> shared_twin = nullptr);
  ~RankInterpreter();

  // Applies operation `index` and checks the invariants.
  // Throws ViolationFound when an invariant broke; other exceptions are unexpected (I7).
  OpOutcome apply(int64_t index, const Op& op);

 private:
  std::unique_ptr<ScenarioRunner> impl_;
};

}  // namespace zerocheck
