// The model: what the user did and what must follow from it, computed from the scenario and the
// world size alone. Nothing here reads the engine's tables or calls the engine's placement,
// layout or persistence code: a bug there must not be able to move the expectation with it.
//
//  - AttributeLedger: deep copies of every user attribute as the user last wrote it (a tensor
//    value is cloned, so an in-place change to the live one is a difference);
//  - expected_params: for each parameter of the engine's target, its owner (from the user's
//    attributes, by the rules written out here), whether it is persistent, and its shard size;
//  - predict_initialize: which initialize must fail, and with which error;
//  - Workload: what a run trains (a scenario's tree and data, or a named model's);
//  - DenseTwin: the one dense reference, a single-copy model with its own forward, backward,
//    step, save and load;
//  - TrafficTrace: the collectives a forward and the following backward must issue, by kind;
//  - expected_state_bytes: the model-state bytes a rank must hold.
#pragma once

#include "engine/attr_dict.h"
#include "engine/comm.h"
#include "engine/module.h"
#include "engine/precision.h"
#include "engine/testing/training.h"
#include "harness/scenario/scenario.h"

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <deque>
#include <functional>
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
  // Every key a state dict lists it under: torch's state_dict walks children without
  // de-duplicating, so a module used at several places has its parameters under each.
  std::set<std::string> state_dict_keys;
  bool partitioned() const { return owner < 0 && !persistent; }
  friend bool operator==(const ExpectedParam& a, const ExpectedParam& b) {
    return a.path == b.path && a.module_path == b.module_path && a.shape == b.shape && a.numel == b.numel &&
           a.trainable == b.trainable && a.owner == b.owner && a.persistent == b.persistent && a.chunk == b.chunk &&
           a.module_paths == b.module_paths && a.state_dict_keys == b.state_dict_keys;
  }
};

