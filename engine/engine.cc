#include "engine/engine.h"

#include "engine/errors.h"
#include "engine/internal/deep_faults.h"
#include "engine/internal/engine_state.h"
#include "engine/legacy_mode.h"
#include "engine/optimizer_rebuild.h"
#include "engine/placement.h"
#include "engine/registry.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <exception>
#include <functional>
#include <limits>
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

bool uses_registry(Fault fault) { return !is_legacy(fault) && fault != Fault::accept_repeated_initialize; }

// Evaluates the placement policy once, in pre-order: a placed module's whole subtree goes with
// it, so a nested module is never placed twice.
void assign_placement(EngineState& state, const EngineOptions& options) {
  const int world = state.comm.world_size();
  PlacementPolicy policy = options.placement_policy
                               ? options.placement_policy
                               : make_placement_policy(state.config.placement);
  if (options.fault == Fault::placement_from_engine_ids &&
      state.config.placement.kind == PlacementSpec::Kind::attr_mod) {
    // The planted fault: the owner comes from the engine's id instead of the user's attribute.
    policy = [&state, attr = state.config.placement.attr](const std::string& path,
                                                          const Module& module, int n) {
      if (module.kind() != "Expert") return std::optional<int>();
      AttrDict engine_view;
      engine_view.set(attr, state.modules.at(&module).id);
      return std::optional<int>(attr_mod_owner(path, engine_view, attr, n));
    };
  }
  std::function<void(Module&, int)> visit = [&](Module& module, int inherited) {
    ModuleRecord& record = state.modules.at(&module);
    if (record.inside_placed || record.owner >= 0) return;  // a shared module seen before
    int owner = inherited;
    if (inherited >= 0) {
      record.inside_placed = true;
    } else if (auto decided = options.fault == Fault::placed_without_policy &&
                                         state.config.placement.kind == PlacementSpec::Kind::none &&
                                         module.kind() == "Expert"
                                     ? std::optional<int>(world - 1)
                                     : policy(record.path, module, world)) {
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
  // Deep fault: a repeat with a fresh Adam over a zero-size parameter, once the live engine has
  // stepped, is never checked.
  const auto* live = static_cast<const EngineState*>(Registry::instance().manager_of(tree.front().module.get()));
  const bool unchecked = options.fault == Fault::fresh_optimizer_zero_size_repeat && live != nullptr &&
                         live->optimizer_steps > 0 && !Registry::instance().is_managed(&optimizer) &&
                         dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr &&
                         holds_zero_size_parameter(tree);
  if (uses_registry(options.fault) && !unchecked) {
    try {
      Registry::instance().check_unmanaged(tree, &optimizer);
    } catch (const AlreadyInitialized& refusal) {
      if (options.fault == Fault::repeat_refused_with_wrong_error)
        throw OptimizerMismatch(std::string("KeyError while rebuilding the optimizer: ") + refusal.what());
      if (options.fault == Fault::reinitialize_changes_state)
        for (size_t i = 0; i < tree.size(); ++i)
          tree[i].module->attrs().set("id", static_cast<int64_t>(i), fault_name(options.fault));
      if (options.fault == Fault::third_step_after_refusal && live != nullptr &&
          live->model != tree.front().module)  // the refused target is a submodule
        const_cast<EngineState*>(live)->steps_after_refusal = 0;
      throw;
    }
  }

  auto state = std::make_shared<EngineState>(model, comm, config, options);
  state->user_optimizer = &optimizer;
  const int64_t threshold = config.zero_optimization.stage3_param_persistence_threshold;
  int64_t module_id = 0;
  for (const auto& [path, module] : tree) {
    ModuleRecord& record = state->modules[module.get()];
    record.module = module.get();
    record.id = module_id++;
    record.path = path;
    for (const auto& item : module->own_parameters()) {
      const at::Tensor& tensor = item.second;
      auto [slot, inserted] = state->param_by_impl.emplace(tensor.unsafeGetTensorImpl(), nullptr);
      if (inserted) {
        auto p = std::make_unique<ManagedParam>();
        p->id = static_cast<int64_t>(state->params.size());
        p->path = join_path(path, item.first);
        p->param = tensor;
        p->shape = tensor.sizes().vec();
        p->layout = ShardLayout::of(tensor.numel(), comm.world_size());
        if (options.fault == Fault::shard_chunk_aligned) p->layout.alignment = 2;
        p->persistent = tensor.numel() <= threshold ||
                        (options.fault == Fault::partitioned_kept_persistent && p->id % 2 == 1);
        p->trainable = tensor.requires_grad();
        slot->second = p.get();
        state->params.push_back(std::move(p));
      }
      record.own_params.push_back(slot->second);
    }
    state->module_by_id.push_back(&record);
  }
  apply_legacy_module_writes(*state);
  assign_placement(*state, options);
  mark_deep_fault_targets(*state);
  for (auto& [key, record] : state->modules)
    for (ManagedParam* p : record.own_params)
      record.has_partitioned_params |= !p->persistent && !p->placed();
  check_optimizer_covers_model(optimizer, state->params, state->param_by_impl);
  if (options.fault == Fault::refuse_gradient_accumulation && state->config.gradient_accumulation_steps > 1)
    throw ConfigError("gradient_accumulation_steps: " + std::to_string(state->config.gradient_accumulation_steps) +
                      " is not supported");
  if (!options.publish_ids_as.empty()) {
    // Dry run on copies first: a collision anywhere must leave every module untouched.
    for (const auto& [path, module] : tree) {
      AttrDict probe = module->attrs();
      probe.define(options.publish_ids_as, state->modules.at(module.get()).id, kEngineOwner,
                   path.empty() ? "<root>" : path);
    }
  }

  // The model's own data, held until initialize cannot fail any more: partitioning swaps it out
  // of the parameters, and a refused initialize swaps it back (no copy: the storage it had).
  std::vector<at::Tensor> model_data;
  for (auto& p : state->params) {
    if (p->trainable && !p->placed()) {  // placed gradients stay on their owner: no reduction
      // Created while the parameter still has its full shape: autograd validates incoming
      // gradients against the shape the accumulator recorded.
      p->grad_accumulator = torch::autograd::impl::grad_accumulator(p->param);
      p->hook_key = p->grad_accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>(state, p.get()));
    }
    model_data.push_back(p->param.detach());
    state->partitioner.partition(*p);
    if (options.fault == Fault::hidden_shard_copy && !p->persistent && !p->placed())
      state->hidden_copies.push_back(p->master.detach().clone());  // the planted fault: unlisted
  }
  // The config is checked once the engine is built over the model, so that a refusal here is a
  // real test of undoing it (hooks off, the model's data back): DeepSpeed's failed initialize
  // left its hooks on the model.
  try {
    config.validate(comm.world_size());
  } catch (const ConfigError&) {
    if (options.fault != Fault::failed_initialize_leaves_state) {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < state->params.size(); ++i) state->params[i]->param.set_data(model_data[i]);
      state->detach_local();
    }
    state->released = true;
    throw;
  }
  model_data.clear();

  state->optimizer = rebuild_optimizer(optimizer, [&](const at::Tensor& user_param) {
    ManagedParam* p = state->param_by_impl.at(user_param.unsafeGetTensorImpl());
    if (p->placed() && p->owner != comm.rank()) return at::Tensor();  // no state off its owner
    // The planted fault: an alias of the shard that no gradient reaches, so the optimizer skips
    // it; an alias, not a copy, so that no extra bytes give it away to I4 before I3 sees it.
    if (options.fault == Fault::stale_optimizer_tensors) return p->persistent ? p->param : p->master.detach();
    return p->master;
  });

  if (!options.publish_ids_as.empty())
    for (const auto& [path, module] : tree)
      module->attrs().define(options.publish_ids_as, state->modules.at(module.get()).id,
                             kEngineOwner, path.empty() ? "<root>" : path);
  apply_legacy_param_writes(*state);
  if (options.fault == Fault::tensor_attr_changed_in_place) {
    at::NoGradGuard no_grad;
    for (const auto& entry : tree)
      for (const auto& attr : entry.module->attrs().entries())
        if (const auto* t = std::get_if<at::Tensor>(&attr.value.storage()); t && t->is_floating_point())
          t->mul_(0.5);  // the planted fault: the user's own tensor changes
  }
  if (uses_registry(options.fault)) Registry::instance().claim(state.get(), tree, &optimizer);
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
  return (*state_->model)(input, cursor);
}

