#include "engine/engine.h"
#include "engine/sub_groups.h"

#include "engine/errors.h"
#include "engine/internal/engine_state.h"
#include "engine/optimizer_rebuild.h"
#include "engine/placement.h"
#include "engine/registry.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <cmath>
#include <exception>
#include <functional>
#include <unordered_set>

namespace zero3 {
namespace {

// Runs after a parameter's gradient accumulator has written the full gradient.
class GradientReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(std::weak_ptr<EngineState> state, ManagedParam* param)
      : state_(std::move(state)), param_(param) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto state = state_.lock()) state->on_gradient_ready(*param_);
    return outputs;
  }

 private:
  std::weak_ptr<EngineState> state_;
  ManagedParam* param_;
};

// Evaluates the placement policy once, in pre-order: a placed module's whole subtree goes with
// it, so a nested module is never placed twice.
void assign_placement(EngineState& state, const EngineOptions& options) {
  const int world = state.comm.world_size();
  PlacementPolicy policy = options.placement_policy
                               ? options.placement_policy
                               : make_placement_policy(state.config.placement);
  state.faults.placement_policy(state, policy);
  std::function<void(Module&, int)> visit = [&](Module& module, int inherited) {
    ModuleRecord& record = state.modules.at(&module);
    if (record.inside_placed || record.owner >= 0) return;  // a shared module seen before
    int owner = inherited;
    if (inherited >= 0) {
      record.inside_placed = true;
    } else if (auto decided = policy(record.path, module, world)) {
      if (*decided < 0 || *decided >= world)
        throw PlacementError((record.path.empty() ? "<root>" : record.path) +
                             ": placement policy chose rank " + std::to_string(*decided) +
                             ", outside a world of " + std::to_string(world));
      owner = record.owner = *decided;
      // Routes do not travel with inputs: the owner could not know which expert a nested MoE
      // of the sender should pick.
      for (const auto& inner : unique_modules(std::shared_ptr<Module>(std::shared_ptr<Module>(), &module)))
        if (inner.module->kind() == "MoE")
          throw PlacementError((record.path.empty() ? "<root>" : record.path) +
                               ": a placed module must not contain an MoE layer ('" +
                               (record.path.empty() ? inner.path : record.path + "." + inner.path) + "')");
    }
    if (owner >= 0)
      for (ManagedParam* p : record.own_params) {
        p->owner = owner;
        p->persistent = false;
      }
    for (auto& [name, child] : module.named_zero3_children()) visit(*child, owner);
  };
  visit(*state.model, -1);
}

std::string join_path(const std::string& module_path, const std::string& name) {
  return module_path.empty() ? name : module_path + "." + name;
}

void check_optimizer_covers_model(const torch::optim::Optimizer& optimizer,
                                  const std::vector<std::unique_ptr<ManagedParam>>& params,
                                  const std::unordered_map<const c10::TensorImpl*, ManagedParam*>&
                                      by_impl) {
  std::unordered_set<const c10::TensorImpl*> seen;
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto* impl = p.unsafeGetTensorImpl();
      auto it = by_impl.find(impl);
      const std::string label = "optimizer parameter #" + std::to_string(index++);
      if (it == by_impl.end())
        throw OptimizerMismatch(label + " (shape " + c10::str(p.sizes()) +
                                ") is not a parameter of the model");
      if (!seen.insert(impl).second)
        throw OptimizerMismatch(label + " ('" + it->second->path +
                                "') appears twice in the optimizer; build it over "
                                "zero3::unique_parameters(model) when weights are tied");
      if (!it->second->trainable)
        throw OptimizerMismatch(label + " ('" + it->second->path +
                                "') is frozen (requires_grad=false) but in the optimizer");
    }
  }
  for (const auto& p : params)
    if (p->trainable && seen.count(p->param.unsafeGetTensorImpl()) == 0)
      throw OptimizerMismatch("model parameter '" + p->path +
                              "' is trainable but not in the optimizer");
}

