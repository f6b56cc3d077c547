// The engine's own tables and schedule steps, shared by engine.cc (the public API),
// schedule.cc (gather/release around forward and backward), routing.cc (calls to placed
// modules) and checkpoint.cc. Not part of the public surface.
#pragma once

#include "engine/engine.h"
#include "engine/fetch_coordinator.h"
#include "engine/partitioner.h"

#include <c10/core/TensorImpl.h>

#include <memory>
#include <unordered_map>
#include <vector>

namespace zero3 {

class MoE;

struct ModuleRecord {
  Module* module = nullptr;
  int64_t id = 0;
  std::string path;
  std::vector<ManagedParam*> own_params;  // this module's direct parameters
  bool has_partitioned_params = false;
  int owner = -1;                  // >= 0: a placement root, placed on this rank
  bool inside_placed = false;      // a descendant of a placement root
};

// What a call to a placed module served on this rank, kept for its backward.
struct ServedCall {
  int sender = 0;
  int64_t module_id = 0;  // the placed module it ran
  at::Tensor input;   // the received input, a leaf that collects its gradient
  at::Tensor output;  // computed here, connected to the expert's parameters
};

struct EngineState final : ForwardInterceptor, std::enable_shared_from_this<EngineState> {
  EngineState(std::shared_ptr<Module> model, Comm& comm, Config config, EngineOptions options);

  // ForwardInterceptor: gather own parameters -> forward -> release, and arm the re-gather
  // that runs just before this module's backward; calls to placed modules are routed.
  at::Tensor around_forward(Module& module, const at::Tensor& input, const Route& route,
                            const std::function<at::Tensor(const at::Tensor&)>& body) override;

  // Called from autograd just before `module`'s backward runs.
  void gather_for_backward(const Module* module);
  // Called from the gradient accumulator hook once p's full gradient has accumulated.
  void on_gradient_ready(ManagedParam& p);
  // Averages the gradients placed parameters collected on their owner during backward.
  void finish_placed_gradients();
  // Removes autograd hooks, published ids and the registration; never communicates (safe
  // during unwinding).
  void detach_local();
  void require_live(const char* op) const;

  // routing.cc: every rank meets here when an MoE picks its expert, and when a placed module is
  // called (the input travels to the owner, the output comes back).
  void check_moe_choices(MoE& moe, const ModuleRecord& record, const Route& route);
  at::Tensor call_placed(Module& module, const ModuleRecord& record, const at::Tensor& input,
                         const std::function<at::Tensor(const at::Tensor&)>& body);
  at::Tensor route_forward(const ModuleRecord& record, const at::Tensor& input,
                           std::vector<ServedCall>* served, int64_t* max_rows);
  at::Tensor route_backward(const ModuleRecord& record, const at::Tensor& grad_output,
                            const std::vector<ServedCall>& served, int64_t max_rows);

  std::shared_ptr<Module> model;
  Comm& comm;
  Config config;
  EngineOptions options;
  FaultSeams faults;  // where a planted fault gets in; none for the reference engine
  Partitioner partitioner;
  FetchCoordinator fetcher;  // the forward's fetch, prefetch and release (fetch_coordinator.h)
  std::vector<std::unique_ptr<ManagedParam>> params;            // in pre-order of first appearance
  std::unordered_map<const c10::TensorImpl*, ManagedParam*> param_by_impl;
  std::unordered_map<const Module*, ModuleRecord> modules;
  std::vector<ModuleRecord*> module_by_id;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  const void* user_optimizer = nullptr;
  int64_t micro_steps = 0;
  int64_t optimizer_steps = 0;  // steps the optimizer applied (DeepSpeed's global_steps)
  int64_t skipped_steps = 0;    // boundaries skipped for an overflow
  double global_grad_norm = 0.0;
  LossScaler scaler;
  int64_t steps_after_refusal = -1;  // third-step-after-refusal's count of steps since a refusal
  bool released = false;
  bool computing_placed = false;  // the owner is running a placed module for a sender
  // Gradients of placed parameters collected on their owner during a backward, per sender rank.
  // Summed per sender in arrival order and then over senders in rank order, they come out
  // bit-identical to dense training over all micro-batches, even when a module runs twice.
  std::unordered_map<ManagedParam*, std::vector<at::Tensor>> placed_grads;
  // hidden-shard-copy's second copy of every shard: listed nowhere.
  std::vector<at::Tensor> hidden_copies;
};

}  // namespace zero3