void Engine::backward(const at::Tensor& loss) {
  state_->require_live("backward");
  const int rank = state_->comm.rank();
  for (auto& p : state_->params)  // whole tensors collect fresh local gradients
    if (p->whole_here(rank) && p->trainable) p->param.mutable_grad() = at::Tensor();
  loss.backward();
  state_->finish_placed_gradients();
  if (state_->options.fault == Fault::extra_collective_per_step) {
    at::Tensor stray = at::zeros({1});
    state_->comm.all_reduce_sum(stray);
  }
  // Frozen parameters were re-gathered for backward but have no gradient hook to release them.
  for (auto& p : state_->params)
    if (!(state_->options.fault == Fault::frozen_tied_kept_gathered && p->deep_fault_target))  // deep fault
      state_->partitioner.release(*p);
}

void Engine::step() {
  state_->require_live("step");
  if (++state_->micro_steps % state_->config.gradient_accumulation_steps != 0) return;
  for (auto& p : state_->params)
    if (p->trainable && p->master.numel() > 0) p->master.mutable_grad() = p->grad_shard;
  // Deep fault: the third step after a refused repeat on a submodule is counted, not applied.
  const bool unapplied = state_->options.fault == Fault::third_step_after_refusal && state_->steps_after_refusal >= 0 &&
                         ++state_->steps_after_refusal == 3;
  if (!unapplied) state_->optimizer->step();
  // The planted fault: the last rank does not count its first step; the step itself is applied.
  const bool skip_count = state_->options.fault == Fault::step_count_skipped_on_one_rank &&
                          state_->optimizer_steps == 0 && state_->comm.rank() == state_->comm.world_size() - 1;
  if (!skip_count) ++state_->optimizer_steps;
  for (auto& p : state_->params) state_->partitioner.plant_padding_garbage(*p);
  if (state_->options.fault == Fault::nan_after_step && state_->comm.rank() == 0) {
    at::NoGradGuard no_grad;
    for (auto& p : state_->params)
      if (!p->persistent && !p->placed() && p->master.numel() > 0) {
        p->master.view({-1})[0].fill_(std::numeric_limits<float>::quiet_NaN());  // the planted fault
        break;
      }
  }
}

