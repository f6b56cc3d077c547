#include "harness/reshard_check.h"

#include "engine/engine.h"
#include "harness/dense_baseline.h"
#include "harness/fault_under_test.h"
#include "harness/models.h"
#include "harness/world.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <unistd.h>

namespace zerocheck {


namespace {

namespace fs = std::filesystem;

OptimizerFactory factory(const std::string& kind) {
  return kind == "sgd" ? sgd_factory(0.05, 0.9) : adam_factory(0.02);
}

std::vector<at::Tensor> trainable(const zero3::Module& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : zero3::unique_parameters(model))
    if (p.requires_grad()) out.push_back(p);
  return out;
}

constexpr uint64_t kSeed = 5;
constexpr int64_t kBatch = 3;

}  // namespace

std::string describe(const ReshardCase& c) {
  return fmt::format("{} with {}, saved by {} ranks after {} steps, loaded by {} ranks, {} more steps, "
                     "persistence threshold {}",
                     c.model, c.optimizer, c.from, c.steps_before, c.to, c.steps_after, c.persistence_threshold);
}

std::string test_name(const ReshardCase& c) {
  std::string name = fmt::format("{}_{}_{}_to_{}", c.model, c.optimizer, c.from, c.to);
  if (c.persistence_threshold > 0) name += "_persist" + std::to_string(c.persistence_threshold);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

std::vector<std::string> reshard_problems(const ReshardCase& c) {
  const ModelSpec spec = model_spec(c.model);
  zero3::Config config;
  config.zero_optimization.stage3_param_persistence_threshold = c.persistence_threshold;
  config.placement = spec.placement;
  const int64_t total = c.steps_before + c.steps_after;
  auto world_at = [&](int64_t step) { return step < c.steps_before ? c.from : c.to; };

  // The dense twin: every rank's batch, in rank order, of whichever world trains that step.
  DenseBaseline dense(spec.build(kSeed), factory(c.optimizer));
  std::vector<std::vector<double>> dense_losses;
  for (int64_t step = 0; step < total; ++step) {
    std::vector<Batch> batches;
    std::vector<zero3::Route> routes;
    for (int r = 0; r < world_at(step); ++r) {
      batches.push_back(make_batch(spec, kSeed, step, r, kBatch));
      routes.push_back(spec.route(step, r));
    }
    dense_losses.push_back(dense.step(batches, routes));
  }

  const std::string dir = (fs::temp_directory_path() / fmt::format("zerocheck_reshard_{}_{}", test_name(c), ::getpid()))
                              .string();
  fs::remove_all(dir);
  std::vector<std::string> problems;
  std::mutex mutex;
  auto problem = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    problems.push_back(what);
  };
  std::map<std::string, at::Tensor> consolidated;
  auto train = [&](zero3::Engine& engine, int rank, int64_t first, int64_t end) {
    for (int64_t step = first; step < end; ++step) {
      const auto batch = make_batch(spec, kSeed, step, rank, kBatch);
      at::Tensor loss = training_loss(engine.forward(batch.input, spec.route(step, rank)), batch.target);
      engine.backward(loss);
      engine.step();
      engine.zero_grad();
      const double expected = dense_losses[static_cast<size_t>(step)][static_cast<size_t>(rank)];
      if (loss.item<double>() != expected)
        problem(fmt::format("rank {} step {}: loss {:.17g} differs from the dense twin's {:.17g}", rank, step,
                            loss.item<double>(), expected));
    }
  };
  auto run = [&](int world, uint64_t init_seed, const std::function<void(zero3::Engine&, zero3::Comm&)>& body) {
    WorldOptions o;
    o.world_size = world;
    run_world(o, [&](zero3::Comm& comm) {
      auto model = spec.build(init_seed);
      auto user = factory(c.optimizer)(trainable(*model));
      auto engine = zero3::initialize(model, *user, config, comm, zero3::EngineOptions{fault_under_test()});
      body(*engine, comm);
    });
  };
  run(c.from, kSeed, [&](zero3::Engine& engine, zero3::Comm& comm) {
    train(engine, comm.rank(), 0, c.steps_before);
    engine.save_checkpoint(dir);
  });
  run(c.to, kSeed + 1, [&](zero3::Engine& engine, zero3::Comm& comm) {
    engine.load_checkpoint(dir);
    train(engine, comm.rank(), c.steps_before, total);
    auto state = engine.consolidated_state_dict();
    if (comm.rank() == 0) consolidated = std::move(state);
  });
  fs::remove_all(dir);
  for (const auto& [path, expected] : dense.parameters_by_path()) {
    auto it = consolidated.find(path);
    if (it == consolidated.end()) {
      problems.push_back("no '" + path + "' after the resumed training");
      continue;
    }
    if (!at::equal(it->second, expected.detach()))
      problems.push_back(fmt::format("'{}' differ from the dense twin by {:g}", path,
                                     (it->second - expected.detach()).abs().max().item<double>()));
  }
  return problems;
}

}  // namespace zerocheck
