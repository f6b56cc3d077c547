// zero3::Engine: ZeRO stage 3 over a zero3::Module tree, one engine per rank.
//
// The schedule, per module call: gather the module's own parameters -> forward -> release; on
// the module's outputs a small autograd function re-gathers them just before the module's
// backward; when a parameter's full gradient has accumulated, a hook on its gradient
// accumulator reduce-scatters it into this rank's averaged shard gradient, frees it and
// releases the parameter. step() updates fp32 shards only, with the user's optimizer rebuilt
// over them; with bf16 or fp16 parameters (EngineOptions::precision) those are fp32 masters
// beside 16-bit shards, copied back rounding to nearest even after each step (precision.h). Outside
// forward/backward no partitioned parameter holds full data.
//
// Engine state never lives on user objects: ids, shards, statuses and hooks are in the engine's
// own tables, keyed by object identity; ids come from a per-engine counter.
//
// Overflow contract: when EngineOptions::precision asks for overflow protection
// (check_overflow; always on with fp16, as DeepSpeed's ZeRO-3 checks every fp16 step), a step whose gradients hold a NaN or an infinity on any rank is skipped on
// every rank: weights, fp32 masters, optimizer state and optimizer_steps() stay as they were,
// skipped_steps() grows by one, the loss scale is updated (precision.h), and the step's reported
// gradient norm (global_grad_norm()) is not finite, never a number. The check is the
// rank-summed square of the gradient norm, one all-reduce of one double per optimizer step,
// with the timeout every collective has.
//
// Requires: every rank builds the same tree and calls initialize, forward (with the same route),
// backward, step, checkpointing and release in the same order.
// Thread-safety: an engine belongs to its rank's thread.
#pragma once