// Keyed by paths, not objects, so it applies to the dense twin's tree as well as the user's.
struct Expectation {
  std::vector<ExpectedParam> params;           // in first-appearance order
  std::map<std::string, int> module_owner;     // every module of the target; -1: not placed
  const ExpectedParam* find(const std::string& path) const;
  // The parameter a state dict lists under `key` (any of its state_dict_keys), or nullptr.
  const ExpectedParam* find_state_dict_key(const std::string& key) const;
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
// "PlacementError", "OptimizerMismatch": kinds of engine/errors.h), or nothing when it must
// succeed.
struct InitializeFacts {
  bool engine_live = false;
  bool overlaps_live_engine = false;       // the target shares a module with the live engine's
  bool optimizer_held_by_live_engine = false;
  bool placement_evaluates = true;         // expect() returned an Expectation
  bool optimizer_covers_target = true;     // exactly the target's trainable parameters
  // Every key within its range and train_batch_size = micro * accumulation * N (or 0). The engine
  // checks it last, after it has partitioned the parameters (what it must then undo).
  bool config_valid = true;
};
std::optional<std::string> predict_initialize(const InitializeFacts& facts);
// Returns `config` with the one thing `error` names wrong (schema.h's ZEROCHECK_CONFIG_ERRORS) for
// a world of `world_size` ranks; `config` itself for ConfigErrorKind::none.
zero3::Config config_with_error(const zero3::Config& config, schema::ConfigErrorKind error, int world_size);
// Whether predict_initialize can name `kind`: the refusals the model knows; any other error from
// initialize is unexpected (I7).
bool is_predicted_refusal(const std::string& kind);

// ---- what a run trains ------------------------------------------------------------------------

class DenseTwin;

// What a load restores besides parameters and fp32 masters, by its options
// (harness/SCENARIO_FORMAT.md's option matrix; module_only wins over optimizer_states).
struct LoadEffect {
  bool optimizer_state = true;  // the optimizer's moments, momentum and step come from the checkpoint
  bool step_counters = true;    // the engine's step counters (DeepSpeed's global_steps) too
};
LoadEffect load_effect(bool optimizer_states, bool module_only);
// The tag an untagged save writes: DeepSpeed's default, "global_step<N>" with N the optimizer
// steps `micro_steps` step() calls applied.
std::string default_tag(int64_t micro_steps, int64_t gradient_accumulation_steps);

// Everything both sides of a comparison need to train the same way: the ranks' engines and the
// dense twin build the same model, feed the same data and step the same optimizer. A Scenario is
// one (workload_of); `zerocheck train` and `zerocheck repro seed` make theirs from a named model
// (harness/tools/).
struct Workload {
  // The user's model, the same values on every call.
  std::function<std::shared_ptr<zero3::Module>()> build;
  // The micro-batch `rank` feeds in operation `index`, a pure function of both.
  std::function<Batch(int64_t index, int rank)> batch;
  // The route `rank`'s forward takes in operation `index` (`op`, a forward).
  std::function<zero3::Route(int64_t index, int rank, const Op& op)> route;
  // The user's optimizer over the given parameters.
  OptimizerFactory optimizer;
  // State tensors the optimizer keeps per stepped parameter (Adam 2, SGD with momentum 1): the
  // state-bytes yardstick's factor.
  int64_t optimizer_states = 2;
  // The DeepSpeed config, the placement policy in it.
  zero3::Config config;
  // What the model went through before this run (the saved run of a resumed checkpoint): applied
  // to every new twin, which it leaves saved as that run left it, so the run's resume loads it.
  // Empty: the run starts from the model as built.
  std::function<void(DenseTwin&)> history;
  // The twin's model when it starts elsewhere than the ranks' (a resumed run: the ranks build
  // other initial values, which their load must overwrite; the twin starts from the saved run's).
  // Empty: `build`.
  std::function<std::shared_ptr<zero3::Module>()> build_twin;
  // A checkpoint every engine of the run loads as part of its initialize (a resumed run), and the
  // twin with it the state `history` saved. Empty: none.
  std::string resume_from;
  // What every engine of the run is given as EngineOptions::precision (the scenario's
  // overflow_protection, precision_of): the twin follows the same contract by its own rules.
  zero3::PrecisionOptions precision;
};

// The precision options a scenario's overflow_protection asks for: check_overflow with its loss
// scale (DeepSpeed's v0.14.5 scaler rule, raise_error_at_min_scale off); without it the defaults
// (no check, no scale).
zero3::PrecisionOptions precision_of(const std::optional<OverflowProtection>& protection);

// ---- injected non-finite values ----------------------------------------------------------------

// What an `inject` does to one rank's data (SCENARIO_FORMAT.md, "Injecting non-finite values"),
// one definition for the ranks' side and the twin's.
// Replaces element 0 of `batch`'s flattened input by `value` (an inject into "input").
void poison_input(Batch& batch, float value);
// Returns a row-major copy of `gradient` whose flat element 0 is `value` (an inject into
// "gradient"); a gradient without elements is returned as it is.
at::Tensor poison_gradient(const at::Tensor& gradient, float value);

// What one rank's next backward poisons: the loss it differentiates multiplied by `loss`, and
// element 0 of the gradient of the parameter at `param` (its path in the whole tree; "" none)
// replaced by `gradient` once that rank's backward has produced it.
struct BackwardInjection {
  std::optional<float> loss;
  std::string param;
  float gradient = 0;
  bool empty() const { return !loss && param.empty(); }
  // The same bits: NaN equals NaN here, as two calls that poison alike are one call.
  friend bool operator==(const BackwardInjection& a, const BackwardInjection& b);
};

// Returns the scenario's workload: build_tree, batch_of, the operation's route for every rank,
// the scenario's optimizer, its config with its placement. `scenario` must outlive it.
Workload workload_of(const Scenario& scenario);

// ---- the dense twin ---------------------------------------------------------------------------

// The one dense reference: a single copy of the workload's model trained exactly as the engine
// should train its copy: every rank's micro-batch, gradients summed in rank order and divided by
// the world size once per backward, accumulated over gradient_accumulation_steps, one optimizer
// step over whole tensors, after DeepSpeed's gradient clip when the config sets gradient_clipping.
// On CPU the engine must match it bit for bit (tolerance 0, docs/invariants.md).
//
// With bf16 (the config's bf16.enabled, zero3::precision_in_effect) the twin computes the
// engine's casts in the engine's order (engine/precision.h, one definition of each): a target's
// parameters become bf16 when it is retargeted (R1) with fp32 masters beside them; each rank's
// bf16 gradient goes through gradient_for_sum, the ranks' shares are added in fp32 in rank order
// and rounded by summed_gradient_in_accum (R3, R4); clip and step on fp32 masters; copy back to
// nearest even (R9). Its reduction order is the engine's, so the two agree bit for bit at every
// world size. params() and param() are the fp32 masters (the model's own tensors in fp32).
//
// Computes on one intra-op thread (use_sequential_kernels, harness/world/world.h), as the ranks.
class DenseTwin {
 public:
  using OptimizerState = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
  // Builds the model and applies the workload's history. `workload` must outlive the twin.
  explicit DenseTwin(const Workload& workload);
  // Starts training the module at `path` afresh with a new optimizer (a new engine).
  void retarget(const std::string& path);
  // Runs every rank's micro-batch (batches[r], on routes[r]) of a world of batches.size() ranks;
  // traces[r], when given and not null, follows rank r's forward. Returns the losses by rank.
  std::vector<double> forward(const std::vector<Batch>& batches, const std::vector<zero3::Route>& routes,
                              const std::vector<zero3::ForwardInterceptor*>& traces = {});
  // Back-propagates the pending losses, averaged over the ranks of their forward, each scaled by
  // the loss scale and poisoned as `injections[r]` says (none when shorter); returns the paths
  // of the parameters that got a gradient.
  std::set<std::string> backward(const std::vector<BackwardInjection>& injections = {});
  // Per rank of the last backward, the paths of the parameters in the order their gradients
  // became ready in that rank's back-propagation (autograd's order: what a ZeRO-3 gradient
  // bucket fills in).
  const std::vector<std::vector<std::string>>& ready_order() const { return ready_order_; }
  // At an accumulation boundary: the global norm of the (scaled) gradients, and with overflow
  // protection the skip decision (any non-finite gradient) and the scale's update, then the
  // unscale and clip (DeepSpeed's rules, written here) and the optimizer step unless skipped.
  void step();
  void zero_grad();
  void drop_pending() { pending_.clear(); }
  // The overflow contract's numbers (Workload::precision asks for protection): optimizer steps
  // applied and skipped, the loss scale, and the last boundary's reported norm (unscaled by the
  // updated scale; 0 before any boundary or when no norm is needed).
  bool overflow_protection() const { return precision_.check_overflow; }
  int64_t applied_steps() const { return applied_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  double loss_scale() const { return scaler_.scale; }
  double reported_norm() const { return reported_norm_; }
  // The user's edit inside a gather whose edits are kept: the parameters at `paths` (relative to
  // the target; gathered_params') multiplied by `scale` in place.
  void scale_parameters(const std::vector<std::string>& paths, double scale);
  // Keeps the target's parameters, optimizer state and step count under `tag`.
  void save(const std::string& tag = "");
  // Restores what save(tag) kept, per `effect` (parameters always). Requires: save(tag) ran.
  void load(const std::string& tag = "", LoadEffect effect = LoadEffect());
  // The target's parameters by relative path, in first-appearance order, as fp32 masters (with
  // bf16, the model's tensors are these rounded to nearest even).
  const std::vector<std::pair<std::string, at::Tensor>>& params() const { return params_; }
  at::Tensor param(const std::string& path) const;
  const std::shared_ptr<zero3::Module>& target() const { return target_; }

 private:
  // The unscale and the config's gradient_clipping at a boundary; returns false when the step is
  // skipped for an overflow.
  bool unscale_and_clip(std::vector<at::Tensor>& gradients);
  // Adds the averaged gradient of each parameter that got one (with_gradient) into accum_.
  void accumulate(const std::vector<at::Tensor>& averaged);
  // The model's tensor of parameter i (params_[i] itself in fp32).
  at::Tensor& model_param(size_t i) { return model_params_[i]; }
  const Workload& w_;
  const zero3::PrecisionOptions precision_;  // the config's, as the engine takes them
  std::shared_ptr<zero3::Module> root_, target_;
  std::vector<std::pair<std::string, at::Tensor>> params_;  // fp32 masters
  std::vector<at::Tensor> model_params_;  // the model's tensors, aligned with params_
  // Each model tensor's fp32 master, kept across retargets so optimizer state saved under one
  // engine keys the same tensor under the next (a retarget re-widens its value).
  std::unordered_map<const c10::TensorImpl*, at::Tensor> master_of_;
  std::vector<at::Tensor> accum_;  // averaged gradients, aligned with params_, in the accum dtype
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<at::Tensor> pending_;  // per-rank losses of the last forward
  std::vector<std::vector<std::string>> ready_order_;  // per rank, of the last backward
  int64_t micro_steps_ = 0;
  // DeepSpeed's loss scaler as the twin keeps it (runtime/fp16/loss_scaler.py:170-203 (v0.14.5)),
  // written here from DeepSpeed's code, not the engine's.
  struct Scaler {
    double scale = 1;
    int64_t iter = 0, last_overflow_iter = -1;
    int hysteresis_left = 0;
  };
  Scaler fresh_scaler() const;
  void update_scale(bool overflow);
  Scaler scaler_;
  int64_t applied_steps_ = 0, skipped_steps_ = 0;
  double reported_norm_ = 0;
  struct Snapshot {
    std::vector<at::Tensor> params;
    OptimizerState optimizer;  // deep copies
    int64_t micro_steps = 0;
    Scaler scaler;
    int64_t skipped_steps = 0;
  };
  std::map<std::string, Snapshot> saved_;  // by tag
};

// The micro-batch of `rank` for operation `index` of a scenario: input and target from their
// seeded streams (engine/seeded_values.h), a pure function, so both sides and the Python replay
// see the same numbers.
Batch batch_of(const Scenario& s, int64_t index, int rank);
// The scenario's optimizer over `params` (its kind and learning rate; SGD's momentum 0.9).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Scenario& s, std::vector<at::Tensor> params);

// ---- traffic ----------------------------------------------------------------------------------

// Elements moved per collective kind, counted as zero3::Comm counts them, and the number of
// reduce-scatter collectives (one per gradient bucket flushed) and of all-gather collectives (one
// per module fetch, one per parameter a gather reaches); the counts are not element counts.
struct Traffic {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, broadcast = 0, all_to_all = 0;
  int64_t reduce_scatters = 0;
  int64_t all_gathers = 0;
  friend bool operator==(const Traffic& a, const Traffic& b) {
    return a.all_gather == b.all_gather && a.reduce_scatter == b.reduce_scatter && a.all_reduce == b.all_reduce &&
           a.broadcast == b.broadcast && a.all_to_all == b.all_to_all && a.reduce_scatters == b.reduce_scatters &&
           a.all_gathers == b.all_gathers;
  }
  Traffic& operator+=(const Traffic& other) {
    all_gather += other.all_gather;
    all_gathers += other.all_gathers;
    reduce_scatter += other.reduce_scatter;
    reduce_scatters += other.reduce_scatters;
    all_reduce += other.all_reduce;
    broadcast += other.broadcast;
    all_to_all += other.all_to_all;
    return *this;
  }
  std::string to_text() const;
};
Traffic traffic_between(const zero3::CommStats& before, const zero3::CommStats& after);
// The parameters a `gather` of `module` (a module of `target`) reaches: every parameter of it and
// its descendants, tied ones once, placed ones excepted, in the expectation's order. From the
// user's module objects, so a weight tied across containers is found wherever it is registered.
std::vector<const ExpectedParam*> gathered_params(const Expectation& expected, const zero3::Module& module,
                                                  const std::shared_ptr<zero3::Module>& target);
// What a `gather` that reaches `reached` moves: an all-gather of every partitioned one
// (ceil(n/N) * N elements, one collective each: DeepSpeed's GatheredParameters gathers a list
// with one all_gather_into_tensor per parameter, partition_parameters.py:1769-1830 (v0.14.5)), and when its edits are published, a broadcast of each of them,
// persistent ones included (n elements), in a world of `world_size` ranks.
Traffic gather_traffic(const std::vector<const ExpectedParam*>& reached, bool published, int world_size);
// What a step() moves: at an accumulation boundary (`boundary`) with the config's
// gradient_clipping set or with overflow protection (the norm is the overflow check), the squared
// gradient norm all-reduced (one double, counted as 2*N: a
// reduce-scatter padded to a chunk of 1 plus its all-gather; docs/deepspeed-precision.md section
// 2 item 6); else nothing.
Traffic step_traffic(const zero3::Config& config, bool overflow_protection, bool boundary, int world_size);

// What an engine's earlier forwards left of DeepSpeed's module trace (fetch_schedule.cc): none
// before the first forward, then the module order a forward recorded, frozen, until a forward
// departs from it (the next forward records again). Kept per engine by the interpreter.
struct FetchMemory {
  bool complete = false;                  // a recorded trace is in force
  std::vector<std::string> module_order;  // its modules, by path, one per fetch
  friend bool operator==(const FetchMemory& a, const FetchMemory& b) {
    return a.complete == b.complete && a.module_order == b.module_order;
  }
};

// The knobs the forward's fetch schedule reads (engine/config.h's keys).
struct FetchKnobs {
  int64_t prefetch_bucket_size = 0, max_live_parameters = 0, max_reuse_distance = 0;
  static FetchKnobs of(const zero3::Config& config);
};

// Installed on the twin's forward (one rank's), it replays the ZeRO-3 schedule of the spec on the
// expectation: gather a module's partitioned parameters unless already whole, prefetch, release
// after its forward as DeepSpeed's coordinator rules say (fetch_schedule.cc), send a placed
// module's input to its owner; and remembers what backward must do.
class TrafficTrace final : public zero3::ForwardInterceptor {
 public:
  // `twin_target` is the tree the trace will see (its paths match the expectation's); `knobs`
  // and `memory` (what earlier forwards of the engine recorded) drive the prefetch and releases.
  TrafficTrace(const Expectation& expectation, const std::shared_ptr<zero3::Module>& twin_target, int world_size,
               FetchKnobs knobs = FetchKnobs{}, FetchMemory memory = FetchMemory{});
  at::Tensor around_forward(zero3::Module& module, const at::Tensor& input, const zero3::Route& route,
                            const std::function<at::Tensor(const at::Tensor&)>& body) override;
  Traffic forward() const { return forward_; }
  // The most gathered-parameter elements (c*N per partitioned parameter, as a gather allocates
  // them) held at once during the forward: the largest sum, over the forward's all-gathers, of
  // what was held when it began and what it gathers. 0 when nothing was gathered.
  int64_t gathered_peak() const { return peak_; }
  // Elements (c*N) the prefetch gathered ahead of their modules.
  int64_t prefetched() const { return prefetched_; }
  // The largest number of elements (numel) any module of the forward gathers for itself: with
  // max_live_parameters, what DeepSpeed's bound adds to the limit.
  int64_t largest_module_fetch() const { return largest_module_fetch_; }
  // What the engine keeps of the trace after this forward (it completed).
  const FetchMemory& memory_after() const { return memory_after_; }
  // What the backward of this forward moves, given the parameters that got a gradient and, for
  // the count of reduce-scatters, the order their gradients became ready on this rank
  // (DenseTwin::ready_order) and the config's reduce_bucket_size.
  Traffic backward(const std::set<std::string>& with_gradient, const std::vector<std::string>& ready_order,
                   int64_t reduce_bucket_size) const;