// Refuses a model or optimizer that an engine manages already (AlreadyInitialized).
void check_not_managed(const std::vector<ModuleAtPath>& tree, const torch::optim::Optimizer& optimizer,
                       const FaultSeams& faults) {
  if (faults.skips_registry_check(tree, optimizer)) return;
  try {
    Registry::instance().check_unmanaged(tree, &optimizer);
  } catch (const AlreadyInitialized& refusal) {
    faults.on_refusal(refusal, tree);
    throw;
  }
}

ManagedParam* record_param(EngineState& state, std::string path, const at::Tensor& tensor) {
  auto p = std::make_unique<ManagedParam>();
  p->id = static_cast<int64_t>(state.params.size());
  p->path = std::move(path);
  p->param = tensor;
  p->shape = tensor.sizes().vec();
  p->layout = ShardLayout::of(tensor.numel(), state.comm.world_size());
  p->persistent = tensor.numel() <= state.config.zero_optimization.stage3_param_persistence_threshold;
  p->trainable = tensor.requires_grad();
  state.faults.param_recorded(*p);
  state.params.push_back(std::move(p));
  return state.params.back().get();
}

// Numbers the modules in pre-order and records each parameter once, at its first place.
void record_tree(EngineState& state, const std::vector<ModuleAtPath>& tree) {
  int64_t module_id = 0;
  for (const auto& [path, module] : tree) {
    ModuleRecord& record = state.modules[module.get()];
    record.module = module.get();
    record.id = module_id++;
    record.path = path;
    for (const auto& [name, tensor] : module->own_parameters()) {
      auto [slot, inserted] = state.param_by_impl.emplace(tensor.unsafeGetTensorImpl(), nullptr);
      if (inserted) slot->second = record_param(state, join_path(path, name), tensor);
      record.own_params.push_back(slot->second);
    }
    state.module_by_id.push_back(&record);
  }
}

// Defines `name` (when given) on every module as its engine id. A dry run defines it on copies,
// so that a collision anywhere is found before any module is touched.
void publish_ids(const EngineState& state, const std::vector<ModuleAtPath>& tree, const std::string& name,
                 bool dry_run) {
  if (name.empty()) return;
  for (const auto& [path, module] : tree) {
    const int64_t id = state.modules.at(module.get()).id;
    const std::string where = path.empty() ? "<root>" : path;
    if (dry_run) {
      AttrDict probe = module->attrs();
      probe.define(name, id, kEngineOwner, where);
    } else {
      module->attrs().define(name, id, kEngineOwner, where);
    }
  }
}

// Hooks each reducible gradient and partitions every parameter. Returns the model's own data,
// held until initialize cannot fail any more: a refused initialize swaps it back (no copy: the
// storage it had).
std::vector<at::Tensor> hook_and_partition(const std::shared_ptr<EngineState>& state) {
  std::vector<at::Tensor> model_data;
  const PrecisionOptions& precision = state->options.precision;
  for (auto& p : state->params) {
    model_data.push_back(p->param.detach());
    if (precision.mixed()) {
      // R1 (runtime/engine.py:1141 (v0.14.5)): the parameters become bf16, rounded to nearest
      // even; before the accumulator exists, which records the dtype its gradients must have.
      at::NoGradGuard no_grad;
      p->param.set_data(round_to(p->param.detach(), precision.param_dtype));
    }
    if (p->trainable && !p->placed()) {  // placed gradients stay on their owner: no reduction
      // Created while the parameter still has its full shape: autograd validates incoming
      // gradients against the shape the accumulator recorded.
      p->grad_accumulator = torch::autograd::impl::grad_accumulator(p->param);
      p->hook_key = p->grad_accumulator->add_post_hook(std::make_unique<GradientReadyHook>(state, p.get()));
    }
    state->partitioner.partition(*p);
    state->faults.after_partition(*state, *p);
  }
  return model_data;
}

// Undoes hook_and_partition for a refused initialize: hooks off, the model's data back.
void give_back_model(EngineState& state, const std::vector<at::Tensor>& model_data) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < state.params.size(); ++i) state.params[i]->param.set_data(model_data[i]);
  state.detach_local();
}

}  // namespace