#include "engine/comm.h"
#include "engine/config.h"
#include "engine/faults.h"
#include "engine/module.h"
#include "engine/param_status.h"
#include "engine/placement.h"
#include "engine/precision.h"
#include "engine/shard_layout.h"

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zero3 {

struct EngineState;

// The owner name the engine's own attribute writes carry.
inline constexpr const char* kEngineOwner = "zero3-engine";

struct EngineOptions {
  EngineOptions() = default;
  explicit EngineOptions(Fault planted) : fault(planted) {}

  Fault fault = Fault::none;  // a planted fault from the catalogue; none for the reference engine
  // Opt-in compatibility for code that reads upstream's `module.ds_id`: when non-empty, the
  // engine publishes each module's id under this name, through AttrDict::define, so a name the
  // user already owns is never overwritten (initialize throws AttributeCollision instead and
  // changes nothing). release() removes what it published.
  std::string publish_ids_as;
  // The user's placement policy; when empty, the config's "zerocheck.placement" spec is used.
  PlacementPolicy placement_policy;
  // Where a rank's placed modules live, unless the comm names the rank's device
  // (CommOptions::device): cuda:(rank / ranks_per_device) when CUDA is available and that
  // device exists, else the CPU. Several ranks may share one device.
  int ranks_per_device = 1;
  // A test hook, empty in normal use: save_checkpoint calls it on each rank at each named point
  // ("staging", "rank-file", "manifest", "exchanged", "done") so a test can kill the process
  // there and prove that a save leaves the old checkpoint or the new one, never a mix.
  std::function<void(const std::string& point)> save_point;
  // Mixed precision, the loss scale, overflow protection and the gradient clip (precision.h).
  // The defaults are the fp32 engine bit for bit, with no extra collective.
  PrecisionOptions precision;
};

// Returns the device of `rank` under `ranks_per_device` (see EngineOptions).
at::Device rank_device(int rank, int ranks_per_device);

// What the engine knows about one parameter, for tests and oracles (copies; tensors shared).
struct ManagedParamView {
  int64_t id;
  std::string path;
  std::vector<int64_t> shape;
  ShardLayout layout;
  bool persistent;
  int owner;              // placed: the rank that holds it whole; -1 when not placed
  bool trainable;
  ParamStatus status;
  at::Tensor param;       // the model's tensor
  at::Tensor master;      // this rank's fp32 slice, or the whole parameter when persistent (with
                          // bf16: its fp32 copy)
  at::Tensor grad_shard;  // undefined before the first backward
  at::Tensor shard;       // what a gather reads, in the parameter dtype: `master` in fp32; with
                          // bf16 this rank's bf16 slice, or `param` when persistent
};

// One tensor a rank holds for a parameter, measured from the tensor itself.
struct HeldTensor {
  // "param" (the model tensor), "master" (the engine's copy, when not the model tensor itself),
  // "shard" (with bf16, the bf16 slice a gather reads), "grad" (the full gradient on the model
  // tensor), "grad_shard" (the reduced gradient), or an
  // optimizer state's name ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer").
  std::string role;
  int64_t elements;
  std::string device;  // "cpu", "cuda:1"
};

// Where one parameter's bytes live on this rank: measured from the tensors themselves.
struct ParamResidency {
  std::string path;
  int64_t param_elements;      // storage in the model tensor
  int64_t master_elements;     // the engine's copy (a shard, or the model tensor itself)
  int64_t grad_elements;       // full gradient + shard gradient
  int64_t optimizer_elements;  // optimizer state tensors for this parameter
  std::string device;          // where the model tensor lives ("cpu", "cuda:1")
  // Every tensor counted above, with its device: "param" always, the others when defined.
  std::vector<HeldTensor> tensors;
};

// What a load restores besides the parameters and their fp32 masters (harness/SCENARIO_FORMAT.md's
// option matrix, DeepSpeed's load_checkpoint arguments): by default everything; without
// optimizer_states the optimizer's state stays as it was; with module_only the step counters
// stay too (module_only wins over optimizer_states).
struct LoadOptions {
  bool optimizer_states = true;
  bool module_only = false;
  bool restores_optimizer_state() const { return optimizer_states && !module_only; }
};

class Engine {
 public:
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs the model on `input`, choosing experts by `route`. Collective.
  // Throws UsageError when released, or when ranks pass different routes.
  at::Tensor forward(const at::Tensor& input, const Route& route = Route());
  // Back-propagates `loss` (times the loss scale, when one is configured) and leaves averaged
  // shard gradients. Collective.
  void backward(const at::Tensor& loss);
  // Applies the optimizer to the shards once every gradient_accumulation_steps calls. With a
  // loss scale, clipping or overflow protection configured, at that boundary it first computes
  // the global gradient norm (collective), updates the loss scale, skips the step on an
  // overflow (see the overflow contract above), else unscales and clips as DeepSpeed does.
  // Throws UsageError when the dynamic scale must halve below its minimum (DeepSpeed's raise).
  void step();
  // Zeroes shard gradients in place (LibTorch 1.13's optimizer default), so a parameter that
  // skips a step (an expert nobody routed to) still steps with a zero gradient, as in dense
  // training.
  void zero_grad();

  // Restores full parameters into the model, removes hooks and lets go of the model and the
  // optimizer so they can be initialized again. Collective. Idempotent.
  void release();
  bool released() const;

  // Returns the engine's id for `module`. Throws UsageError when the module is not managed.
  int64_t module_id(const Module& module) const;
  std::vector<ManagedParamView> params() const;
  // Returns, for every managed parameter (params() order), what this rank holds for it.
  std::vector<ParamResidency> residency() const;
  // Returns, for every managed parameter (params() order), the optimizer state elements this
  // rank holds for it: residency()'s optimizer_elements alone, for checks after every operation.
  std::vector<int64_t> optimizer_state_elements() const;
  const Config& config() const;
  Comm& comm();
  torch::optim::Optimizer& optimizer();
  Fault fault() const;
  // The step() calls so far, and the optimizer steps they applied (one every
  // gradient_accumulation_steps calls; DeepSpeed's global_steps). Every rank counts alike.
  int64_t micro_steps() const;
  int64_t optimizer_steps() const;
  // Optimizer steps skipped for an overflow (DeepSpeed's skipped_steps); 0 without protection.
  int64_t skipped_steps() const;
  // The global gradient norm of the last step boundary, unscaled (DeepSpeed reports the scaled
  // norm divided by the updated scale, stage3.py:2034 (v0.14.5)); not finite when that step
  // overflowed; 0 before any boundary and whenever precision needs no norm.
  double global_grad_norm() const;
  // The current loss scale (1 unless one is configured).
  double loss_scale() const;
  const PrecisionOptions& precision() const;

  // Returns the bytes this rank holds for model state: model tensors, fp32 shards, shard
  // gradients and optimizer state.
  int64_t measured_state_bytes() const;

  // Returns the full parameters on rank 0 under every key torch's state_dict lists (a module used
  // at several places, tied weights, under each of them) and an empty map elsewhere. Collective.
  std::map<std::string, at::Tensor> consolidated_state_dict();
  // Writes a checkpoint into `dir`: every rank's shards and optimizer state in a sibling
  // staging directory, rank 0's manifest (checkpoint_manifest.h) last, then an atomic exchange
  // with `dir`; every file and directory is fsynced first, so a crash at any point leaves the
  // old checkpoint or the new one. Collective.
  // `client_state_json` (a JSON object, "{}" when empty) is kept in the manifest for the caller
  // (as DeepSpeed's client_state): read it back with read_checkpoint (checkpoint_reader.h).
  // Throws CheckpointError when `dir` cannot be written, or holds something other than a
  // checkpoint (it is never replaced then); UsageError when client_state_json is not an object.
  void save_checkpoint(const std::string& dir, const std::string& client_state_json = "{}");
  // Loads the checkpoint in `dir`, saved by any world size, into this world: parameters are
  // re-cut for this world's shards, placed modules' parameters and optimizer state go to their
  // owners here. Everything is read and verified (checkpoint_reader.h) before anything changes.
  // `options` says what else it restores (LoadOptions); the optimizer's kind must match only
  // when its state is restored. Collective. Throws CheckpointError naming the file and what is
  // wrong (missing, truncated, damaged, another model or optimizer kind); the engine is
  // unchanged then.
  void load_checkpoint(const std::string& dir, const LoadOptions& options = LoadOptions());

  // Tagged checkpoints in one folder, laid out as DeepSpeed lays them out: the checkpoint of
  // `tag` in <folder>/<tag> (save_checkpoint's format), and the file <folder>/latest naming the
  // last tag saved, replaced atomically after the checkpoint is in place. Collective.
  // Throws UsageError when `tag` breaks the tag rule (engine/checkpoint_tag.h), and what
  // save_checkpoint throws.
  void save_checkpoint_tagged(const std::string& folder, const std::string& tag);
  // Loads the checkpoint of `tag` from `folder`, or, with an empty tag, the one <folder>/latest
  // names. Collective. Throws UsageError when `tag` breaks the tag rule, CheckpointError when
  // latest is missing or names no valid tag, and what load_checkpoint throws.
  void load_checkpoint_tagged(const std::string& folder, const std::string& tag,
                              const LoadOptions& options = LoadOptions());

 private:
  friend std::unique_ptr<Engine> initialize(std::shared_ptr<Module>, torch::optim::Optimizer&,
                                            const Config&, Comm&, EngineOptions);
  friend class GatheredParameters;
  explicit Engine(std::shared_ptr<EngineState> state);
  std::shared_ptr<EngineState> state_;
};

// Wraps `model` for ZeRO-3 training: partitions its parameters over comm's ranks and rebuilds
// `optimizer` (built by the user over the model's parameters) over the fp32 shards. Collective.
// Throws UsageError for precision options it cannot run (fp16 where LibTorch computes no fp16
// Linear on CPU, naming fp16.enabled and LibTorch's message; 16-bit parameters with placed
// modules; the message says why), ConfigError for a bad config, OptimizerMismatch when the optimizer does not cover
// exactly the model's trainable parameters, AlreadyInitialized when the model, a module of it or
// the optimizer is managed by a live engine (nothing is changed then).
std::unique_ptr<Engine> initialize(std::shared_ptr<Module> model, torch::optim::Optimizer& optimizer,
                                   const Config& config, Comm& comm,
                                   EngineOptions options = EngineOptions());

// Gathers the full parameters of `module` (and its descendants) while it lives, like DeepSpeed's
// GatheredParameters, and releases them after. Placed parameters (whole on their owner, nothing
// elsewhere) are not part of it.
//
// Edits: with a modifier rank, what that rank writes into the gathered parameters becomes every
// rank's when publish_edits() is called: each parameter is broadcast from the modifier rank and
// written into every rank's shard and fp32 master (persistent parameters whole). Without a
// modifier rank, or without that call, edits are dropped: the destructor restores the persistent
// parameters and releases the partitioned ones, whose shards never saw the edit. publish_edits()
// is an explicit call, not the destructor's work, because a collective can fail and a destructor
// must not throw.
class GatheredParameters {
 public:
  // Collective on construction (an all-gather per partitioned parameter). Throws UsageError when
  // the engine is released or `modifier_rank` is not a rank of the world.
  GatheredParameters(Engine& engine, const Module& module, std::optional<int> modifier_rank = std::nullopt);
  ~GatheredParameters();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

  // Makes the modifier rank's edits every rank's (above). Collective (a broadcast per gathered
  // or persistent parameter). Throws UsageError without a modifier rank or when called twice,
  // and what the comm throws (a timeout: the parameters are then released unpublished).
  void publish_edits();

 private:
  std::shared_ptr<EngineState> state_;
  std::vector<int64_t> gathered_;    // partitioned parameters gathered here
  std::vector<int64_t> persistent_;  // persistent parameters of the module
  std::vector<at::Tensor> persistent_before_;  // their values on entry (restored unless published)
  std::optional<int> modifier_rank_;
  bool published_ = false;
};

}  // namespace zero3
