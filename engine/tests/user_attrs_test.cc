// I1 in miniature: the engine never adds, removes or changes a user attribute — on any module
// or parameter — whatever names the user picked, across the whole life of an engine.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"
#include "engine/upstream_names.h"
#include "engine/testing/training.h"
#include "engine/testing/fault_under_test.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <filesystem>
#include <unistd.h>

namespace zero3 {
namespace {

// Every AttrDict of the tree (modules, then their parameters), in a fixed order.
std::vector<AttrDict> snapshot(const std::shared_ptr<Module>& root) {
  std::vector<AttrDict> out;
  for (const auto& [path, module] : unique_modules(root)) {
    out.push_back(module->attrs());
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const AttrDict* attrs = module->find_param_attrs(item.key());
      out.push_back(attrs ? *attrs : AttrDict());
    }
  }
  return out;
}

// A tree whose user attributes use every name upstream writes, plus `id` as in the bug report.
std::shared_ptr<Module> colliding_tree() {
  std::vector<std::shared_ptr<Module>> experts;
  for (int i = 0; i < 3; ++i) {
    auto expert = std::make_shared<Expert>(4, 4);
    expert->attrs().set("id", int64_t{i});
    experts.push_back(expert);
  }
  auto root = std::make_shared<Sequential>();
  root->push_back(std::make_shared<Linear>(4, 4));
  root->push_back(std::make_shared<MoE>(experts));
  init_parameters(*root, 2);
  int64_t value = 1000;
  for (const auto& [path, module] : unique_modules(root)) {
#define ZERO3_SET_MODULE_NAME(n) if (std::string(n) != "id") module->attrs().set(n, value++);
    ZERO3_UPSTREAM_MODULE_NAMES(ZERO3_SET_MODULE_NAME)
#undef ZERO3_SET_MODULE_NAME
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      AttrDict& attrs = module->param_attrs(item.key());
#define ZERO3_SET_PARAM_NAME(n) attrs.set(n, "user:" + std::string(n));
      ZERO3_UPSTREAM_PARAM_NAMES(ZERO3_SET_PARAM_NAME)
#undef ZERO3_SET_PARAM_NAME
    }
  }
  return root;
}

TEST(UserAttributes, NoEngineOperationTouchesThem) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("zerocheck_attrs_" + std::to_string(::getpid()))).string();
  zerocheck::make_world(2)->run([&](Comm& comm) {
    auto model = colliding_tree();
    const auto before = snapshot(model);
    auto check = [&](const char* after_op) {
      const auto now = snapshot(model);
      ASSERT_EQ(now.size(), before.size());
      for (size_t i = 0; i < now.size(); ++i) {
        for (const auto& entry : before[i].entries())
          ASSERT_TRUE(now[i].has(entry.name) && now[i].get(entry.name) == entry.value &&
                      now[i].owner(entry.name) == entry.owner)
              << "after " << after_op << ": user attribute '" << entry.name << "' (dict " << i
              << ") was " << entry.value.repr() << ", now "
              << (now[i].has(entry.name) ? now[i].get(entry.name).repr() : "missing");
        ASSERT_EQ(now[i].size(), before[i].size()) << "after " << after_op << ": dict " << i
                                                   << " gained attributes";
      }
    };
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    Config c;
    c.zero_optimization.stage3_param_persistence_threshold = 4;
    auto engine = initialize(model, user, c, comm, EngineOptions{zerocheck::fault_under_test()});
    check("initialize");
    at::Tensor loss = engine->forward(at::ones({2, 4}), Route({1})).pow(2).mean();
    check("forward");
    engine->backward(loss);
    check("backward");
    engine->step();
    check("step");
    engine->save_checkpoint(dir);
    engine->load_checkpoint(dir);
    check("save/load");
    engine->consolidated_state_dict();
    engine->release();
    check("release");
  });
  std::filesystem::remove_all(dir);
}

TEST(UserAttributes, PublishedIdsNeverOverwriteAUserName) {
  zerocheck::make_world(1)->run([&](Comm& comm) {
    auto model = colliding_tree();  // its modules own "ds_id"
    const auto before = snapshot(model);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.1));
    EngineOptions options;
    options.publish_ids_as = "ds_id";
    try {
      initialize(model, user, Config(), comm, options);
      FAIL() << "published ids over the user's ds_id";
    } catch (const AttributeCollision& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("<root>"), std::string::npos) << what;
      EXPECT_NE(what.find("'ds_id'"), std::string::npos) << what;
      EXPECT_NE(what.find("owned by user"), std::string::npos) << what;
      EXPECT_NE(what.find(kEngineOwner), std::string::npos) << what;
    }
    const auto after = snapshot(model);
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i] == before[i]) << i;

    // A free name is published with the engine as owner, and removed again on release.
    options.publish_ids_as = "zero3_id";
    auto engine = initialize(model, user, Config(), comm, options);
    EXPECT_EQ(model->attrs().get("zero3_id").as_int(), 0);
    EXPECT_EQ(model->attrs().owner("zero3_id"), kEngineOwner);
    engine->release();
    EXPECT_FALSE(model->attrs().has("zero3_id"));
  });
}

}  // namespace
}  // namespace zero3