at::Device rank_device(int rank, int ranks_per_device) {
  const int index = rank / std::max(ranks_per_device, 1);
  if (torch::cuda::is_available() && index < static_cast<int>(torch::cuda::device_count()))
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  return at::Device(at::kCPU);
}

// ---- initialize -------------------------------------------------------------------------------

std::unique_ptr<Engine> initialize(std::shared_ptr<Module> model, torch::optim::Optimizer& optimizer,
                                   const Config& config, Comm& comm, EngineOptions options) {
  if (!model) throw UsageError("initialize: the model is null");
  const std::vector<ModuleAtPath> tree = unique_modules(model);
  const FaultSeams faults(options.fault);
  check_not_managed(tree, optimizer, faults);
  options.precision = precision_in_effect(options.precision, config.precision);
  if (const std::string refusal = precision_refusal(options.precision); !refusal.empty())
    throw UsageError("initialize: " + refusal);
  if (const std::string refusal = fp16_refusal_here(options.precision); !refusal.empty())
    throw UsageError("initialize: " + refusal);

  auto state = std::make_shared<EngineState>(model, comm, config, options);
  state->user_optimizer = &optimizer;
  faults.scaler_options(state->options.precision.scaler);
  state->scaler = LossScaler(state->options.precision.scaler);
  record_tree(*state, tree);
  faults.before_placement(*state);
  assign_placement(*state, options);
  faults.after_placement(*state);
  if (options.precision.mixed())
    for (const auto& p : state->params)
      if (p->placed())
        throw UsageError("initialize: parameter '" + p->path + "' is placed on rank " + std::to_string(p->owner) +
                         ", and placed modules are fp32 only (param_dtype " +
                         c10::toString(options.precision.param_dtype) +
                         " asked): their gradients are summed on the owner, not reduced by R3");
  for (auto& [key, record] : state->modules)
    for (ManagedParam* p : record.own_params)
      record.has_partitioned_params |= !p->persistent && !p->placed();
  check_optimizer_covers_model(optimizer, state->params, state->param_by_impl);
  faults.after_optimizer_check(*state);
  publish_ids(*state, tree, options.publish_ids_as, /*dry_run=*/true);

  std::vector<at::Tensor> model_data = hook_and_partition(state);
  // The config is checked once the engine is built over the model, so that a refusal here is a
  // real test of undoing it (hooks off, the model's data back): DeepSpeed's failed initialize
  // left its hooks on the model.
  try {
    config.validate(comm.world_size());
  } catch (const ConfigError&) {
    if (!faults.keeps_refused_state()) give_back_model(*state, model_data);
    state->released = true;
    throw;
  }
  model_data.clear();

  state->optimizer = rebuild_optimizer(optimizer, [&](const at::Tensor& user_param) {
    ManagedParam* p = state->param_by_impl.at(user_param.unsafeGetTensorImpl());
    if (p->placed() && p->owner != comm.rank()) return at::Tensor();  // no state off its owner
    at::Tensor stepped = p->master;
    faults.optimizer_tensor(*p, stepped);
    return stepped;
  });
  publish_ids(*state, tree, options.publish_ids_as, /*dry_run=*/false);
  faults.after_initialize(*state, tree);
  if (!faults.skips_registry_claim()) Registry::instance().claim(state.get(), tree, &optimizer);
  return std::unique_ptr<Engine>(new Engine(std::move(state)));
}

// ---- Engine -----------------------------------------------------------------------------------

Engine::Engine(std::shared_ptr<EngineState> state) : state_(std::move(state)) {}

Engine::~Engine() {
  if (state_->released) return;
  // Releasing is collective; while an exception unwinds (a failing rank) peers are not there
  // to answer, so only the local half runs and the model keeps its shards.
  if (std::uncaught_exceptions() == 0) {
    try {
      release();
      return;
    } catch (...) {
    }
  }
  state_->detach_local();
  state_->released = true;
}

