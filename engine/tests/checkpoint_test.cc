// Sharded checkpoints round-trip bit-exactly, and a consolidated state dict equals the gathered
// parameters.
#include <gtest/gtest.h>

#include "engine/checkpoint_tag.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/optimizer_rebuild.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <unistd.h>

namespace zero3 {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("zerocheck_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

TEST(Checkpoint, SaveLoadRestoresShardsAndOptimizerBitExactly) {
  const std::string dir = fresh_dir("roundtrip");
  zerocheck::make_world(3)->run([&](Comm& comm) {
    const auto spec = zerocheck::model_spec("odd");
    auto model = spec.build(4);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.05));
    auto engine = initialize(model, user, all_partitioned(), comm,
                             EngineOptions{zerocheck::fault_under_test()});
    for (int64_t s = 0; s < 2; ++s) zerocheck::train_step(*engine, spec, 9, s, comm.rank());
    engine->save_checkpoint(dir);
    std::vector<at::Tensor> saved;
    for (const auto& p : engine->params()) saved.push_back(p.master.detach().clone());
    std::vector<double> first;
    for (int64_t s = 2; s < 4; ++s) first.push_back(zerocheck::train_step(*engine, spec, 9, s, comm.rank()));

    engine->load_checkpoint(dir);
    const auto params = engine->params();
    for (size_t i = 0; i < params.size(); ++i)
      ASSERT_TRUE(at::equal(params[i].master.detach(), saved[i])) << params[i].path;
    // Same losses again: Adam's moments and step counts came back too.
    for (int64_t s = 2; s < 4; ++s)
      ASSERT_EQ(zerocheck::train_step(*engine, spec, 9, s, comm.rank()), first[static_cast<size_t>(s - 2)]);
  });
  fs::remove_all(dir);
}

// Before any training the consolidated state dict is what the user built: the same model built
// again from the same seed is the reference, not the engine's own gather. (After training, the
// harness compares it with the dense twin: I6 in harness/oracles.)
TEST(Checkpoint, ConsolidatedStateDictEqualsTheModelAsBuilt) {
  const auto spec = zerocheck::model_spec("odd");
  // Every key LibTorch lists, as torch's state_dict does: "odd" uses a module at two places.
  const auto built = spec.build(4)->named_parameters();
  ASSERT_GT(built.size(), zerocheck::unique_named_parameters(spec.build(4)).size());
  zerocheck::make_world(4)->run([&](Comm& comm) {
    auto model = spec.build(4);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.05));
    auto engine = initialize(model, user, all_partitioned(), comm,
                             EngineOptions{zerocheck::fault_under_test()});
    auto consolidated = engine->consolidated_state_dict();
    if (comm.rank() != 0) {
      ASSERT_TRUE(consolidated.empty());
      return;
    }
    ASSERT_EQ(consolidated.size(), built.size());
    for (const auto& item : built) {
      const std::string& path = item.key();
      ASSERT_EQ(consolidated.count(path), 1u) << path;
      ASSERT_TRUE(at::equal(consolidated.at(path), item.value().detach())) << path;
    }
  });
}

