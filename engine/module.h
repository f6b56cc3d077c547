// zero3::Module: a torch::nn::Module with what LibTorch's C++ modules lack for ZeRO-3.
//
//  - attrs(): the user's dynamic attributes (Python's `module.id = 3`), and param_attrs(name)
//    for attributes on a parameter (Python lets users set those too). Engines keep their own
//    state in side tables keyed by object identity; they never need to write here.
//  - An explicit call path, `module(x, route)`: LibTorch has no forward hooks, so every call goes
//    through the ForwardInterceptor installed on the calling thread (the engine), which gathers
//    parameters before `forward` and releases them after. Without an interceptor it is a plain call.
//  - Route: the expert choices that MoE layers consume, in call order.
//
// Thread-safety: a module tree belongs to one rank thread.
#pragma once

#include "engine/attr_dict.h"

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero3 {

class Module;

// The expert index each MoE layer picks, consumed in the order layers are called.
class Route {
 public:
  Route() = default;
  explicit Route(std::vector<int64_t> choices) : choices_(std::move(choices)) {}
  // A route that never runs out: choices repeat, an empty route always picks 0, and each layer
  // takes a choice modulo its expert count. Generated and shrunk scenarios use it, so any
  // list of choices is a valid route.
  static Route cyclic(std::vector<int64_t> choices);

  // Returns the next choice for a layer of `count` experts and moves on.
  // Throws UsageError naming `where` when a strict route is exhausted or out of range.
  int64_t next(const std::string& where, int64_t count);
  // Returns what next() would return, without moving on.
  int64_t peek(const std::string& where, int64_t count) const;
  const std::vector<int64_t>& choices() const { return choices_; }

 private:
  std::vector<int64_t> choices_;
  size_t next_ = 0;
  bool cyclic_ = false;
};

// What an engine plugs into the call path. `body` runs the module's own forward.
class ForwardInterceptor {
 public:
  virtual ~ForwardInterceptor() = default;
  // `route` is the call's route (MoE layers read their choice from it; do not consume it).
  virtual at::Tensor around_forward(Module& module, const at::Tensor& input, const Route& route,
                                    const std::function<at::Tensor(const at::Tensor&)>& body) = 0;
};

// Installs `interceptor` for module calls made on this thread while the scope lives.
// The interceptor in force on this thread. A scheduler that runs several ranks on one thread
// (harness/world/fiber_world.h) switches it with the rank, as it switches LibTorch's thread-local state.
ForwardInterceptor* current_forward_interceptor();
void set_current_forward_interceptor(ForwardInterceptor* interceptor);

class InterceptorScope {
 public:
  explicit InterceptorScope(ForwardInterceptor* interceptor);
  ~InterceptorScope();
  InterceptorScope(const InterceptorScope&) = delete;
  InterceptorScope& operator=(const InterceptorScope&) = delete;

 private:
  ForwardInterceptor* previous_;
};

class Module : public torch::nn::Module {
 public:
  explicit Module(std::string kind);

  // The kind name ("Linear", "Sequential", ...), also torch::nn::Module::name().
  const std::string& kind() const { return kind_; }

  // Calls this module through the thread's interceptor (if any).
  at::Tensor operator()(const at::Tensor& input, Route& route);
  at::Tensor operator()(const at::Tensor& input);

  AttrDict& attrs() { return attrs_; }
  const AttrDict& attrs() const { return attrs_; }
  // Returns the attribute dictionary of this module's own parameter `name`.
  // Throws AttributeError when the module has no such parameter.
  AttrDict& param_attrs(const std::string& name);
  const AttrDict* find_param_attrs(const std::string& name) const;

  using NamedChild = std::pair<std::string, std::shared_ptr<Module>>;
  using NamedParameter = std::pair<std::string, at::Tensor>;
  // Returns the direct children that are zero3 modules, in registration order (a shared child
  // registered twice appears twice). Kept as they are registered: LibTorch's named_children()
  // copies its whole dictionary on every call, and trees are walked after every operation.
  const std::vector<NamedChild>& named_zero3_children() const { return zero3_children_; }
  // Returns this module's own parameters in registration order, as named_parameters(false)
  // lists them (the same tensors), without copying a dictionary.
  const std::vector<NamedParameter>& own_parameters() const { return own_parameters_; }
  // Whether a child that is not a zero3::Module was registered: such a tree is walked through
  // LibTorch's own lists (unique_parameters).
  bool has_foreign_children() const { return foreign_children_; }

  // LibTorch's registration, recorded in the lists above as well. Register through these (the
  // zero3 type); a registration through a torch::nn::Module reference bypasses the lists.
  template <class ModuleType>
  std::shared_ptr<ModuleType> register_module(std::string name, std::shared_ptr<ModuleType> module) {
    std::shared_ptr<ModuleType> held = torch::nn::Module::register_module(name, std::move(module));
    if (auto child = std::dynamic_pointer_cast<Module>(held)) zero3_children_.emplace_back(std::move(name), std::move(child));
    else foreign_children_ = true;
    return held;
  }
  at::Tensor& register_parameter(std::string name, at::Tensor tensor, bool requires_grad = true);

 protected:
  virtual at::Tensor forward(const at::Tensor& input, Route& route) = 0;

 private:
  std::string kind_;
  AttrDict attrs_;
  std::map<std::string, AttrDict> param_attrs_;
  std::vector<NamedChild> zero3_children_;
  std::vector<NamedParameter> own_parameters_;
  bool foreign_children_ = false;
};

// Returns every parameter of `root`'s tree once, in pre-order of first appearance. LibTorch's
// parameters() lists a shared (tied) parameter once per place; optimizers must see it once.
std::vector<at::Tensor> unique_parameters(const Module& root);

// One module of a tree with the path where it first appears in pre-order ("" is the root,
// "layers.2.experts.0" a descendant). Shared modules are listed once.
struct ModuleAtPath {
  std::string path;
  std::shared_ptr<Module> module;
};
// Returns every module of the tree once, in pre-order. Requires: `root` is held by a shared_ptr.
std::vector<ModuleAtPath> unique_modules(const std::shared_ptr<Module>& root);

}  // namespace zero3