at::Tensor Engine::forward(const at::Tensor& input, const Route& route) {
  state_->require_live("forward");
  InterceptorScope scope(state_.get());
  Route cursor = route;
  // The trace and the prefetch live for one forward (fetch_coordinator.h): what the reuse
  // distance or a prefetch kept gathered is released at its end, as before the backward.
  std::vector<ManagedParam*> all;
  if (!state_->faults.keeps_gathered_after_forward())
    for (auto& p : state_->params) all.push_back(p.get());
  state_->fetcher.begin_forward();
  at::Tensor out;
  try {
    out = (*state_->model)(input, cursor);
  } catch (...) {
    state_->fetcher.end_forward(/*ok=*/false, all);
    throw;
  }
  state_->fetcher.end_forward(/*ok=*/true, all);
  return out;
}

void Engine::backward(const at::Tensor& loss) {
  state_->require_live("backward");
  const int rank = state_->comm.rank();
  for (auto& p : state_->params)  // whole tensors collect fresh local gradients
    if (p->whole_here(rank) && p->trainable) p->param.mutable_grad() = at::Tensor();
  const double scale = state_->scaler.scale();
  // v0.14.5 scales loss.float() (runtime/fp16/loss_scaler.py:61-63): a bf16 or fp16 loss is
  // widened, and the scaled loss's backward runs into the 16-bit graph (R2).
  try {
    if (scale != 1.0) (loss.to(at::kFloat) * scale).backward(); else loss.backward();
  } catch (...) {
    state_->partitioner.drop_gradients();
    throw;
  }
  state_->partitioner.flush_gradients();  // the gradients left in the last bucket
  state_->finish_placed_gradients();
  state_->faults.after_gradients(*state_);
  // Frozen parameters were re-gathered for backward but have no gradient hook to release them.
  for (auto& p : state_->params)
    if (!state_->faults.keeps_gathered_after_backward(*p)) state_->partitioner.release(*p);
}

namespace {

// Whether this rank's shard gradient of `p` is its own share of the global norm: a partitioned
// parameter's slice on every rank; a persistent one (whole and alike on every rank) on rank 0
// only; a placed one on its owner.
bool counts_in_norm(const ManagedParam& p, int rank) {
  if (!p.trainable || !p.grad_shard.defined()) return false;
  if (p.placed()) return p.owner == rank;
  return !p.persistent || rank == 0;
}

// DeepSpeed's step before the optimizer (docs/deepspeed-precision.md, section 2, items 5-7):
// the global norm of the scaled gradients (each share's double norm squared, summed, SUM over
// ranks, square root: stage3.py:1747-1764 (v0.14.5)), the scale updated before anything is
// unscaled (:1965-1978), then every shard gradient multiplied by 1 / combined (:2109-2118).
// The one all-reduce carries the overflow too: a NaN or an infinity on any rank makes the sum
// non-finite on every rank, so every rank decides alike. Returns false when the step is skipped.
bool unscale_and_clip(EngineState& state) {
  const int rank = state.comm.rank();
  at::NoGradGuard no_grad;
  at::Tensor sum_sq = at::zeros({1}, at::kDouble);
  for (auto& p : state.params)
    if (counts_in_norm(*p, rank)) sum_sq += p->grad_shard.to(at::kCPU).to(at::kDouble).norm(2).pow(2);
  const double rank_sum_sq = sum_sq.item<double>();
  state.comm.all_reduce_sum(sum_sq);
  const double scaled_norm = std::sqrt(sum_sq.item<double>());
  double clip_norm = scaled_norm;
  state.faults.clip_norm(rank_sum_sq, clip_norm);
  const PrecisionOptions& precision = state.options.precision;
  bool overflow = precision.check_overflow && !std::isfinite(scaled_norm);
  if (precision.check_overflow) state.faults.overflow_decision(rank_sum_sq, scaled_norm, overflow);
  state.scaler.update(overflow);
  const double scale = state.scaler.scale();
  state.global_grad_norm = scaled_norm / scale;
  state.faults.reported_norm(state, state.global_grad_norm);
  if (overflow) return false;
  double combined = unscale_and_clip_divisor(clip_norm, scale, precision.gradient_clipping);
  state.faults.unscale_divisor(state, clip_norm, combined);
  if (combined != 1.0)  // on the fp32 gradients (R8): the masters' (step_gradients)
    for (auto& p : state.params)
      if (p->trainable && p->master.grad().defined()) {
        at::Tensor grad = p->master.mutable_grad();
        grad.mul_(1.0 / combined);
        // A NaN norm (unprotected) makes the multiplier NaN, and 0 * NaN would step the padding
        // off zero: keep the padding's gradient zero, so the padding stays zero (shard_layout.h).
        const int64_t real = p->persistent || p->placed() ? grad.numel() : p->layout.real_in_shard(rank);
        if (real < grad.numel()) grad.view({-1}).slice(0, real).zero_();
      }
  return true;
}

// Gives each master its fp32 gradient: the accumulated one itself in fp32; with bf16, a widened
// copy (stage3.py:1851-1858 (v0.14.5): flatten(...).to(fp32)), dropped after the step.
void step_gradients(EngineState& state) {
  for (auto& p : state.params)
    if (p->trainable && p->master.numel() > 0)
      p->master.mutable_grad() = p->grad_shard.defined() ? p->grad_shard.to(at::kFloat) : at::Tensor();
}

}  // namespace