 private:
  const Expectation& expectation_;
  int world_;
  std::unordered_map<const zero3::Module*, int> owner_;
  std::unordered_map<const zero3::Module*, std::vector<const ExpectedParam*>> own_;
  std::unordered_set<const ExpectedParam*> whole_;      // gathered right now
  std::unordered_set<const ExpectedParam*> regathered_;  // backward re-gathers these
  // The modules whose re-gather the twin's backward reached, in its order (shared with the
  // graph's notes, which may outlive the trace).
  std::shared_ptr<std::vector<const zero3::Module*>> backward_fetches_ =
      std::make_shared<std::vector<const zero3::Module*>>();
  int64_t placed_backward_elements_ = 0;
  bool inside_placed_ = false;
  Traffic forward_;

  // The fetch schedule (fetch_schedule.cc).
  struct Entry {
    const ExpectedParam* param;
    int64_t step;
  };
  std::vector<const ExpectedParam*> step_params(const std::string& module_path) const;
  void fetch_for(const std::string& module_path, const std::vector<const ExpectedParam*>& mine);
  void release_after(const std::vector<const ExpectedParam*>& mine);
  void gather(const std::vector<const ExpectedParam*>& params, bool prefetch);
  void drop(const ExpectedParam* p);
  bool kept(const ExpectedParam* p) const;
  int64_t last_fetched_for(const ExpectedParam* p) const;
  bool tracing() const { return memory_.complete && !departed_; }
  FetchKnobs knobs_;
  FetchMemory memory_, memory_after_;
  std::unordered_map<const zero3::Module*, std::string> path_of_;
  std::unordered_map<const ExpectedParam*, size_t> index_of_;
  std::vector<std::vector<const ExpectedParam*>> trace_steps_;  // memory_'s modules' parameters
  std::vector<std::string> recording_;
  std::deque<Entry> queue_;
  std::unordered_map<const ExpectedParam*, int64_t> last_fetched_for_;
  bool departed_ = false;
  int depth_ = 0;
  int64_t step_ = 0, available_ = 0, held_ = 0, peak_ = 0, prefetched_ = 0, largest_module_fetch_ = 0;
};

// ---- state bytes ------------------------------------------------------------------------------

// The bytes `rank` must hold for model state after a step: per parameter, c = ceil(n/N) fp32
// elements when partitioned, n when persistent or placed here, nothing when placed elsewhere;
// times (1 + gradient + `optimizer_states`) once it has had a gradient (`trained` holds those
// paths; a frozen or never-reached parameter keeps only its copy). With bf16 (`precision`) each
// element's copy is a bf16 value beside its fp32 master, and its gradient the accumulation dtype.
// What is counted is the CPU (harness/world/rank_memory.h): a rank whose placed modules live on an
// accelerator (placed_on_accelerator) holds their state there, so it is not in the count.
int64_t expected_state_bytes(const Expectation& expected, const std::set<std::string>& trained, int rank,
                             int64_t optimizer_states,
                             const zero3::PrecisionOptions& precision = zero3::PrecisionOptions());

// Whether `rank`'s placed modules live on a CUDA device: EngineOptions' rule with one rank per
// device, as every harness world runs the engine (cuda:rank when that device exists).
bool placed_on_accelerator(int rank);

}  // namespace zerocheck::model
