// On a machine with CUDA: every placed module's parameters, gradients and optimizer state live
// whole on their owner rank's device and nowhere else (placed_residency.h).
// Skips itself without CUDA on a CPU build; fails without a device on a CUDA build (label gpu).
// The same check runs on the CPU in placement_test.cc, where a planted fault shows it can fail.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/tests/placed_residency.h"
#include "engine/testing/models.h"

#include <torch/cuda.h>

namespace zero3 {
namespace {

TEST(PlacementGpu, PlacedStateLivesWholeOnTheOwnersDevice) {
#ifdef ZEROCHECK_CUDA
  // A CUDA build that skipped would pass having checked nothing.
  ASSERT_TRUE(torch::cuda::is_available()) << "a CUDA build (ZEROCHECK_CUDA) must run its GPU tests on a CUDA device";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (CPU build)";
#endif
  const int world = 2;
  // One device per rank when there are enough; else every rank shares cuda:0.
  const int per_device = torch::cuda::device_count() >= world ? 1 : world;
  EngineOptions options;
  options.ranks_per_device = per_device;
  const ResidencyTable table = test_support::train_moe_placed(world, options);

  const auto expected = test_support::placed_params_by_id(zerocheck::model_spec("moe-placed").build(1), world);
  ASSERT_EQ(expected.size(), 8u) << "4 experts x (weight, bias)";
  const auto verdict = test_support::check_placed_residency(table, expected, [&](int rank) {
    const at::Device device = rank_device(rank, per_device);
    EXPECT_TRUE(device.is_cuda()) << "rank " << rank << " would place its experts on " << device.str();
    return device.str();
  });
  for (const std::string& v : verdict.violations) ADD_FAILURE() << v;
  // From the model: every expert parameter, on every rank, in every role.
  EXPECT_EQ(verdict.checked,
            static_cast<int64_t>(expected.size()) * world * static_cast<int64_t>(test_support::checked_roles().size()));
}

}  // namespace
}  // namespace zero3