void Engine::step() {
  state_->require_live("step");
  if (++state_->micro_steps % state_->config.gradient_accumulation_steps != 0) return;
  step_gradients(*state_);
  const bool mixed = state_->options.precision.mixed();
  if (state_->options.precision.needs_norm() && !unscale_and_clip(*state_)) {
    ++state_->skipped_steps;
    if (mixed)  // the widened fp32 gradients go as after an applied step (stage3.py:1953-1960)
      for (auto& p : state_->params) p->master.mutable_grad() = at::Tensor();
    return;
  }
  if (!state_->faults.skips_optimizer_step(*state_))  // a sub-group at a time (sub_groups.h)
    step_sub_groups(*state_->optimizer, sub_groups_of(state_->params, state_->config.zero_optimization.sub_group_size),
                    state_->faults);
  ++state_->optimizer_steps;
  for (auto& p : state_->params) {
    if (mixed) {  // R9: the bf16 copy from the stepped master; its fp32 gradient goes
      state_->partitioner.copy_back(*p);
      p->master.mutable_grad() = at::Tensor();
    }
    state_->faults.shard_written(*p, state_->comm.rank());
  }
  state_->faults.after_step(*state_);
}

void Engine::zero_grad() {
  state_->require_live("zero_grad");
  state_->faults.before_zero_grad(*state_);
  at::NoGradGuard no_grad;
  for (auto& p : state_->params)
    if (p->grad_shard.defined()) p->grad_shard.zero_();
}

void Engine::release() {
  if (state_->released) return;
  for (auto& p : state_->params) {
    p->master.mutable_grad() = at::Tensor();
    state_->partitioner.restore_full(*p);
  }
  state_->detach_local();
  state_->optimizer.reset();
  state_->released = true;
}

bool Engine::released() const { return state_->released; }

int64_t Engine::module_id(const Module& module) const {
  auto it = state_->modules.find(&module);
  if (it == state_->modules.end())
    throw UsageError("module " + module.kind() + " is not managed by this engine");
  return it->second.id;
}

std::vector<ManagedParamView> Engine::params() const {
  std::vector<ManagedParamView> out;
  for (const auto& p : state_->params)
    out.push_back({p->id, p->path, p->shape, p->layout, p->persistent, p->owner, p->trainable,
                   p->status, p->param, p->master, p->grad_shard, p->shard});
  return out;
}

