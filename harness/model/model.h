// The model: what the user did and what must follow from it, computed from the scenario and the
// world size alone. Nothing here reads the engine's tables or calls the engine's placement,
// layout or persistence code: a bug there must not be able to move the expectation with it.
//
//  - AttributeLedger: deep copies of every user attribute as the user last wrote it (a tensor
//    value is cloned, so an in-place change to the live one is a difference);
//  - expected_params: for each parameter of the engine's target, its owner (from the user's
//    attributes, by the rules written out here), whether it is persistent, and its shard size;
//  - predict_initialize: which initialize must fail, and with which error;
//  - DenseTwin: a single-copy model with its own forward, backward, step, save and load;
//  - TrafficTrace: the collectives a forward and the following backward must issue, by kind.
#pragma once

#include "engine/attr_dict.h"
#include "engine/comm.h"
#include "engine/module.h"
#include "harness/scenario.h"

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace zerocheck::model {

// ---- attributes -------------------------------------------------------------------------------

// Returns a copy of `value` that shares no tensor storage with it.
zero3::AttrValue deep_copy(const zero3::AttrValue& value);
zero3::AttrDict deep_copy(const zero3::AttrDict& dict);

// The user's attributes as the user last wrote them, on every module and parameter.
class AttributeLedger {
 public:
  struct Entry {
    std::string module_path;
    std::string param;  // "" for the module's own attributes
    const zero3::Module* module;
    zero3::AttrDict attrs;  // deep copies
  };
  explicit AttributeLedger(const std::shared_ptr<zero3::Module>& root);
  const std::vector<Entry>& entries() const { return entries_; }
  // Returns the entry for (module path, parameter), or nullptr.
  Entry* find(const std::string& module_path, const std::string& param);

 private:
  std::vector<Entry> entries_;
};

// ---- what initialize must do ------------------------------------------------------------------

// One parameter of the engine's target as the spec says it must be managed.
struct ExpectedParam {
  std::string path;         // relative to the target, as the engine names it ("a.weight")
  std::string module_path;  // of the module where it first appears
  std::vector<int64_t> shape;
  int64_t numel = 0;
  bool trainable = false;
  int owner = -1;           // placed: the rank holding it whole; -1: not placed
  bool persistent = false;  // whole on every rank: numel <= threshold and not placed
  int64_t chunk = 0;        // elements per rank when partitioned: ceil(numel / N)
  std::set<std::string> module_paths;  // every module that registers it (tied weights)
  bool partitioned() const { return owner < 0 && !persistent; }
  friend bool operator==(const ExpectedParam& a, const ExpectedParam& b) {
    return a.path == b.path && a.module_path == b.module_path && a.shape == b.shape && a.numel == b.numel &&
           a.trainable == b.trainable && a.owner == b.owner && a.persistent == b.persistent && a.chunk == b.chunk &&
           a.module_paths == b.module_paths;
  }
};

// Keyed by paths, not objects, so it applies to the dense twin's tree as well as the user's.
struct Expectation {
  std::vector<ExpectedParam> params;           // in first-appearance order
  std::map<std::string, int> module_owner;     // every module of the target; -1: not placed
  const ExpectedParam* find(const std::string& path) const;
  // The parameters the module at `module_path` registers itself (not its children's).
  std::vector<const ExpectedParam*> own_params(const std::string& module_path) const;
  friend bool operator==(const Expectation& a, const Expectation& b) {
    return a.params == b.params && a.module_owner == b.module_owner;
  }
};

// The owner of each module and the management of each parameter of `target` under the
// scenario's policy and threshold in a world of `world_size`, from the user's attributes as they
// are now. Returns the reason instead when the policy cannot be evaluated (the engine must refuse
// with PlacementError).
struct PlacementRefusal {
  std::string reason;
};
std::variant<Expectation, PlacementRefusal> expect(const std::shared_ptr<zero3::Module>& target,
                                                   const zero3::PlacementSpec& spec, int64_t threshold,
                                                   int world_size);

// Returns the owner `attr_mod` gives an attribute value: value mod N as Python computes it
// (never negative).
int owner_by_attr_mod(int64_t value, int world_size);

// Returns ceil(numel / world_size).
int64_t chunk_of(int64_t numel, int world_size);
// Returns rank's c elements of `full` flattened and zero-padded to c*N (the spec's layout).
at::Tensor expected_shard(const at::Tensor& full, int world_size, int rank);

// The error a call of initialize must raise ("AlreadyInitialized", "ConfigError",
// "PlacementError", "OptimizerMismatch"), or nothing when it must succeed.
struct InitializeFacts {
  bool engine_live = false;
  bool overlaps_live_engine = false;       // the target shares a module with the live engine's
  bool optimizer_held_by_live_engine = false;
  bool batch_sizes_consistent = true;      // train_batch_size = micro * accumulation * N, or 0
  bool placement_evaluates = true;         // expect() returned an Expectation
  bool optimizer_covers_target = true;     // exactly the target's trainable parameters
};
std::optional<std::string> predict_initialize(const InitializeFacts& facts);

// ---- the dense twin ---------------------------------------------------------------------------

// A single-copy model trained exactly as the engine should train its copy: every rank's
// micro-batch, gradients summed in rank order and divided by the world size once per backward.
class DenseTwin {
 public:
  using OptimizerState = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
  explicit DenseTwin(const Scenario& scenario);
  // Starts training the module at `path` afresh with a new optimizer (a new engine).
  void retarget(const std::string& path);
  // Runs every rank's micro-batch of operation `index` on `route`; returns the losses by rank.
  std::vector<double> forward(int64_t index, const zero3::Route& route, zero3::ForwardInterceptor* trace);
  // Back-propagates the pending losses; returns the paths of the parameters that got a gradient.
  std::set<std::string> backward();
  void step();
  void zero_grad();
  void drop_pending() { pending_.clear(); }
  void save();
  void load();
  // The target's parameters by relative path, in first-appearance order.
  const std::vector<std::pair<std::string, at::Tensor>>& params() const { return params_; }
  at::Tensor param(const std::string& path) const;
  const std::shared_ptr<zero3::Module>& target() const { return target_; }

 private:
  const Scenario& s_;
  int world_;
  std::shared_ptr<zero3::Module> root_, target_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<at::Tensor> accum_;  // averaged gradients, aligned with params_
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<at::Tensor> pending_;  // per-rank losses of the last forward
  int64_t micro_steps_ = 0;
  std::vector<at::Tensor> saved_params_;
  OptimizerState saved_optimizer_;  // deep copies
  int64_t saved_micro_steps_ = 0;
};

// The micro-batch of `rank` for operation `index`: input and target from their seeded streams
// (engine/seeded_values.h), so the Python replay feeds the same numbers.
std::pair<at::Tensor, at::Tensor> batch_of(const Scenario& s, int64_t index, int rank);
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Scenario& s, std::vector<at::Tensor> params);

