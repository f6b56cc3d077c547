// Placement proven physically: where each placed module's bytes live (parameters, gradients,
// optimizer state, device) is measured on every rank and compared with the user's policy.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/tests/placed_residency.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <mutex>

namespace zero3 {
namespace {

TEST(Placement, ResidencyFollowsTheUsersAttributes) {
  const int world = 3;
  const auto spec = zerocheck::model_spec("moe-placed");  // experts with ids 2, 0, 3, 1
  ResidencyTable table(world);
  zerocheck::make_world(world)->run([&](Comm& comm) {
    auto model = spec.build(1);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    auto engine = initialize(model, user, placed_by_id(), comm,
                             EngineOptions{zerocheck::fault_under_test()});
    for (int64_t step = 0; step < 4; ++step) {  // every expert is routed to by some rank
      const auto batch = zerocheck::make_batch(spec, 1, step, comm.rank(), 2);
      engine->backward(zerocheck::training_loss(engine->forward(batch.input, spec.route(step, comm.rank())),
                                                batch.target));
      engine->step();
    }
    table[comm.rank()] = engine->residency();
  });
  // Owners and sizes from the model and the users' ids, never from what the engine reports.
  int checked = 0;
  for (const auto& want : test_support::placed_params_by_id(spec.build(1), world)) {
    const std::string& path = want.path;
    const int64_t owner = want.owner;
    const int64_t numel = want.numel;
    for (int r = 0; r < world; ++r) {
      const auto row = std::find_if(table[r].begin(), table[r].end(), [&](const auto& p) { return p.path == path; });
      ASSERT_NE(row, table[r].end()) << path << " is not reported on rank " << r;
      const ParamResidency& here = *row;
      if (r == owner) {
        EXPECT_EQ(here.param_elements, numel) << path << " is not whole on its owner rank " << r;
        EXPECT_EQ(here.grad_elements, numel) << path;
        EXPECT_EQ(here.optimizer_elements, 2 * numel) << path;
      } else {
        EXPECT_EQ(here.param_elements + here.master_elements + here.grad_elements +
                      here.optimizer_elements, 0)
            << path << " has storage on rank " << r << ", its owner is " << owner;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);  // 4 experts x (weight, bias)
}

// The GPU test's check (placement_gpu_test.cc) where experts live on the CPU, so its counting
// runs in every ctest: parameter, gradient and each Adam state tensor, whole on the owner only.
TEST(Placement, PlacedStateLivesWholeOnTheOwnerOnly) {
  const int world = 3;
  const ResidencyTable table = test_support::train_moe_placed(world, EngineOptions{zerocheck::fault_under_test()});
  const auto expected = test_support::placed_params_by_id(zerocheck::model_spec("moe-placed").build(1), world);
  ASSERT_EQ(expected.size(), 8u) << "4 experts x (weight, bias)";
  const auto verdict =
      test_support::check_placed_residency(table, expected, [](int rank) { return rank_device(rank, 1).str(); });
  for (const std::string& v : verdict.violations) ADD_FAILURE() << v;
  EXPECT_EQ(verdict.checked,
            static_cast<int64_t>(expected.size()) * world * static_cast<int64_t>(test_support::checked_roles().size()));
}

// The check can fail: with copies kept on the other ranks (a planted fault) it names each one.
TEST(Placement, PlacedStateCheckCatchesCopiesKeptElsewhere) {
  const int world = 3;
  const ResidencyTable table = test_support::train_moe_placed(world, EngineOptions{Fault::placed_copies_kept});
  const auto expected = test_support::placed_params_by_id(zerocheck::model_spec("moe-placed").build(1), world);
  const auto verdict =
      test_support::check_placed_residency(table, expected, [](int rank) { return rank_device(rank, 1).str(); });
  EXPECT_EQ(verdict.violations.size(), expected.size() * (world - 1));
  for (const std::string& v : verdict.violations)
    EXPECT_NE(v.find(": param has "), std::string::npos) << v;
}

TEST(Placement, PolicyErrorsNameTheModulePath) {
  zerocheck::make_world(2)->run([&](Comm& comm) {
    auto expect_error = [&](const std::shared_ptr<Module>& model, const Config& config,
                            const std::string& fragment) {
      torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
      try {
        initialize(model, user, config, comm);
        ADD_FAILURE() << "accepted; expected a PlacementError with '" << fragment << "'";
      } catch (const PlacementError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      }
    };
    auto build = [](AttrValue id) {
      auto root = std::make_shared<Sequential>();
      auto expert = std::make_shared<Expert>(2, 2);
      if (!id.is_none()) expert->attrs().set("id", id);
      root->push_back(std::make_shared<MoE>(std::vector<std::shared_ptr<Module>>{expert}));
      init_parameters(*root, 1);
      return root;
    };
    expect_error(build(AttrValue()), placed_by_id(), "0.experts.0: placement policy 'attr_mod id' needs the user attribute 'id'");
    expect_error(build(AttrValue("three")), placed_by_id(), "0.experts.0: placement policy 'attr_mod id' needs an integer");
    Config by_map;
    by_map.placement.kind = PlacementSpec::Kind::map;
    by_map.placement.owners = {{"0.experts.0", 5}};
    expect_error(build(AttrValue(int64_t{1})), by_map, "0.experts.0: placement map names rank 5");
  });
}

TEST(Placement, ConfigSectionSelectsThePolicy) {
  Config c = Config::parse(R"({"zerocheck": {"placement": {"kind": "map", "owners": {"1.experts.0": 1}}}})");
  EXPECT_EQ(c.placement.kind, PlacementSpec::Kind::map);
  EXPECT_EQ(c.placement.owners.at("1.experts.0"), 1);
  EXPECT_EQ(Config::from_json(c.to_json()).placement, c.placement);
  EXPECT_THROW(Config::parse(R"({"zerocheck": {"placement": {"kind": "attr_mod"}}})"), ConfigError);
  EXPECT_THROW(Config::parse(R"({"zerocheck": {"placement": {"kind": "hash"}}})"), ConfigError);
  EXPECT_THROW(Config::parse(R"({"zerocheck": {"placment": {}}})"), ConfigError);
}

}  // namespace
}  // namespace zero3