std::vector<ParamResidency> Engine::residency() const {
  std::vector<ParamResidency> out;
  auto count = [](const at::Tensor& t) { return t.defined() ? t.numel() : int64_t{0}; };
  for (const auto& p : state_->params) {
    const bool shared = p->master.defined() && p->master.is_same(p->param);
    const at::Tensor full_grad = p->param.grad();
    const bool same_grad = full_grad.defined() && p->grad_shard.defined() && full_grad.is_same(p->grad_shard);
    ParamResidency here{p->path, count(p->param), shared ? 0 : count(p->master),
                        count(p->grad_shard) + (same_grad ? 0 : count(full_grad)),
                        state_->optimizer ? state_numel_of(*state_->optimizer, p->master) : 0,
                        p->param.device().str(), {}};
    auto hold = [&](const std::string& role, const at::Tensor& t) {
      if (t.defined()) here.tensors.push_back({role, t.numel(), t.device().str()});
    };
    hold("param", p->param);
    if (!shared) hold("master", p->master);
    if (p->shard.defined() && !p->shard.is_same(p->master) && !p->shard.is_same(p->param)) hold("shard", p->shard);
    if (!same_grad) hold("grad", full_grad);
    hold("grad_shard", p->grad_shard);
    if (state_->optimizer)
      for (const auto& [name, t] : named_state_tensors_of(*state_->optimizer, p->master)) hold(name, t);
    out.push_back(std::move(here));
  }
  return out;
}

std::vector<int64_t> Engine::optimizer_state_elements() const {
  std::vector<int64_t> out;
  out.reserve(state_->params.size());
  for (const auto& p : state_->params)
    out.push_back(state_->optimizer ? state_numel_of(*state_->optimizer, p->master) : 0);
  return out;
}

const Config& Engine::config() const { return state_->config; }
Comm& Engine::comm() { return state_->comm; }
Fault Engine::fault() const { return state_->options.fault; }

int64_t Engine::micro_steps() const { return state_->micro_steps; }

int64_t Engine::optimizer_steps() const { return state_->optimizer_steps; }

int64_t Engine::skipped_steps() const { return state_->skipped_steps; }

double Engine::global_grad_norm() const { return state_->global_grad_norm; }

double Engine::loss_scale() const { return state_->scaler.scale(); }

const PrecisionOptions& Engine::precision() const { return state_->options.precision; }

torch::optim::Optimizer& Engine::optimizer() {
  state_->require_live("optimizer");
  return *state_->optimizer;
}

int64_t Engine::measured_state_bytes() const {
  int64_t bytes = 0;
  // A tensor may be reachable twice (a persistent parameter is its own master, and its .grad is
  // the shard gradient during a step): count each tensor once.
  std::unordered_set<const c10::TensorImpl*> counted;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && counted.insert(t.unsafeGetTensorImpl()).second)
      bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const auto& p : state_->params) {
    add(p->param);
    add(p->param.grad());
    add(p->master);
    add(p->shard);
    add(p->grad_shard);
  }
  if (state_->optimizer) bytes += state_numel(*state_->optimizer) * 4;
  return bytes;
}

namespace {

// Calls `visit(key, parameter)` for every key torch's state_dict lists: it walks the children
// without de-duplicating, so a module used at several places has its parameters under each.
void for_each_state_dict_key(const std::string& path, const Module& module,
                             const std::function<void(const std::string&, const at::Tensor&)>& visit) {
  for (const auto& [name, tensor] : module.own_parameters()) visit(join_path(path, name), tensor);
  for (const auto& [name, child] : module.named_zero3_children())
    for_each_state_dict_key(join_path(path, name), *child, visit);
}

}  // namespace

