// On a machine with CUDA: placed modules' parameters live on their owner rank's device.
// Skips itself without CUDA on a CPU build; fails without a device on a CUDA build (label gpu).
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/tests/test_configs.h"
#include "harness/dense_baseline.h"
#include "harness/models.h"
#include "harness/world.h"

#include <torch/cuda.h>
#include <torch/optim/adam.h>

#include <map>

namespace zero3 {
namespace {

TEST(PlacementGpu, PlacedParametersLiveOnTheOwnersDevice) {
#ifdef ZEROCHECK_CUDA
  // A CUDA build that skipped would pass having checked nothing.
  ASSERT_TRUE(torch::cuda::is_available()) << "a CUDA build (ZEROCHECK_CUDA) must run its GPU tests on a CUDA device";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (CPU build)";
#endif
  const int world = 2;
  const auto spec = zerocheck::model_spec("moe-placed");
  ResidencyTable table(world);
  zerocheck::WorldOptions o;
  o.world_size = world;
  zerocheck::run_world(o, [&](Comm& comm) {
    auto model = spec.build(1);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    EngineOptions options;
    options.ranks_per_device = torch::cuda::device_count() >= world ? 1 : world;
    auto engine = initialize(model, user, placed_by_id(), comm, options);
    const auto batch = zerocheck::make_batch(spec, 1, 0, comm.rank(), 2);
    engine->backward(zerocheck::training_loss(engine->forward(batch.input, spec.route(0, comm.rank())),
                                              batch.target));
    engine->step();
    table[comm.rank()] = engine->residency();
  });
  // The owner of each expert from the user's attribute `id` mod N, computed here; every expert
  // parameter must be whole on exactly that rank and on its device, and nowhere else.
  std::map<std::string, int> owner_by_module;
  for (const auto& [path, module] : unique_modules(spec.build(1)))
    if (module->kind() == "Expert") owner_by_module[path] = static_cast<int>(module->attrs().get("id").as_int() % world);
  ASSERT_EQ(owner_by_module.size(), 4u);
  const int per_device = torch::cuda::device_count() >= world ? 1 : world;
  int checked = 0;
  for (size_t i = 0; i < table[0].size(); ++i) {
    const std::string& path = table[0][i].path;
    const std::string module = path.substr(0, path.rfind('.'));
    if (!owner_by_module.count(module)) continue;
    const int owner = owner_by_module.at(module);
    for (int r = 0; r < world; ++r) {
      if (r == owner) {
        EXPECT_GT(table[r][i].param_elements, 0) << path << " is not whole on its owner, rank " << r;
        EXPECT_EQ(table[r][i].device, rank_device(r, per_device).str()) << path << " on rank " << r;
      } else {
        EXPECT_EQ(table[r][i].param_elements, 0) << path << " has storage on rank " << r << ", owner " << owner;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8) << "every expert's weight and bias must have been checked";
}

}  // namespace
}  // namespace zero3
