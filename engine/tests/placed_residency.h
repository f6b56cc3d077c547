// The placement check the CPU and GPU tests share: every placed (expert) parameter's tensors —
// the parameter, its gradient and each optimizer state tensor — live whole on its owner rank,
// on the owner's device, and nowhere else (no elements on any other rank). The expectations
// come from the model and the user's attribute `id`, never from the engine, and the check
// counts what it checked so a test can assert the exact number.
#pragma once

#include "engine/engine.h"
#include "engine/module.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <fmt/format.h>
#include <torch/optim/adam.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zero3::test_support {

// One expert parameter as the model and the policy `id mod N` (placed_by_id) say it must live.
struct PlacedParam {
  std::string path;  // "2.experts.0.linear.weight"
  int64_t numel;
  int owner;
};

// Returns every parameter of every Expert module of `model` with its owner, user attribute
// `id` mod `world`, walking the module tree.
inline std::vector<PlacedParam> placed_params_by_id(const std::shared_ptr<Module>& model, int world) {
  std::vector<PlacedParam> out;
  for (const auto& [path, module] : unique_modules(model)) {
    if (module->kind() != "Expert") continue;
    const int owner = static_cast<int>(module->attrs().get("id").as_int() % world);
    for (const auto& item : module->named_parameters(/*recurse=*/true))
      out.push_back({path + "." + item.key(), item.value().numel(), owner});
  }
  return out;
}

// The roles checked for each parameter on each rank: one check each.
inline const std::vector<std::string>& checked_roles() {
  static const std::vector<std::string> roles{"param", "grad", "exp_avg", "exp_avg_sq"};
  return roles;
}

struct ResidencyVerdict {
  int64_t checked = 0;
  std::vector<std::string> violations;
};

// Checks `table` (what each rank reported with Engine::residency) against `expected`:
// for each parameter, rank and role, the owner holds exactly numel elements, every one of its
// tensors in that role on device_of(owner); every other rank holds no element in any role
// (the engine's own copies, "master", included).
inline ResidencyVerdict check_placed_residency(const ResidencyTable& table, const std::vector<PlacedParam>& expected,
                                               const std::function<std::string(int rank)>& device_of) {
  ResidencyVerdict verdict;
  const int world = static_cast<int>(table.size());
  for (const PlacedParam& want : expected) {
    for (int r = 0; r < world; ++r) {
      const ParamResidency* here = nullptr;
      for (const auto& row : table[r])
        if (row.path == want.path) here = &row;
      if (here == nullptr) {
        verdict.violations.push_back(fmt::format("{}: rank {} reports nothing for it", want.path, r));
        continue;
      }
      for (const std::string& role : checked_roles()) {
        ++verdict.checked;
        int64_t elements = 0;
        for (const HeldTensor& t : here->tensors) {
          // The gradient may be the full one on the model tensor or the reduced one.
          const bool in_role = t.role == role || (role == "grad" && t.role == "grad_shard");
          if (!in_role) continue;
          elements += t.elements;
          if (r == want.owner && t.elements > 0 && t.device != device_of(r))
            verdict.violations.push_back(fmt::format("{}: {} ({}) on owner rank {} is on {}, expected {}", want.path,
                                                     role, t.role, r, t.device, device_of(r)));
        }
        const int64_t whole = r == want.owner ? want.numel : 0;
        if (elements != whole)
          verdict.violations.push_back(fmt::format("{}: {} has {} elements on rank {}, expected {} (owner: rank {})",
                                                   want.path, role, elements, r, whole, want.owner));
      }
      if (r != want.owner)
        for (const HeldTensor& t : here->tensors)
          if (t.elements > 0 && t.role == "master")
            verdict.violations.push_back(fmt::format("{}: the engine's copy has {} elements on rank {}, owner rank {}",
                                                     want.path, t.elements, r, want.owner));
    }
  }
  return verdict;
}

// Trains the "moe-placed" model (experts with ids 2, 0, 3, 1, placed by id mod N) on `world`
// rank threads for 4 steps, so every expert is routed to and has a gradient and Adam state,
// and returns what each rank holds.
inline ResidencyTable train_moe_placed(int world, const EngineOptions& options) {
  const auto spec = zerocheck::model_spec("moe-placed");
  ResidencyTable table(world);
  zerocheck::make_world(world)->run([&](Comm& comm) {
    auto model = spec.build(1);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    auto engine = initialize(model, user, placed_by_id(), comm, options);
    for (int64_t step = 0; step < 4; ++step) {
      const auto batch = zerocheck::make_batch(spec, 1, step, comm.rank(), 2);
      engine->backward(
          zerocheck::training_loss(engine->forward(batch.input, spec.route(step, comm.rank())), batch.target));
      engine->step();
    }
    table[comm.rank()] = engine->residency();
  });
  return table;
}

}  // namespace zero3::test_support
