// On a machine with CUDA: placed modules' parameters live on their owner rank's device.
// Skips itself without CUDA (label gpu).
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/tests/test_configs.h"
#include "harness/dense_baseline.h"
#include "harness/models.h"
#include "harness/world.h"

#include <torch/cuda.h>
#include <torch/optim/adam.h>

namespace zero3 {
namespace {

TEST(PlacementGpu, PlacedParametersLiveOnTheOwnersDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
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
  for (int r = 0; r < world; ++r) {
    for (const auto& p : table[r]) {
      if (p.path.find("experts.") != std::string::npos && p.param_elements > 0) {
        EXPECT_EQ(p.device, rank_device(r, torch::cuda::device_count() >= world ? 1 : world).str())
            << p.path << " on rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace zero3
