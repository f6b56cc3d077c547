// A scenario on a world of ranks: every rank interprets every operation, then the ranks agree
// on whether (and where) an invariant broke before the next operation starts.
#include "engine/legacy_mode.h"
#include "harness/interpreter/interpreter.h"
#include "harness/process/process_rank.h"

#include <nlohmann/json.hpp>

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

RankReports run_scenario_ranks(const Scenario& scenario, const RunOptions& options) {
  validate(scenario);
  // A fresh process for each scenario, as far as the legacy modes are concerned.
  zero3::reset_legacy_counters();
  static std::atomic<int> counter{0};
  // The ranks share one checkpoint directory; the processes of a world name it after their job.
  ProcessRank* const process = current_process_rank();
  const std::string name = process ? "zerocheck_" + process->job_tag()
                                   : fmt::format("zerocheck_{}_{}", ::getpid(), counter++);
  const std::string dir = (checkpoint_root() / name).string();
  RankReports reports;
  std::mutex mutex;
  reports.found.resize(scenario.world_size);
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
        note_operation(static_cast<int64_t>(i), to_string(scenario.ops[i].kind));
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
          reports.history.push_back(line);
        }
        const int64_t* flag = flags.data_ptr<int64_t>();
        if (std::any_of(flag, flag + scenario.world_size, [](int64_t f) { return f != 0; })) {
          std::lock_guard<std::mutex> lock(mutex);
          reports.found[comm.rank()] = mine;
          return;
        }
      }
    });
  } catch (const RankFailure& failure) {
    reports.failed_rank = failure.rank();
    reports.failure = failure.what();
  }
  if (process == nullptr || process->rank() == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return reports;
}

Verdict judge(const RankReports& reports, const RunOptions& options) {
  Verdict verdict;
  verdict.history = reports.history;
  const bool any = std::any_of(reports.found.begin(), reports.found.end(), [](const auto& f) { return f.has_value(); });
  if (reports.failed_rank && !any && options.disabled_oracles.count("I7") == 0)
    verdict.violation = Violation{"I7", static_cast<int64_t>(verdict.history.size()), *reports.failed_rank, "", "", "",
                                  "", std::string("unexpected error: ") + reports.failure};
  for (const auto& f : reports.found)
    if (f && !verdict.violation) verdict.violation = f;
  return verdict;
}

Verdict run_scenario(const Scenario& scenario, const RunOptions& options) {
  return judge(run_scenario_ranks(scenario, options), options);
}

nlohmann::json RankReports::to_json() const {
  nlohmann::json found_json = nlohmann::json::array();
  for (const auto& f : found) found_json.push_back(f ? f->to_json() : nlohmann::json(nullptr));
  return {{"history", history},
          {"found", found_json},
          {"failed_rank", failed_rank ? nlohmann::json(*failed_rank) : nlohmann::json(nullptr)},
          {"failure", failure}};
}

RankReports RankReports::from_json(const nlohmann::json& json) {
  try {
    RankReports reports;
    reports.history = json.at("history").get<std::vector<std::string>>();
    for (const auto& f : json.at("found"))
      reports.found.push_back(f.is_null() ? std::nullopt : std::optional<Violation>(Violation::from_json(f)));
    if (!json.at("failed_rank").is_null()) reports.failed_rank = json.at("failed_rank").get<int>();
    reports.failure = json.at("failure").get<std::string>();
    return reports;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's scenario report is malformed: ") + e.what());
  }
}

void RankReports::merge(const RankReports& other) {
  if (history.empty()) history = other.history;
  if (found.size() < other.found.size()) found.resize(other.found.size());
  for (size_t r = 0; r < other.found.size(); ++r)
    if (other.found[r] && !found[r]) found[r] = other.found[r];
  // Every rank names the same first failure (the store decides it); keep the one we have.
  if (!failed_rank && other.failed_rank) {
    failed_rank = other.failed_rank;
    failure = other.failure;
  }
}

}  // namespace zerocheck
