// The engine's own tables and schedule steps, shared by engine.cc, checkpoint.cc and
// gathered_parameters.cc. Not part of the public surface.
#pragma once

#include "engine/engine.h"
#include "engine/partitioner.h"

#include <c10/core/TensorImpl.h>

#include <memory>
#include <unordered_map>
#include <vector>

namespace zero3 {

struct ModuleRecord {
  Module* module = nullptr;
  int64_t id = 0;
  std::string path;
  std::vector<ManagedParam*> own_params;      // this module's direct parameters
  bool has_partitioned_params = false;
};

struct EngineState final : ForwardInterceptor, std::enable_shared_from_this<EngineState> {
  EngineState(std::shared_ptr<Module> model, Comm& comm, Config config, EngineOptions options);

  // ForwardInterceptor: gather own parameters -> forward -> release, and arm the re-gather
  // that runs just before this module's backward.
  at::Tensor around_forward(Module& module, const at::Tensor& input,
                            const std::function<at::Tensor(const at::Tensor&)>& body) override;

  // Called from autograd just before `module`'s backward runs.
  void gather_for_backward(const Module* module);
  // Called from the gradient accumulator hook once p's full gradient has accumulated.
  void on_gradient_ready(ManagedParam& p);
  // Removes autograd hooks and un-registers; never communicates (safe during unwinding).
  void detach_local();
  void require_live(const char* op) const;

  std::shared_ptr<Module> model;
  Comm& comm;
  Config config;
  EngineOptions options;
  Partitioner partitioner;
  std::vector<std::unique_ptr<ManagedParam>> params;            // in pre-order of first appearance
  std::unordered_map<const c10::TensorImpl*, ManagedParam*> param_by_impl;
  std::unordered_map<const Module*, ModuleRecord> modules;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  const void* user_optimizer = nullptr;
  int64_t micro_steps = 0;
  bool released = false;
};

}  // namespace zero3