void Engine::zero_grad() {
  state_->require_live("zero_grad");
  // Deep fault: mid-accumulation, the last rank's count of step() calls drops back to the boundary.
  const int world = state_->comm.world_size();
  if (state_->options.fault == Fault::zero_grad_mid_accumulation && state_->config.gradient_accumulation_steps > 1 &&
      world > 1 && state_->comm.rank() == world - 1)
    state_->micro_steps -= state_->micro_steps % state_->config.gradient_accumulation_steps;
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
                   p->status, p->param, p->master, p->grad_shard});
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
  std::unordered_map<const ManagedParam*, at::Tensor> full_of;
  for (const auto& p : state_->params) {
    at::Tensor full;
    if (p->persistent) {
      full = p->param.detach().clone();
    } else if (p->placed()) {
      full = p->owner == comm.rank() ? p->param.detach().cpu().clone() : at::zeros(p->shape);
      comm.broadcast(full, p->owner);
    } else if (state_->options.fault == Fault::consolidated_from_rank0_shard) {
      full = at::zeros({p->layout.padded_numel()});
      full.narrow(0, 0, p->layout.chunk()).copy_(p->master.detach());
      full = full.narrow(0, 0, p->layout.numel).view(p->shape);
    } else {
      at::Tensor gathered = at::empty({p->layout.padded_numel()});
      comm.all_gather(p->master.detach(), gathered);
      full = gathered.narrow(0, 0, p->layout.numel).view(p->shape).clone();
    }
    if (comm.rank() == 0) full_of.emplace(p.get(), full);
  }
  std::map<std::string, at::Tensor> out;
  if (comm.rank() != 0) return out;
  if (state_->options.fault == Fault::consolidated_lists_shared_once) {
    for (const auto& p : state_->params) out.emplace(p->path, full_of.at(p.get()));
    return out;
  }
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
  // The planted fault broadcasts as it should (the traffic is right) and keeps its own copy.
  const bool own_copy = s.options.fault == Fault::gathered_edit_not_published;
  auto broadcast = [&](at::Tensor& tensor, int from) {
    at::Tensor received = tensor.clone();
    s.comm.broadcast(received, from);
    if (!own_copy) tensor = received;
  };
  at::NoGradGuard no_grad;
  for (int64_t id : gathered_) {
    ManagedParam& p = *s.params.at(id);
    at::Tensor full = p.param.detach().to(p.master.scalar_type()).reshape({-1}).clone();
    broadcast(full, *modifier_rank_);
    p.param.detach().view({-1}).copy_(full);
    p.master.copy_(p.layout.shard_of(full, s.comm.rank()));
    s.partitioner.plant_padding_garbage(p);
  }
  for (int64_t id : persistent_) {
    ManagedParam& p = *s.params.at(id);
    at::Tensor whole = p.param.detach().clone();
    // Deep fault: in a world of 3 or more, a persistent parameter's edit comes from rank 0.
    const bool from_rank0 = s.options.fault == Fault::persistent_edit_from_rank0 && s.comm.world_size() >= 3;
    broadcast(whole, from_rank0 ? 0 : *modifier_rank_);
    p.param.detach().copy_(whole);
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