std::map<std::string, at::Tensor> Engine::consolidated_state_dict() {
  state_->require_live("consolidated_state_dict");
  Comm& comm = state_->comm;
  FullTensors full_of;
  for (const auto& p : state_->params) {
    at::Tensor full;
    if (p->persistent) {
      full = p->param.detach().clone();
    } else if (p->placed()) {
      full = p->owner == comm.rank() ? p->param.detach().cpu().clone()
                                     : at::zeros(p->shape, p->param.options().device(at::kCPU));
      comm.broadcast(full, p->owner);
    } else if (!state_->faults.builds_consolidated(*p, full)) {
      // The parameter-dtype copies, as DeepSpeed's consolidated 16-bit state dict has them.
      at::Tensor gathered = at::empty({p->layout.padded_numel()}, p->shard.options());
      comm.all_gather(p->shard.detach(), gathered);
      full = gathered.narrow(0, 0, p->layout.numel).view(p->shape).clone();
    }
    if (comm.rank() == 0) full_of.emplace(p.get(), full);
  }
  std::map<std::string, at::Tensor> out;
  if (comm.rank() != 0) return out;
  if (state_->faults.lists_consolidated(*state_, full_of, out)) return out;
  for_each_state_dict_key("", *state_->model, [&](const std::string& key, const at::Tensor& tensor) {
    out.emplace(key, full_of.at(state_->param_by_impl.at(tensor.unsafeGetTensorImpl())));
  });
  return out;
}

// ---- GatheredParameters -----------------------------------------------------------------------

GatheredParameters::GatheredParameters(Engine& engine, const Module& module, std::optional<int> modifier_rank)
    : state_(engine.state_), modifier_rank_(modifier_rank) {
  state_->require_live("GatheredParameters");
  const int world = state_->comm.world_size();
  if (modifier_rank && (*modifier_rank < 0 || *modifier_rank >= world))
    throw UsageError("GatheredParameters: modifier rank " + std::to_string(*modifier_rank) + " is outside a world of " +
                     std::to_string(world));
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& t : module.parameters(/*recurse=*/true)) {
    auto it = state_->param_by_impl.find(t.unsafeGetTensorImpl());
    if (it == state_->param_by_impl.end() || !seen.insert(it->first).second) continue;
    ManagedParam& p = *it->second;
    if (p.placed()) continue;
    if (p.persistent) {
      persistent_.push_back(p.id);
      persistent_before_.push_back(p.param.detach().clone());
      continue;
    }
    if (p.status == ParamStatus::Available) continue;  // whole already: whoever gathered it releases it
    state_->partitioner.gather(p);
    gathered_.push_back(p.id);
  }
}

void GatheredParameters::publish_edits() {
  if (!modifier_rank_) throw UsageError("GatheredParameters::publish_edits: no modifier rank was given");
  if (published_) throw UsageError("GatheredParameters::publish_edits: called twice");
  state_->require_live("GatheredParameters::publish_edits");
  EngineState& s = *state_;
  auto broadcast = [&](at::Tensor& tensor, int from) {
    at::Tensor received = tensor.clone();
    s.comm.broadcast(received, from);
    s.faults.edit_received(tensor, received);
    tensor = received;
  };
  at::NoGradGuard no_grad;
  for (int64_t id : gathered_) {
    ManagedParam& p = *s.params.at(id);
    at::Tensor full = p.param.detach().to(p.shard.scalar_type()).reshape({-1}).clone();
    broadcast(full, *modifier_rank_);
    p.param.detach().view({-1}).copy_(full);
    s.partitioner.write_from_full(p, full);
    s.faults.shard_written(p, s.comm.rank());
  }
  for (int64_t id : persistent_) {
    ManagedParam& p = *s.params.at(id);
    at::Tensor whole = p.param.detach().clone();
    int from = *modifier_rank_;
    s.faults.persistent_edit_source(s, from);
    broadcast(whole, from);
    p.param.detach().copy_(whole);
    if (s.options.precision.mixed()) p.master.copy_(p.param.detach());  // widened, exactly
  }
  published_ = true;
}

GatheredParameters::~GatheredParameters() {
  if (state_->released) return;
  if (!published_) {  // the edits are dropped: persistent parameters take back their values
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < persistent_.size(); ++i)
      state_->params.at(persistent_[i])->param.detach().copy_(persistent_before_[i]);
  }
  for (int64_t id : gathered_) state_->partitioner.release(*state_->params.at(id));
}

}  // namespace zero3
