#include "engine/engine.h"

#include "engine/errors.h"
#include "engine/internal/engine_state.h"
#include "engine/legacy_mode.h"
#include "engine/optimizer_rebuild.h"
#include "engine/registry.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <exception>
#include <functional>
#include <unordered_set>

namespace zero3 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the pre-backward function needs to find its module's parameters. Weak: a graph may
// outlive its engine, and then there is nothing left to gather.
struct BackwardGatherHandle : torch::CustomClassHolder {
  std::weak_ptr<EngineState> state;
  const Module* module = nullptr;
};

// Identity on a module's output whose backward runs just before the module's own backward:
// the natural place to re-gather the parameters that backward needs.
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, c10::IValue handle) {
    ctx->saved_data["handle"] = std::move(handle);
    return output.view_as(output);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = ctx->saved_data["handle"].toCapsule();
    auto* handle = static_cast<BackwardGatherHandle*>(holder.get());
    if (auto state = handle->state.lock()) state->gather_for_backward(handle->module);
    return {grads.at(0), at::Tensor()};
  }
};

// Runs after a parameter's gradient accumulator has written the full gradient.
class GradientReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(std::weak_ptr<EngineState> state, ManagedParam* param)
      : state_(std::move(state)), param_(param) {}

  variable_list operator()(const variable_list& outputs, const variable_list&) override {
    if (auto state = state_.lock()) state->on_gradient_ready(*param_);
    return outputs;
  }

 private:
  std::weak_ptr<EngineState> state_;
  ManagedParam* param_;
};

bool uses_registry(Fault fault) {
  return fault != Fault::legacy_0_15_4 && fault != Fault::legacy_ds_id &&
         fault != Fault::accept_repeated_initialize;
}

