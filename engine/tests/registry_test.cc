// I5 in miniature: a repeated initialize is refused, changes nothing, and the first engine keeps
// training exactly like the dense baseline; release lets the model be wrapped again.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/registry.h"
#include "engine/tests/test_configs.h"
#include "harness/dense_baseline.h"
#include "harness/fault_under_test.h"
#include "harness/models.h"
#include "harness/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

namespace zero3 {
namespace {

using zerocheck::Batch;
using zerocheck::ModelSpec;

constexpr double kLr = 0.05;

EngineOptions options_under_test() { return EngineOptions{zerocheck::fault_under_test()}; }

void train_step(Engine& engine, const ModelSpec& spec, int64_t step, int rank) {
  const Batch batch = zerocheck::make_batch(spec, 3, step, rank, 4);
  engine.backward(zerocheck::training_loss(engine.forward(batch.input, spec.route(step, rank)), batch.target));
  engine.step();
  engine.zero_grad();
}

// Dense training of `steps` steps on the world's data; `fresh_optimizer_at` restarts Adam.
std::map<std::string, at::Tensor> dense_after(const ModelSpec& spec, int world, int64_t steps,
                                              int64_t fresh_optimizer_at = -1) {
  auto model = spec.build(11);
  auto dense = std::make_unique<zerocheck::DenseBaseline>(model, zerocheck::adam_factory(kLr));
  for (int64_t s = 0; s < steps; ++s) {
    if (s == fresh_optimizer_at)
      dense = std::make_unique<zerocheck::DenseBaseline>(model, zerocheck::adam_factory(kLr));
    std::vector<Batch> batches;
    for (int r = 0; r < world; ++r) batches.push_back(zerocheck::make_batch(spec, 3, s, r, 4));
    std::vector<zero3::Route> routes;
    for (int r = 0; r < world; ++r) routes.push_back(spec.route(s, r));
    dense->step(batches, routes);
  }
  return dense->parameters_by_path();
}

void expect_equal_to(const std::map<std::string, at::Tensor>& consolidated,
                     const std::map<std::string, at::Tensor>& dense) {
  ASSERT_EQ(consolidated.size(), dense.size());
  for (const auto& [path, tensor] : dense)
    ASSERT_TRUE(at::equal(consolidated.at(path), tensor)) << path << " differs from dense";
}

template <class Body>
void in_world(int world, Body&& body) {
  zerocheck::WorldOptions o;
  o.world_size = world;
  zerocheck::run_world(o, [&](Comm& comm) { body(comm); });
}

TEST(Registry, SameModelTwiceIsRejected) {
  in_world(2, [](Comm& comm) {
    const auto spec = zerocheck::model_spec("mlp");
    auto model = spec.build(11);
    torch::optim::Adam first(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    torch::optim::Adam second(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, first, all_partitioned(), comm, options_under_test());
    try {
      initialize(model, second, all_partitioned(), comm, options_under_test());
      FAIL() << "a second initialize of the same model was accepted";
    } catch (const AlreadyInitialized& e) {
      EXPECT_NE(std::string(e.what()).find("the model (Sequential) is already managed"),
                std::string::npos) << e.what();
    }
  });
}

TEST(Registry, RejectedInitializeLeavesTheFirstEngineTraining) {
  const auto spec = zerocheck::model_spec("mlp");
  const auto expected = dense_after(spec, 2, 3);
  in_world(2, [&](Comm& comm) {
    auto model = spec.build(11);
    auto other = spec.build(12);
    model->attrs().set("id", int64_t{7});
    const AttrDict user_attrs = model->attrs();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, user, all_partitioned(), comm, options_under_test());
    train_step(*engine, spec, 0, comm.rank());

    // 1. the same model with a fresh optimizer
    torch::optim::Adam fresh(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    EXPECT_THROW(initialize(model, fresh, all_partitioned(), comm, options_under_test()),
                 AlreadyInitialized);
    // 2. a submodule of the managed model
    auto sub = std::static_pointer_cast<Sequential>(model)->at(0);
    torch::optim::Adam sub_optimizer(unique_parameters(*sub), torch::optim::AdamOptions(kLr));
    try {
      initialize(sub, sub_optimizer, all_partitioned(), comm, options_under_test());
      ADD_FAILURE() << "a submodule of a managed model was accepted";
    } catch (const AlreadyInitialized& e) {
      EXPECT_NE(std::string(e.what()).find("Linear"), std::string::npos) << e.what();
    }
    // 3. the same optimizer with another model
    try {
      initialize(other, user, all_partitioned(), comm, options_under_test());
      ADD_FAILURE() << "a managed optimizer was accepted with another model";
    } catch (const AlreadyInitialized& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(Registry::instance().is_managed(other.get()));
    EXPECT_TRUE(model->attrs() == user_attrs) << "a rejected initialize changed user attributes";
    for (const auto& [path, module] : unique_modules(model)) {
      if (!path.empty()) {
        EXPECT_TRUE(module->attrs().empty()) << path;
      }
    }

    train_step(*engine, spec, 1, comm.rank());
    train_step(*engine, spec, 2, comm.rank());
    auto consolidated = engine->consolidated_state_dict();
    if (comm.rank() == 0) expect_equal_to(consolidated, expected);
  });
}

TEST(Registry, TwoEnginesInOneProcessAreIndependent) {
  const auto spec = zerocheck::model_spec("odd");
  const auto expected = dense_after(spec, 3, 2);
  in_world(3, [&](Comm& comm) {
    auto a = spec.build(11), b = spec.build(11);
    torch::optim::Adam oa(unique_parameters(*a), torch::optim::AdamOptions(kLr));
    torch::optim::Adam ob(unique_parameters(*b), torch::optim::AdamOptions(kLr));
    auto ea = initialize(a, oa, all_partitioned(), comm, options_under_test());
    auto eb = initialize(b, ob, all_partitioned(), comm, options_under_test());
    for (int64_t s = 0; s < 2; ++s) {
      train_step(*ea, spec, s, comm.rank());
      train_step(*eb, spec, s, comm.rank());
    }
    auto ca = ea->consolidated_state_dict();
    auto cb = eb->consolidated_state_dict();
    if (comm.rank() == 0) {
      expect_equal_to(ca, expected);
      expect_equal_to(cb, expected);
    }
  });
}

TEST(Registry, WrapReleaseWrapAgainTrainsCorrectly) {
  const auto spec = zerocheck::model_spec("odd");
  // The user's optimizer never steps itself (the engine steps its rebuilt copy), so wrapping
  // again starts Adam afresh: the dense side restarts its optimizer at the same step.
  const auto expected = dense_after(spec, 2, 4, /*fresh_optimizer_at=*/2);
  in_world(2, [&](Comm& comm) {
    auto model = spec.build(11);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, user, all_partitioned(), comm, options_under_test());
    train_step(*engine, spec, 0, comm.rank());
    train_step(*engine, spec, 1, comm.rank());
    engine->release();
    EXPECT_FALSE(Registry::instance().is_managed(model.get()));
    EXPECT_FALSE(Registry::instance().is_managed(&user));
    auto again = initialize(model, user, all_partitioned(), comm, options_under_test());
    train_step(*again, spec, 2, comm.rank());
    train_step(*again, spec, 3, comm.rank());
    auto consolidated = again->consolidated_state_dict();
    if (comm.rank() == 0) expect_equal_to(consolidated, expected);
  });
}

TEST(Registry, DestroyingAnEngineUnregisters) {
  in_world(1, [](Comm& comm) {
    auto model = zerocheck::model_spec("mlp").build(1);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    { auto engine = initialize(model, user, all_partitioned(), comm); }
    EXPECT_FALSE(Registry::instance().is_managed(model.get()));
    EXPECT_EQ(unique_parameters(*model).at(0).numel(), 16 * 32);  // full data is back
    EXPECT_NO_THROW(initialize(model, user, all_partitioned(), comm));
  });
}

}  // namespace
}  // namespace zero3