TEST(Checkpoint, AnotherWorldSizeLoadsAndAnotherModelOrACorruptFileIsRefused) {
  const std::string dir = fresh_dir("mismatch"), other = fresh_dir("other_model");
  auto run = [&](const std::string& model, int world, const std::function<void(Engine&, Comm&)>& body) {
    zerocheck::make_world(world)->run([&](Comm& comm) {
      auto m = zerocheck::model_spec(model).build(2);
      torch::optim::Adam user(unique_parameters(*m), torch::optim::AdamOptions(0.05));
      auto engine = initialize(m, user, all_partitioned(), comm, EngineOptions{zerocheck::fault_under_test()});
      body(*engine, comm);
    });
  };
  run("mlp", 3, [&](Engine& engine, Comm&) { engine.save_checkpoint(dir); });
  run("odd", 3, [&](Engine& engine, Comm&) { engine.save_checkpoint(other); });
  // Three ranks saved it, two load it: resharding (reshard_test.cc proves the values).
  run("mlp", 2, [&](Engine& engine, Comm&) { engine.load_checkpoint(dir); });
  run("mlp", 2, [&](Engine& engine, Comm&) {
    const auto before = engine.params().at(0).master.clone();
    try {
      engine.load_checkpoint(other);
      FAIL() << "loaded a checkpoint of another model";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(at::equal(engine.params().at(0).master, before));
  });
  {
    std::ofstream(fs::path(dir) / "zero3_rank1_of3.pt", std::ios::trunc) << "not a checkpoint";
  }
  EXPECT_THROW(run("mlp", 3, [&](Engine& engine, Comm&) { engine.load_checkpoint(dir); }), zerocheck::RankFailure);
  fs::remove_all(dir);
  fs::remove_all(other);
}

// Tagged checkpoints in one folder: a load names its tag (or takes the latest), and its options
// say what else it restores (LoadOptions): without optimizer states the optimizer keeps its own
// state and the step counter comes back; module_only keeps the counter too.
TEST(Checkpoint, TaggedLoadsRestoreTheirTagAndWhatTheirOptionsSay) {
  const std::string folder = fresh_dir("tagged");
  zerocheck::make_world(2)->run([&](Comm& comm) {
    const auto spec = zerocheck::model_spec("odd");
    auto model = spec.build(4);
    torch::optim::Adam user(unique_parameters(*model), torch::optim::AdamOptions(0.05));
    auto engine = initialize(model, user, all_partitioned(), comm, EngineOptions{zerocheck::fault_under_test()});
    auto masters = [&] {
      std::vector<at::Tensor> out;
      for (const auto& p : engine->params()) out.push_back(p.master.detach().clone());
      return out;
    };
    auto state = [&] {
      std::vector<at::Tensor> out;
      for (const auto& p : engine->params()) {
        const at::Tensor t = state_tensors_of(engine->optimizer(), p.master);
        out.push_back(t.defined() ? t.clone() : at::Tensor());
      }
      return out;
    };
    auto same = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].defined() != b[i].defined() || (a[i].defined() && !at::equal(a[i], b[i]))) return false;
      return true;
    };
    zerocheck::train_step(*engine, spec, 9, 0, comm.rank());
    engine->save_checkpoint_tagged(folder, "a");
    const auto masters_a = masters();
    const auto state_a = state();
    const int64_t steps_a = engine->micro_steps();
    zerocheck::train_step(*engine, spec, 9, 1, comm.rank());
    engine->save_checkpoint_tagged(folder, "b");
    const auto masters_b = masters();
    zerocheck::train_step(*engine, spec, 9, 2, comm.rank());

    engine->load_checkpoint_tagged(folder, "a");
    EXPECT_TRUE(same(masters(), masters_a)) << "the load of tag a restored another checkpoint";
    EXPECT_TRUE(same(state(), state_a));
    EXPECT_EQ(engine->micro_steps(), steps_a);
    engine->load_checkpoint_tagged(folder, "");  // the latest: b
    EXPECT_TRUE(same(masters(), masters_b));

    zerocheck::train_step(*engine, spec, 9, 3, comm.rank());
    const auto state_now = state();
    engine->load_checkpoint_tagged(folder, "a", LoadOptions{/*optimizer_states=*/false, /*module_only=*/false});
    EXPECT_TRUE(same(masters(), masters_a));
    EXPECT_TRUE(same(state(), state_now)) << "without optimizer states the optimizer keeps its own";
    EXPECT_EQ(engine->micro_steps(), steps_a);

    zerocheck::train_step(*engine, spec, 9, 4, comm.rank());
    const auto state_then = state();
    const int64_t steps_then = engine->micro_steps();
    engine->load_checkpoint_tagged(folder, "b", LoadOptions{/*optimizer_states=*/true, /*module_only=*/true});
    EXPECT_TRUE(same(masters(), masters_b));
    EXPECT_TRUE(same(state(), state_then)) << "module_only keeps the optimizer's state";
    EXPECT_EQ(engine->micro_steps(), steps_then) << "module_only keeps the step counter";

    EXPECT_THROW(engine->save_checkpoint_tagged(folder, "../escape"), UsageError);
    EXPECT_THROW(engine->load_checkpoint_tagged(folder, "latest"), UsageError);
    EXPECT_THROW(engine->load_checkpoint_tagged(folder, "never-saved"), CheckpointError);
  });
  fs::remove_all(folder);
}

}  // namespace
}  // namespace zero3
