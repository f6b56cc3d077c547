// A scenario on a world of ranks: every rank interprets every operation, then the ranks agree
// on whether (and where) an invariant broke before the next operation starts.
#include "engine/legacy_mode.h"
#include "harness/interpreter/interpreter.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <unistd.h>

namespace zerocheck {

std::string OpOutcome::to_text(int64_t index) const {
  std::string line = fmt::format("#{} {}", index, zerocheck::to_string(kind));
  switch (status) {
    case Status::applied: line += ": " + detail; break;
    case Status::skipped: line += ": skipped (" + detail + ")"; break;
    case Status::refused: line += ": refused (" + refused_with + "), as the model predicts"; break;
  }
  return line;
}

namespace {

// Where scenarios' checkpoints go: memory (/dev/shm) where there is one, for a scenario's files
// live for milliseconds and a disk's directory operations cost more than the save itself;
// otherwise the temporary directory.
const std::filesystem::path& checkpoint_root() {
  static const std::filesystem::path root = [] {
    const std::filesystem::path shm = "/dev/shm";
    std::error_code error;
    if (std::filesystem::is_directory(shm, error) && ::access(shm.c_str(), W_OK | X_OK) == 0) return shm;
    return std::filesystem::temp_directory_path();
  }();
  return root;
}

}  // namespace

Verdict run_scenario(const Scenario& scenario, const RunOptions& options) {
  validate(scenario);
  // A fresh process for each scenario, as far as the legacy modes are concerned.
  zero3::reset_legacy_counters();
  static std::atomic<int> counter{0};
  const std::string dir = (checkpoint_root() / fmt::format("zerocheck_{}_{}", ::getpid(), counter++)).string();
  Verdict verdict;
  std::mutex mutex;
  std::vector<std::optional<Violation>> found(scenario.world_size);
  WorldOptions world;
  world.world_size = scenario.world_size;
  world.comm = options.comm;
  world.timeout = options.timeout;
  world.ranks_as_fibers = options.ranks_as_fibers;
  if (options.ranks_as_fibers)
    for (size_t i = 0; i < scenario.ops.size(); ++i)
      if (scenario.ops[i].kind == OpKind::backward)
        throw zero3::UsageError(fmt::format("ranks as fibers cannot run a backward (operation #{}): autograd keeps "
                                            "per-thread state while it runs",
                                            i));
  // One dense twin for the world (see SharedTwin), when an oracle reads it.
  std::shared_ptr<SharedTwin> twin;
  if (options.needs_dense_twin()) twin = make_shared_twin(scenario);
  try {
    run_world(world, [&](zero3::Comm& comm) {
      RankInterpreter rank(scenario, comm, options, dir, twin);
      at::Tensor my_flag = at::zeros({1}, at::kLong);
      at::Tensor flags = at::empty({scenario.world_size}, at::kLong);
      for (size_t i = 0; i < scenario.ops.size(); ++i) {
        std::string line;
        std::optional<Violation> mine;
        try {
          line = rank.apply(static_cast<int64_t>(i), scenario.ops[i]).to_text(static_cast<int64_t>(i));
        } catch (ViolationFound& v) {
          mine = v.violation;
          line = fmt::format("#{} {}: VIOLATION {}", i, to_string(scenario.ops[i].kind), v.violation.invariant);
        }
        // Every rank learns which ranks found a violation; the lowest one is reported. One
        // all_gather of a flag: this runs after every operation, so it is kept to one collective
        // (and its tensors to the two made before the first operation).
        *my_flag.data_ptr<int64_t>() = mine ? 1 : 0;
        comm.all_gather(my_flag, flags);
        if (comm.rank() == 0) {
          std::lock_guard<std::mutex> lock(mutex);
          verdict.history.push_back(line);
        }
        const int64_t* flag = flags.data_ptr<int64_t>();
        if (std::any_of(flag, flag + scenario.world_size, [](int64_t f) { return f != 0; })) {
          std::lock_guard<std::mutex> lock(mutex);
          found[comm.rank()] = mine;
          return;
        }
      }
    });
  } catch (const RankFailure& failure) {
    const bool any = std::any_of(found.begin(), found.end(), [](const auto& f) { return f.has_value(); });
    if (!any && options.disabled_oracles.count("I7") == 0)
      verdict.violation = Violation{"I7", static_cast<int64_t>(verdict.history.size()), failure.rank(), "", "", "", "",
                                    std::string("unexpected error: ") + failure.what()};
  }
  for (auto& f : found)
    if (f && !verdict.violation) verdict.violation = f;
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return verdict;
}

}  // namespace zerocheck
