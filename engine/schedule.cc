// The ZeRO-3 schedule around each module call: gather -> forward -> release, re-gather before
// the module's backward, reduce-scatter once a gradient has accumulated.
#include "engine/errors.h"
#include "engine/internal/engine_state.h"
#include "engine/layers.h"
#include "engine/registry.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

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

}  // namespace

EngineState::EngineState(std::shared_ptr<Module> model_in, Comm& comm_in, Config config_in,
                         EngineOptions options_in)
    : model(std::move(model_in)),
      comm(comm_in),
      config(std::move(config_in)),
      options(std::move(options_in)),
      faults(options.fault),
      partitioner(comm_in, faults,
                  comm_in.options().device.value_or(rank_device(comm_in.rank(), options.ranks_per_device)),
                  config.zero_optimization.reduce_bucket_size, options.precision),
      fetcher(partitioner, faults,
              FetchKnobs{config.zero_optimization.stage3_prefetch_bucket_size,
                         config.zero_optimization.stage3_max_live_parameters,
                         config.zero_optimization.stage3_max_reuse_distance}) {}

at::Tensor EngineState::around_forward(Module& module, const at::Tensor& input, const Route& route,
                                       const std::function<at::Tensor(const at::Tensor&)>& body) {
  auto it = modules.find(&module);
  // Inside a placed module everything is whole on this rank (its owner): a plain call.
  if (it == modules.end() || released || computing_placed) return body(input);
  ModuleRecord& record = it->second;
  if (record.owner >= 0) return call_placed(module, record, input, body);
  if (auto* moe = dynamic_cast<MoE*>(&module)) check_moe_choices(*moe, record, route);

  fetcher.fetch(&module, record.own_params);  // and the prefetch for the modules after it
  at::Tensor output;
  try {
    output = body(input);
  } catch (...) {
    fetcher.release(record.own_params);
    throw;
  }
  if (!faults.keeps_gathered_after_forward()) fetcher.release(record.own_params);
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
  partitioner.fetch(it->second.own_params);
}

void EngineState::on_gradient_ready(ManagedParam& p) {
  if (released) return;
  partitioner.reduce_gradient(p);
}

void EngineState::finish_placed_gradients() {
  at::NoGradGuard no_grad;
  for (auto& [p, per_sender] : placed_grads) {
    at::Tensor full_grad;
    for (const at::Tensor& g : per_sender)  // senders in rank order: ((g0 + g1) + g2) ...
      if (g.defined()) full_grad = full_grad.defined() ? full_grad.add_(g) : g.clone();
    if (full_grad.defined()) p->param.mutable_grad() = full_grad;
  }
  placed_grads.clear();
  for (auto& p : params) {
    if (!p->placed() || p->owner != comm.rank()) continue;
    at::Tensor full_grad = p->param.grad();
    if (!full_grad.defined()) continue;
    // The owner collected every sender's contribution in rank order; averaging over the world
    // (not over the senders) is what dense training over all micro-batches does.
    at::Tensor averaged = full_grad.div(comm.world_size());
    p->grad_shard = p->grad_shard.defined() ? p->grad_shard.add_(averaged) : averaged;
    p->param.mutable_grad() = at::Tensor();
  }
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

}  // namespace zero3