// Ranks must agree on the route, or they would all-gather different experts' shards into each
// other's parameters. A 20-bit hash keeps the sums exact; a collision only weakens the check.
void check_same_route(Comm& comm, const Route& route) {
  if (comm.world_size() == 1) return;
  int64_t h = static_cast<int64_t>(route.choices().size()) * 1000003;
  for (int64_t c : route.choices()) h = (h * 31 + c + 7) % 1048573;
  at::Tensor sums = at::tensor({h, h * h}, at::kLong);
  comm.all_reduce_sum(sums);
  const int64_t sum = sums[0].item<int64_t>();
  const int64_t sum_sq = sums[1].item<int64_t>();
  if (sum * sum != comm.world_size() * sum_sq)
    throw UsageError("rank " + std::to_string(comm.rank()) +
                     ": ranks passed different routes to forward (experts are partitioned, so "
                     "every rank must route the same way)");
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

// ---- EngineState ------------------------------------------------------------------------------

EngineState::EngineState(std::shared_ptr<Module> model_in, Comm& comm_in, Config config_in,
                         EngineOptions options_in)
    : model(std::move(model_in)),
      comm(comm_in),
      config(std::move(config_in)),
      options(options_in),
      partitioner(comm_in, options_in.fault) {}

at::Tensor EngineState::around_forward(Module& module, const at::Tensor& input,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  auto it = modules.find(&module);
  if (it == modules.end() || released) return body(input);
  ModuleRecord& record = it->second;
  for (ManagedParam* p : record.own_params) partitioner.gather(*p);
  at::Tensor output;
  try {
    output = body(input);
  } catch (...) {
    for (ManagedParam* p : record.own_params) partitioner.release(*p);
    throw;
  }
  if (options.fault != Fault::skip_release_after_forward)
    for (ManagedParam* p : record.own_params) partitioner.release(*p);
  if (record.has_partitioned_params && at::GradMode::is_enabled() && output.requires_grad()) {
    auto handle = c10::make_intrusive<BackwardGatherHandle>();
    handle->state = weak_from_this();
    handle->module = &module;
    output = GatherBeforeBackward::apply(output, c10::IValue::make_capsule(std::move(handle)));
  }
  return output;
}

void EngineState::gather_for_backward(const Module* module) {
  auto it = modules.find(module);
  if (it == modules.end() || released) return;
  for (ManagedParam* p : it->second.own_params) partitioner.gather(*p);
}

void EngineState::on_gradient_ready(ManagedParam& p) {
  if (released) return;
  partitioner.reduce_gradient(p);
}

void EngineState::detach_local() {
  if (!options.publish_ids_as.empty()) {
    for (auto& [key, record] : modules) {
      AttrDict& attrs = record.module->attrs();
      if (attrs.has(options.publish_ids_as) && attrs.owner(options.publish_ids_as) == kEngineOwner)
        attrs.del(options.publish_ids_as);
    }
  }
  for (auto& p : params) {
    if (p->grad_accumulator && p->hook_key != 0) p->grad_accumulator->del_post_hook(p->hook_key);
    p->hook_key = 0;
    p->grad_accumulator.reset();
  }
  Registry::instance().release(this);
}

void EngineState::require_live(const char* op) const {
  if (released)
    throw UsageError(std::string(op) + " on a released engine (rank " +
                     std::to_string(comm.rank()) + ")");
}

// ---- initialize -------------------------------------------------------------------------------

std::unique_ptr<Engine> initialize(std::shared_ptr<Module> model, torch::optim::Optimizer& optimizer,
                                   const Config& config, Comm& comm, EngineOptions options) {
  if (!model) throw UsageError("initialize: the model is null");
  config.check_world_size(comm.world_size());
  const std::vector<ModuleAtPath> tree = unique_modules(model);
  if (uses_registry(options.fault)) {
    try {
      Registry::instance().check_unmanaged(tree, &optimizer);
    } catch (const AlreadyInitialized&) {
      if (options.fault == Fault::reinitialize_changes_state)
        for (size_t i = 0; i < tree.size(); ++i)
          tree[i].module->attrs().set("id", static_cast<int64_t>(i), fault_name(options.fault));
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
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const at::Tensor& tensor = item.value();
      auto [slot, inserted] = state->param_by_impl.emplace(tensor.unsafeGetTensorImpl(), nullptr);
      if (inserted) {
        auto p = std::make_unique<ManagedParam>();
        p->id = static_cast<int64_t>(state->params.size());
        p->path = join_path(path, item.key());
        p->param = tensor;
        p->shape = tensor.sizes().vec();
        p->layout = ShardLayout::of(tensor.numel(), comm.world_size());
        p->persistent = tensor.numel() <= threshold;
        p->trainable = tensor.requires_grad();
        slot->second = p.get();
        state->params.push_back(std::move(p));
      }
      record.own_params.push_back(slot->second);
      record.has_partitioned_params |= !slot->second->persistent;
    }
  }
  check_optimizer_covers_model(optimizer, state->params, state->param_by_impl);
  if (!options.publish_ids_as.empty()) {
    // Dry run on copies first: a collision anywhere must leave every module untouched.
    for (const auto& [path, module] : tree) {
      AttrDict probe = module->attrs();
      probe.define(options.publish_ids_as, state->modules.at(module.get()).id, kEngineOwner,
                   path.empty() ? "<root>" : path);
    }
  }

  for (auto& p : state->params) {
    if (p->trainable) {
      // Created while the parameter still has its full shape: autograd validates incoming
      // gradients against the shape the accumulator recorded.
      p->grad_accumulator = torch::autograd::impl::grad_accumulator(p->param);
      p->hook_key = p->grad_accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>(state, p.get()));
    }
    state->partitioner.partition(*p);
  }

  state->optimizer = rebuild_optimizer(optimizer, [&](const at::Tensor& user_param) {
    ManagedParam* p = state->param_by_impl.at(user_param.unsafeGetTensorImpl());
    if (options.fault == Fault::stale_optimizer_tensors)
      return p->persistent ? p->param : at::zeros({p->layout.chunk()});
    return p->master;
  });

  if (!options.publish_ids_as.empty())
    for (const auto& [path, module] : tree)
      module->attrs().define(options.publish_ids_as, state->modules.at(module.get()).id,
                             kEngineOwner, path.empty() ? "<root>" : path);
  apply_legacy_writes(*state);
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
  check_same_route(state_->comm, route);
  InterceptorScope scope(state_.get());
  Route cursor = route;
  return (*state_->model)(input, cursor);
}

