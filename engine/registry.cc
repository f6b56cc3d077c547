#include "engine/registry.h"

#include "engine/errors.h"

#include <sstream>

namespace zero3 {
namespace {

std::string engine_label(const void* engine) {
  std::ostringstream out;
  out << "engine@" << engine;
  return out.str();
}

}  // namespace

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::check_unmanaged(const std::vector<ModuleAtPath>& modules,
                               const void* optimizer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [path, module] : modules) {
    auto it = owner_of_.find(module.get());
    if (it != owner_of_.end())
      throw AlreadyInitialized(
          (path.empty() ? std::string("the model") : "module '" + path + "'") + " (" +
          module->kind() + ") is already managed by " + engine_label(it->second) +
          "; release that engine before initializing again");
  }
  auto it = owner_of_.find(optimizer);
  if (it != owner_of_.end())
    throw AlreadyInitialized("the optimizer is already managed by " + engine_label(it->second) +
                             "; build a fresh optimizer or release that engine first");
}

void Registry::claim(const void* engine, const std::vector<ModuleAtPath>& modules,
                     const void* optimizer) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : modules) owner_of_[entry.module.get()] = engine;
  owner_of_[optimizer] = engine;
}

void Registry::release(const void* engine) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = owner_of_.begin(); it != owner_of_.end();) {
    if (it->second == engine) it = owner_of_.erase(it);
    else ++it;
  }
}

bool Registry::is_managed(const void* object) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return owner_of_.count(object) != 0;
}

const void* Registry::manager_of(const void* object) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = owner_of_.find(object);
  return it == owner_of_.end() ? nullptr : it->second;
}

}  // namespace zero3