// ---- traffic ----------------------------------------------------------------------------------

// Elements moved per collective kind, counted as zero3::Comm counts them.
struct Traffic {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, broadcast = 0, all_to_all = 0;
  friend bool operator==(const Traffic& a, const Traffic& b) {
    return a.all_gather == b.all_gather && a.reduce_scatter == b.reduce_scatter && a.all_reduce == b.all_reduce &&
           a.broadcast == b.broadcast && a.all_to_all == b.all_to_all;
  }
  Traffic& operator+=(const Traffic& other) {
    all_gather += other.all_gather;
    reduce_scatter += other.reduce_scatter;
    all_reduce += other.all_reduce;
    broadcast += other.broadcast;
    all_to_all += other.all_to_all;
    return *this;
  }
  std::string to_text() const;
};
Traffic traffic_between(const zero3::CommStats& before, const zero3::CommStats& after);

// Installed on the twin's forward (one rank's), it replays the ZeRO-3 schedule of the spec on the
// expectation: gather a module's partitioned parameters unless already whole, release them after
// its forward, send a placed module's input to its owner; and remembers what backward must do.
class TrafficTrace final : public zero3::ForwardInterceptor {
 public:
  // `twin_target` is the tree the trace will see (its paths match the expectation's).
  TrafficTrace(const Expectation& expectation, const std::shared_ptr<zero3::Module>& twin_target, int world_size);
  at::Tensor around_forward(zero3::Module& module, const at::Tensor& input, const zero3::Route& route,
                            const std::function<at::Tensor(const at::Tensor&)>& body) override;
  Traffic forward() const { return forward_; }
  // What the backward of this forward moves, given the parameters that got a gradient.
  Traffic backward(const std::set<std::string>& with_gradient) const;

 private:
  const Expectation& expectation_;
  int world_;
  std::unordered_map<const zero3::Module*, int> owner_;
  std::unordered_map<const zero3::Module*, std::vector<const ExpectedParam*>> own_;
  std::unordered_set<const ExpectedParam*> whole_;      // gathered right now
  std::unordered_set<const ExpectedParam*> regathered_;  // backward re-gathers these
  int64_t placed_backward_elements_ = 0;
  bool inside_placed_ = false;
  Traffic forward_;
};

// ---- state bytes ------------------------------------------------------------------------------

// The bytes `rank` must hold for model state after a step: per parameter, c = ceil(n/N) fp32
// elements when partitioned, n when persistent or placed here, nothing when placed elsewhere;
// times (1 + gradient + `optimizer_states`) once it has had a gradient (`trained` holds those
// paths; a frozen or never-reached parameter keeps only its copy).
int64_t expected_state_bytes(const Expectation& expected, const std::set<std::string>& trained, int rank,
                             int64_t optimizer_states);

}  // namespace zerocheck::model
