// The seed bug, reproduced on the legacy modes and absent from the reference engine.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/legacy_mode.h"
#include "engine/testing/models.h"
#include "harness/tools/repro_seed.h"

#include <torch/optim/adam.h>

#include <algorithm>

namespace zerocheck {
namespace {

std::vector<int64_t> arithmetic(int64_t first, int64_t step, int64_t count) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(first + step * i);
  return out;
}

TEST(ReproSeed, Legacy0154RenumbersTheExpertsAndMovesThem) {
  ReproOptions options;
  options.fault = zero3::Fault::legacy_0_15_4;
  const ReproReport report = run_repro_seed(options, *make_world(2));
  EXPECT_EQ(report.ids_before, arithmetic(0, 1, 60));
  EXPECT_EQ(report.ids_after_init, arithmetic(2, 2, 60));      // 2, 4, ..., 120
  EXPECT_EQ(report.ids_after_reinit, arithmetic(123, 2, 60));  // 123, 125, ..., 241
  EXPECT_FALSE(report.reinit_error.has_value());
  EXPECT_NE(report.placement_after, report.placement_before);
  EXPECT_EQ(report.placement_after, std::vector<int64_t>(60, 0));  // every expert on rank 0
  EXPECT_EQ(report.placement_observed, std::vector<int64_t>(60, 0));  // and their bytes too
  // The oracles saw it all: the ids (I1), the placement (I2), the accepted repeat (I5).
  for (const char* invariant : {"I1 violated", "I2 violated", "I5 violated"})
    EXPECT_TRUE(std::any_of(report.violations.begin(), report.violations.end(),
                            [&](const std::string& v) { return v.find(invariant) != std::string::npos; }))
        << invariant << " missing from\n" << report.to_text();
  EXPECT_FALSE(report.intact());
}

TEST(ReproSeed, ReferenceKeepsIdsAndPlacementAndRefusesTheSecondInitialize) {
  for (int world = 1; world <= 4; ++world) {
    const ReproReport report = run_repro_seed(ReproOptions{}, *make_world(world));
    EXPECT_EQ(report.ids_after_init, arithmetic(0, 1, 60)) << world;
    EXPECT_EQ(report.ids_after_reinit, arithmetic(0, 1, 60)) << world;
    ASSERT_TRUE(report.reinit_error.has_value()) << world;
    EXPECT_EQ(report.reinit_error_kind, "AlreadyInitialized") << *report.reinit_error;
    EXPECT_EQ(report.placement_after, report.placement_before);
    std::vector<int64_t> by_id;
    for (int64_t id = 0; id < 60; ++id) by_id.push_back(id % world);
    EXPECT_EQ(report.placement_observed, by_id) << world;
    EXPECT_FALSE(report.failure.has_value());
    EXPECT_TRUE(report.forward_loss.has_value());
    EXPECT_TRUE(report.violations.empty()) << report.to_text();
    EXPECT_TRUE(report.intact()) << report.to_text();
  }
}

TEST(ReproSeed, PlacementFromEngineIdsIsSeenInResidency) {
  ReproOptions options;
  options.fault = zero3::Fault::placement_from_engine_ids;
  const ReproReport report = run_repro_seed(options, *make_world(2));
  EXPECT_TRUE(report.ids_intact());  // the attributes are fine; the bytes are not
  EXPECT_NE(report.placement_observed, report.placement_before);
  EXPECT_FALSE(report.intact());
}

TEST(ReproSeed, LegacyDsIdKeepsIdButClobbersAUsersDsId) {
  ReproOptions options;
  options.fault = zero3::Fault::legacy_ds_id;
  const ReproReport report = run_repro_seed(options, *make_world(2));
  EXPECT_EQ(report.ids_after_init, arithmetic(0, 1, 60));
  EXPECT_TRUE(report.ids_intact());
  EXPECT_FALSE(report.reinit_error.has_value());  // upstream still accepts it
  EXPECT_FALSE(report.intact());

  // The rename only moved the collision: a user whose experts carry `ds_id` loses it.
  zero3::reset_legacy_counters();
  make_world(1)->run([](zero3::Comm& comm) {
    auto model = model_spec("seed").build(0);
    auto experts = seed_experts(*model);
    for (size_t i = 0; i < experts.size(); ++i)
      experts[i]->attrs().set("ds_id", static_cast<int64_t>(1000 + i));
    torch::optim::Adam optimizer(zero3::unique_parameters(*model), torch::optim::AdamOptions(3e-5));
    zero3::EngineOptions engine_options;
    engine_options.fault = zero3::Fault::legacy_ds_id;
    auto engine = zero3::initialize(model, optimizer, zero3::Config::parse(kSeedConfig), comm,
                                    engine_options);
    EXPECT_EQ(experts[0]->attrs().get("ds_id").as_int(), 2);
    EXPECT_EQ(experts[0]->attrs().owner("ds_id"), "legacy-ds-id");
    EXPECT_EQ(experts[59]->attrs().get("ds_id").as_int(), 120);
    EXPECT_EQ(experts[5]->attrs().get("id").as_int(), 5);
  });
}

}  // namespace
}  // namespace zerocheck
