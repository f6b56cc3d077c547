#include "harness/tools/reshard_check.h"

#include "engine/testing/fault_under_test.h"
#include "harness/tools/train.h"
#include "harness/world/world.h"

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
  const std::string dir = (fs::temp_directory_path() / fmt::format("zerocheck_reshard_{}_{}", test_name(c), ::getpid()))
                              .string();
  fs::remove_all(dir);
  TrainOptions options;
  options.model = c.model;
  options.seed = kSeed;
  options.batch_size = kBatch;
  options.optimizer = c.optimizer;
  options.lr = c.optimizer == "sgd" ? 0.05 : 0.02;
  options.persistence_threshold = c.persistence_threshold;
  options.fault = fault_under_test();
  options.steps = c.steps_before;
  options.save_dir = dir;
  const TrainReport saved = run_training(options, *make_world(c.from));
  std::vector<std::string> problems = saved.problems;
  if (saved.ok()) {
    TrainOptions resumed;
    resumed.fault = options.fault;
    resumed.steps = c.steps_after;
    resumed.resume_dir = dir;
    const TrainReport report = run_training(resumed, *make_world(c.to));
    problems.insert(problems.end(), report.problems.begin(), report.problems.end());
  }
  fs::remove_all(dir);
  return problems;
}

}  // namespace zerocheck
