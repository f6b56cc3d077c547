// Registry: which modules and optimizers a live engine manages, process-wide.
//
// One of the three fixes: initialize on a model, on any module of a managed model (or a tree
// containing one), or with a managed optimizer is refused with AlreadyInitialized before
// anything is touched. An engine un-registers when released or destroyed.
//
// Thread-safety: all members are safe to call from any rank thread.
#pragma once

#include "engine/module.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zero3 {

class Registry {
 public:
  static Registry& instance();

  // Throws AlreadyInitialized naming the first managed module (by its path in the new tree and
  // the engine that holds it) or the optimizer.
  void check_unmanaged(const std::vector<ModuleAtPath>& modules, const void* optimizer) const;
  // Records that `engine` manages these objects.
  void claim(const void* engine, const std::vector<ModuleAtPath>& modules, const void* optimizer);
  // Forgets everything `engine` claimed. No-op when it claimed nothing.
  void release(const void* engine);
  // Returns true when a live engine manages `object` (a module or an optimizer).
  bool is_managed(const void* object) const;
  // Returns the engine that manages `object`, or nullptr.
  const void* manager_of(const void* object) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, const void*> owner_of_;  // managed object -> engine
};

}  // namespace zero3