void Engine::backward(const at::Tensor& loss) {
  state_->require_live("backward");
  for (auto& p : state_->params)
    if (p->persistent && p->trainable) p->param.mutable_grad() = at::Tensor();  // fresh local grads
  loss.backward();
  // Frozen parameters were re-gathered for backward but have no gradient hook to release them.
  for (auto& p : state_->params) state_->partitioner.release(*p);
}

void Engine::step() {
  state_->require_live("step");
  if (++state_->micro_steps % state_->config.gradient_accumulation_steps != 0) return;
  for (auto& p : state_->params)
    if (p->trainable) p->master.mutable_grad() = p->grad_shard;
  state_->optimizer->step();
}

void Engine::zero_grad() {
  state_->require_live("zero_grad");
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
    out.push_back({p->id, p->path, p->shape, p->layout, p->persistent, p->trainable, p->status,
                   p->param, p->master, p->grad_shard});
  return out;
}

const Config& Engine::config() const { return state_->config; }
Comm& Engine::comm() { return state_->comm; }
Fault Engine::fault() const { return state_->options.fault; }

torch::optim::Optimizer& Engine::optimizer() {
  state_->require_live("optimizer");
  return *state_->optimizer;
}

int64_t Engine::measured_state_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const auto& p : state_->params) {
    if (!p->persistent) {
      add(p->param);
      add(p->param.grad());
    }
    add(p->master);
    add(p->grad_shard);
  }
  if (state_->optimizer) bytes += state_numel(*state_->optimizer) * 4;
  return bytes;
}

int64_t Engine::partitioned_padded_elements() const {
  int64_t total = 0;
  for (const auto& p : state_->params)
    if (!p->persistent) total += p->layout.padded_numel();
  return total;
}

std::map<std::string, at::Tensor> Engine::consolidated_state_dict() {
  state_->require_live("consolidated_state_dict");
  std::map<std::string, at::Tensor> out;
  Comm& comm = state_->comm;
  for (const auto& p : state_->params) {
    at::Tensor full;
    if (p->persistent) {
      full = p->param.detach().clone();
    } else if (state_->options.fault == Fault::consolidated_from_rank0_shard) {
      full = at::zeros({p->layout.padded_numel()});
      full.narrow(0, 0, p->layout.chunk()).copy_(p->master.detach());
      full = full.narrow(0, 0, p->layout.numel).view(p->shape);
    } else {
      at::Tensor gathered = at::empty({p->layout.padded_numel()});
      comm.all_gather(p->master.detach(), gathered);
      full = gathered.narrow(0, 0, p->layout.numel).view(p->shape).clone();
    }
    if (comm.rank() == 0) out.emplace(p->path, full);
  }
  return out;
}

// ---- GatheredParameters -----------------------------------------------------------------------

GatheredParameters::GatheredParameters(Engine& engine, const Module& module)
    : state_(engine.state_) {
  state_->require_live("GatheredParameters");
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& t : module.parameters(/*recurse=*/true)) {
    auto it = state_->param_by_impl.find(t.unsafeGetTensorImpl());
    if (it == state_->param_by_impl.end() || !seen.insert(it->first).second) continue;
    ManagedParam& p = *it->second;
    if (p.persistent || p.status == ParamStatus::Available) continue;
    state_->partitioner.gather(p);
    gathered_.push_back(p.id);
  }
}

GatheredParameters::~GatheredParameters() {
  if (state_->released) return;
  for (int64_t id : gathered_) state_->partitioner.release(*state_->params.at(id));
}

}  // namespace zero3
