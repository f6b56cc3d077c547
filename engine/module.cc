#include "engine/module.h"

#include "engine/errors.h"

#include <algorithm>
#include <unordered_set>

namespace zero3 {
namespace {

thread_local ForwardInterceptor* current_interceptor = nullptr;

void visit_unique(const std::string& path, const std::shared_ptr<Module>& module,
                  std::unordered_set<const Module*>& seen, std::vector<ModuleAtPath>& out) {
  if (!seen.insert(module.get()).second) return;
  out.push_back({path, module});
  for (const auto& [name, child] : module->named_zero3_children())
    visit_unique(path.empty() ? name : path + "." + name, child, seen, out);
}

}  // namespace

Route Route::cyclic(std::vector<int64_t> choices) {
  Route route(std::move(choices));
  route.cyclic_ = true;
  return route;
}

int64_t Route::peek(const std::string& where, int64_t count) const {
  if (cyclic_) {
    if (choices_.empty() || count <= 0) return 0;
    const int64_t c = choices_[next_ % choices_.size()];
    return ((c % count) + count) % count;
  }
  if (next_ >= choices_.size())
    throw UsageError(where + ": the route has no expert choice left (it holds " +
                     std::to_string(choices_.size()) + ")");
  const int64_t c = choices_[next_];
  if (c < 0 || c >= count)
    throw UsageError(where + ": expert index " + std::to_string(c) + " is outside [0, " +
                     std::to_string(count) + ")");
  return c;
}

int64_t Route::next(const std::string& where, int64_t count) {
  const int64_t choice = peek(where, count);
  ++next_;
  return choice;
}

ForwardInterceptor* current_forward_interceptor() { return current_interceptor; }
void set_current_forward_interceptor(ForwardInterceptor* interceptor) { current_interceptor = interceptor; }

InterceptorScope::InterceptorScope(ForwardInterceptor* interceptor)
    : previous_(current_interceptor) {
  current_interceptor = interceptor;
}

InterceptorScope::~InterceptorScope() { current_interceptor = previous_; }

Module::Module(std::string kind) : torch::nn::Module(kind), kind_(std::move(kind)) {}

at::Tensor Module::operator()(const at::Tensor& input, Route& route) {
  auto body = [&](const at::Tensor& x) { return forward(x, route); };
  if (current_interceptor == nullptr) return body(input);
  return current_interceptor->around_forward(*this, input, route, body);
}

at::Tensor Module::operator()(const at::Tensor& input) {
  Route empty;
  return (*this)(input, empty);
}

AttrDict& Module::param_attrs(const std::string& name) {
  const bool has = std::any_of(own_parameters_.begin(), own_parameters_.end(), [&](const auto& p) { return p.first == name; });
  if (!has && named_parameters(/*recurse=*/false).find(name) == nullptr)
    throw AttributeError(kind_ + " has no parameter '" + name + "'");
  return param_attrs_[name];
}

const AttrDict* Module::find_param_attrs(const std::string& name) const {
  auto it = param_attrs_.find(name);
  return it == param_attrs_.end() ? nullptr : &it->second;
}

at::Tensor& Module::register_parameter(std::string name, at::Tensor tensor, bool requires_grad) {
  at::Tensor& held = torch::nn::Module::register_parameter(name, std::move(tensor), requires_grad);
  // The same TensorImpl as LibTorch's entry; an undefined one is not a parameter to LibTorch either.
  if (held.defined()) own_parameters_.emplace_back(std::move(name), held);
  return held;
}

namespace {

bool any_foreign_children(const std::vector<ModuleAtPath>& modules) {
  return std::any_of(modules.begin(), modules.end(), [](const auto& m) { return m.module->has_foreign_children(); });
}

}  // namespace

std::vector<at::Tensor> unique_parameters(const Module& root) {
  std::vector<at::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  // Pre-order over distinct modules, each module's own parameters in registration order: the
  // order of LibTorch's parameters(), whose repeats (a shared module's second place) are dropped.
  const auto modules = unique_modules(std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(&root)));
  if (any_foreign_children(modules)) {
    for (const auto& p : root.parameters(/*recurse=*/true))
      if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
    return out;
  }
  for (const auto& entry : modules)
    for (const auto& [name, p] : entry.module->own_parameters())
      if (p.defined() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

std::vector<ModuleAtPath> unique_modules(const std::shared_ptr<Module>& root) {
  std::vector<ModuleAtPath> out;
  std::unordered_set<const Module*> seen;
  visit_unique("", root, seen, out);
  return out;
}

}  // namespace zero3
