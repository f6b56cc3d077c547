// What one rank's interpreter keeps between operations, and the helpers every operation family
// uses. Internal to harness/interpreter.
//
// rank_interpreter.cc owns one RankState per rank and sends each operation to the function of
// its name, in the file of its family (as the Python replay does, file for file):
//   lifecycle.cc    initialize, release, destroy
//   training.cc     forward, backward, step, zero_grad, gather
//   attributes.cc   set_attr, del_attr
//   checkpoints.cc  save, load
//   injections.cc   inject (its injections are taken by forward and backward)
//   checks.cc       what runs after every operation: sweep, require, the traffic check
// Each operation function takes the state and the operation and returns its outcome; the checks
// after it (checks.h) run in rank_interpreter.cc.
//
// Whose memory: the engine's calls and the user's model are the rank's (rank_memory.h); the
// harness's own work on the rank (the dense twin, the data it feeds, the oracles' copies) runs
// NotChargedToTheRank, so what the memory oracle measures is what the rank holds.
// Thread-safety: one RankState per rank, used by that rank's thread (or fiber) only.
#pragma once

#include "engine/engine.h"
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/internal/shared_twin.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"
#include "harness/world/rank_memory.h"

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace zerocheck::interpreter {

// What an operation moved, and what the schedule predicts (I8 compares them after the sweep).
struct MeasuredTraffic {
  std::string operation;
  std::optional<model::Traffic> expected;  // none without the dense twin
  model::Traffic measured;
};

// A module's subtree as initialize needs it, worked out once per path: the tree never changes
// within a run (only attributes and parameter data do), and a script initializes again and again.
struct Subtree {
  std::shared_ptr<zero3::Module> root;
  std::unordered_set<const zero3::Module*> modules;
  std::vector<at::Tensor> trainable;  // what a fresh optimizer over it holds
};

// A checkpoint saved in the run's folder, with what its load must restore (I6).
struct SavedCheckpoint {
  std::string target;
  std::vector<at::Tensor> masters;
  at::Tensor optimizer_state;
  int64_t micro_steps = 0;
};

// The injections `inject` operations armed on one rank and no forward or backward has taken yet
// (SCENARIO_FORMAT.md, "Injecting non-finite values").
struct ArmedInjections {
  std::optional<float> input;          // the next forward's input element 0
  model::BackwardInjection backward;   // the next backward's loss factor and gradient
};

struct RankState {
  // `workload` must outlive the state; `shared_twin` (optional) replaces this rank's own twin.
  RankState(const model::Workload& workload, zero3::Comm& comm, const RunOptions& options, std::string dir,
            std::shared_ptr<SharedTwin> shared_twin);

  bool enabled(const std::string& invariant) const { return options.enabled(invariant); }
  // Whether this rank's allocations are counted (rank_memory.h).
  bool counted() const { return account != nullptr && account->live_bytes() >= 0; }
  // A call on the dense twin, as the harness's work.
  TwinOutcome twin_call(TwinCall call);
  // The live engine's parameters as the oracles see them (with the tensors each holds).
  std::vector<oracles::ObservedParam> observe(bool held_tensors = false) const;
  zero3::CommStats stats() const { return comm.stats(); }
  // The subtree at `path` (nullptr: no module there), worked out on first use.
  const Subtree* subtree_at(const std::string& path);
  // This rank's traffic trace of the last forward.
  const std::shared_ptr<model::TrafficTrace>& trace() const;

  const model::Workload& workload;
  zero3::Comm& comm;
  RunOptions options;
  std::string dir;       // where save writes
  RankAccount* account;  // this rank's memory account (nullptr: not counted)
  int64_t index = -1;    // the running operation's
  std::shared_ptr<zero3::Module> model;
  // The tree's modules by path: operations change attributes and parameter data, never the tree.
  const std::map<std::string, std::shared_ptr<zero3::Module>> modules;
  model::AttributeLedger ledger;
  std::optional<TwinView> twin;  // none when no oracle reads it
  std::shared_ptr<const model::Expectation> expectation = std::make_shared<const model::Expectation>();
  std::unique_ptr<torch::optim::Optimizer> user_optimizer;
  const torch::optim::Optimizer* engine_optimizer = nullptr;
  std::unique_ptr<zero3::Engine> engine;
  std::vector<std::unique_ptr<zero3::Engine>> unwanted;  // released first, at the end (lifecycle.cc)
  std::string engine_target;
  std::map<std::string, Subtree> subtrees;                          // subtree_at's, by path
  const std::unordered_set<const zero3::Module*>* engine_tree = nullptr;  // the live engine's subtree
  at::Tensor pending;                                               // the last forward's loss
  std::vector<std::shared_ptr<model::TrafficTrace>> traces;  // each rank's schedule of the last forward
  model::FetchMemory fetch_memory;  // what the live engine's forwards left of its module trace
  std::optional<MeasuredTraffic> deferred_traffic;           // checked after the sweep: I8 comes last
  std::vector<Violation> found;       // this operation's, when the run goes on after one
  std::vector<double> dense_losses;   // the twin's losses by rank, this operation's forward
  std::map<std::string, SavedCheckpoint> saved;  // by tag
  std::optional<std::string> latest_tag;
  int64_t micro_steps = 0;  // the model's count of the live engine's step() calls
  // By rank, every rank's armed injections: each rank's interpreter keeps the whole world's, so
  // its twin calls carry what every rank's data gets (injections.h).
  std::vector<ArmedInjections> armed;
};

// What this run gives every engine it initializes: the planted fault and the workload's
// precision (the scenario's overflow_protection).
zero3::EngineOptions engine_options(const RankState& state);

// An outcome applied with `detail` ("ok", "loss 0.25", ...), or skipped because of `why`.
OpOutcome applied(std::string detail);
OpOutcome skipped(std::string why);
// The modules of the tree under `root`, by path.
std::map<std::string, std::shared_ptr<zero3::Module>> modules_by_path(const std::shared_ptr<zero3::Module>& root);
// A ledger of deep copies of `model`'s attributes, made as the harness's work.
model::AttributeLedger ledger_of(const std::shared_ptr<zero3::Module>& model);

}  // namespace zerocheck::interpreter
