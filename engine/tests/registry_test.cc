// I5 in miniature: a repeated initialize is refused, changes nothing, and the first engine keeps
// training exactly like an engine that never saw the repeat; release lets the model be wrapped
// again. (The dense twin is the harness's; here the reference is the engine itself, without the
// operation under test, in a world of its own and without the planted fault.)
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/registry.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/models.h"
#include "engine/testing/training.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

namespace zero3 {
namespace {

using zerocheck::Batch;
using zerocheck::ModelSpec;

constexpr double kLr = 0.05;

EngineOptions options_under_test() { return EngineOptions{zerocheck::fault_under_test()}; }

template <class Body>
void in_world(int world, Body&& body) {
  zerocheck::make_world(world)->run([&](Comm& comm) { body(comm); });
}

// The reference: `steps` steps of the world's data on one reference engine (no fault planted)
// that sees nothing else. From `fresh_engine_at` on, a new model holding the values trained so far
// trains under a new engine with a new optimizer (what wrapping a released model again must equal).
// Returns rank 0's consolidated parameters.
std::map<std::string, at::Tensor> trained_alone(const ModelSpec& spec, int world, int64_t steps,
                                                int64_t fresh_engine_at = -1) {
  std::map<std::string, at::Tensor> out;
  in_world(world, [&](Comm& comm) {
    auto model = spec.build(11);
    auto user = std::make_unique<torch::optim::Adam>(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, *user, all_partitioned(), comm, EngineOptions());
    for (int64_t s = 0; s < steps; ++s) {
      if (s == fresh_engine_at) {
        auto next = spec.build(11);
        {
          GatheredParameters whole(*engine, *model);
          at::NoGradGuard no_grad;
          const auto from = zerocheck::unique_named_parameters(model), to = zerocheck::unique_named_parameters(next);
          for (size_t i = 0; i < from.size(); ++i) to[i].second.copy_(from[i].second);
        }
        engine.reset();
        model = next;
        user = std::make_unique<torch::optim::Adam>(unique_parameters(*model), torch::optim::AdamOptions(kLr));
        engine = initialize(model, *user, all_partitioned(), comm, EngineOptions());
      }
      zerocheck::train_step(*engine, spec, 3, s, comm.rank());
    }
    auto consolidated = engine->consolidated_state_dict();
    if (comm.rank() == 0) out = std::move(consolidated);
  });
  return out;
}

void expect_equal_to(const std::map<std::string, at::Tensor>& consolidated,
                     const std::map<std::string, at::Tensor>& reference) {
  ASSERT_EQ(consolidated.size(), reference.size());
  for (const auto& [path, tensor] : reference)
    ASSERT_TRUE(at::equal(consolidated.at(path), tensor)) << path << " differs from the engine trained alone";
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
  const auto expected = trained_alone(spec, 2, 3);
  in_world(2, [&](Comm& comm) {
    auto model = spec.build(11);
    auto other = spec.build(12);
    model->attrs().set("id", int64_t{7});
    const AttrDict user_attrs = model->attrs();
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, user, all_partitioned(), comm, options_under_test());
    zerocheck::train_step(*engine, spec, 3, 0, comm.rank());

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

    zerocheck::train_step(*engine, spec, 3, 1, comm.rank());
    zerocheck::train_step(*engine, spec, 3, 2, comm.rank());
    auto consolidated = engine->consolidated_state_dict();
    if (comm.rank() == 0) expect_equal_to(consolidated, expected);
  });
}

TEST(Registry, TwoEnginesInOneProcessAreIndependent) {
  const auto spec = zerocheck::model_spec("odd");
  const auto expected = trained_alone(spec, 3, 2);
  in_world(3, [&](Comm& comm) {
    auto a = spec.build(11), b = spec.build(11);
    torch::optim::Adam oa(unique_parameters(*a), torch::optim::AdamOptions(kLr));
    torch::optim::Adam ob(unique_parameters(*b), torch::optim::AdamOptions(kLr));
    auto ea = initialize(a, oa, all_partitioned(), comm, options_under_test());
    auto eb = initialize(b, ob, all_partitioned(), comm, options_under_test());
    for (int64_t s = 0; s < 2; ++s) {
      zerocheck::train_step(*ea, spec, 3, s, comm.rank());
      zerocheck::train_step(*eb, spec, 3, s, comm.rank());
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
  // again starts Adam afresh: the reference restarts its engine and optimizer at the same step.
  const auto expected = trained_alone(spec, 2, 4, /*fresh_engine_at=*/2);
  in_world(2, [&](Comm& comm) {
    auto model = spec.build(11);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(kLr));
    auto engine = initialize(model, user, all_partitioned(), comm, options_under_test());
    zerocheck::train_step(*engine, spec, 3, 0, comm.rank());
    zerocheck::train_step(*engine, spec, 3, 1, comm.rank());
    engine->release();
    EXPECT_FALSE(Registry::instance().is_managed(model.get()));
    EXPECT_FALSE(Registry::instance().is_managed(&user));
    auto again = initialize(model, user, all_partitioned(), comm, options_under_test());
    zerocheck::train_step(*again, spec, 3, 2, comm.rank());
    zerocheck::train_step(*again, spec, 3, 3, comm.rank());
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
