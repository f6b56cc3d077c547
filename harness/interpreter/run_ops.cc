// Operations on a world of ranks: every rank interprets every operation, then the ranks agree on
// whether (and where) an invariant broke before the next operation starts.
#include "engine/legacy_mode.h"
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/internal/inert_knobs.h"
#include "harness/interpreter/internal/shared_twin.h"
#include "harness/oracles/oracles.h"
#include "harness/world/rank_memory.h"

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <unistd.h>

namespace zerocheck {

std::string OpOutcome::to_text(int64_t index) const {
  std::string line = fmt::format("#{} {}", index, zerocheck::to_string(kind));
  switch (status) {
    case Status::applied: line += detail.empty() ? "" : ": " + detail; break;
    case Status::skipped: line += ": skipped (" + detail + ")"; break;
    case Status::refused: line += ": refused (" + error_kind + "), as the model predicts"; break;
  }
  for (size_t i = 0; i < violations.size(); ++i) line += (i == 0 ? ": VIOLATION " : ", ") + violations[i].invariant;
  return line;
}

namespace {

nlohmann::json traffic_json(const std::optional<model::Traffic>& t) {
  if (!t) return nullptr;
  return {t->all_gather, t->reduce_scatter, t->all_reduce, t->broadcast, t->all_to_all, t->reduce_scatters,
          t->all_gathers};
}

std::optional<model::Traffic> traffic_from(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return model::Traffic{j.at(0).get<int64_t>(), j.at(1).get<int64_t>(), j.at(2).get<int64_t>(), j.at(3).get<int64_t>(),
                        j.at(4).get<int64_t>(), j.at(5).get<int64_t>(), j.at(6).get<int64_t>()};
}

template <class T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json OpOutcome::to_json() const {
  nlohmann::json found = nlohmann::json::array();
  for (const auto& v : violations) found.push_back(v.to_json());
  return {{"kind", zerocheck::to_string(kind)},
          {"status", static_cast<int>(status)},
          {"error_kind", error_kind},
          {"error_message", error_message},
          {"detail", detail},
          {"loss", optional_json(loss)},
          {"twin_loss", optional_json(twin_loss)},
          {"traffic", traffic_json(traffic)},
          {"expected_traffic", traffic_json(expected_traffic)},
          {"reached", reached},
          {"side_world", side_world},
          {"side_world_made", side_world_made},
          {"violations", found}};
}

OpOutcome OpOutcome::from_json(const nlohmann::json& j) {
  try {
    OpOutcome o;
    const std::string kind = j.at("kind").get<std::string>();
    const auto& names = schema::op_names();
    const auto row = std::find(names.begin(), names.end(), kind);
    if (row == names.end()) throw zero3::CommError("an outcome names no operation: '" + kind + "'");
    o.kind = static_cast<OpKind>(row - names.begin());
    o.status = static_cast<Status>(j.at("status").get<int>());
    o.error_kind = j.at("error_kind").get<std::string>();
    o.error_message = j.at("error_message").get<std::string>();
    o.detail = j.at("detail").get<std::string>();
    if (!j.at("loss").is_null()) o.loss = j.at("loss").get<double>();
    if (!j.at("twin_loss").is_null()) o.twin_loss = j.at("twin_loss").get<double>();
    o.traffic = traffic_from(j.at("traffic"));
    o.expected_traffic = traffic_from(j.at("expected_traffic"));
    o.reached = j.at("reached").get<std::vector<std::string>>();
    o.side_world = j.at("side_world").get<int>();
    o.side_world_made = j.at("side_world_made").get<bool>();
    for (const auto& v : j.at("violations")) o.violations.push_back(Violation::from_json(v));
    return o;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's operation outcome is malformed: ") + e.what());
  }
}

namespace {

// Where runs' checkpoints go: memory (/dev/shm) where there is one, for a scenario's files
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

RankReports run_ops(const model::Workload& workload, const std::vector<Op>& ops, const RunOptions& options,
                    World& world, const RankDrivers& drivers) {
  // A fresh process for each run, as far as the legacy modes are concerned.
  zero3::reset_legacy_counters();
  if (options.counts_rank_memory()) count_rank_memory();
  // The ranks share one checkpoint directory, named by the world.
  const std::string dir = (checkpoint_root() / world.fresh_name()).string();
  RankReports reports;
  std::mutex mutex;
  reports.found.resize(static_cast<size_t>(world.size()));
  // One dense twin for the world (see SharedTwin), when an oracle reads it.
  std::shared_ptr<SharedTwin> twin;
  if (options.needs_dense_twin()) twin = make_shared_twin(workload);
  try {
    world.run([&](zero3::Comm& comm) {
      RankInterpreter rank(workload, comm, options, dir, twin);
      const std::unique_ptr<RankDriver> driver = drivers ? drivers(comm.rank()) : nullptr;
      // What each rank sends after every operation: its stop flag, then its I9 digest.
      constexpr int64_t kSent = 1 + static_cast<int64_t>(oracles::kAgreementFields);
      const bool checks_agreement = options.checks_after_every_op && options.enabled("I9");
      at::Tensor my_flag, flags;
      {
        const NotChargedToTheRank harness;
        my_flag = at::zeros({kSent}, at::kLong);
        flags = at::empty({comm.world_size() * kSent}, at::kLong);
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        const auto index = static_cast<int64_t>(i);
        world.note_operation(index, to_string(ops[i].kind));
        if (driver) driver->before(rank, index);
        OpOutcome outcome;
        try {
          outcome = rank.apply(index, ops[i]);
        } catch (ViolationFound& v) {
          outcome.kind = ops[i].kind;
          outcome.violations = {std::move(v.violation)};
        }
        if (driver) driver->after(rank, index, outcome);
        const bool stop_here = options.stop_at_first_violation && !outcome.violations.empty();
        // Every rank learns which ranks found a violation; the lowest one is reported. One
        // all_gather of a flag and the rank's I9 digest: this runs after every operation, so it
        // is kept to one collective (and its tensors to the two made before the first
        // operation); not counted by I8, which measures the operation alone. It also keeps the
        // ranks in step for the shared twin.
        int64_t* sent = my_flag.data_ptr<int64_t>();
        sent[0] = stop_here ? 1 : 0;
        if (checks_agreement) {
          const NotChargedToTheRank harness;  // the digest's contiguous copies are the harness's
          const oracles::AgreementDigest digest = oracles::agreement_digest(rank.engine());
          std::copy(digest.begin(), digest.end(), sent + 1);
        }
        comm.all_gather(my_flag, flags);
        const int64_t* received = flags.data_ptr<int64_t>();
        bool flagged = false;  // some rank found a violation of its own in this operation
        for (int r = 0; r < comm.world_size(); ++r) flagged |= received[static_cast<int64_t>(r) * kSent] != 0;
        bool disagree = false;
        if (checks_agreement) {
          std::vector<oracles::AgreementDigest> by_rank(static_cast<size_t>(comm.world_size()));
          for (size_t r = 0; r < by_rank.size(); ++r)
            std::copy_n(received + static_cast<int64_t>(r) * kSent + 1, oracles::kAgreementFields, by_rank[r].begin());
          if (oracles::Result v = oracles::agreement(by_rank, "")) {
            disagree = true;  // every rank sees the same digests, so every rank stops alike
            v->op_index = index;
            // Reported once, and only when no rank's own check saw the operation go wrong: a rank
            // that skipped a step the others applied breaks the contract its own oracle names
            // (I11), and the disagreement is that violation's echo.
            if (comm.rank() == 0 && !flagged) outcome.violations.push_back(std::move(*v));
          }
        }
        {
          std::lock_guard<std::mutex> lock(mutex);
          auto& mine = reports.found[static_cast<size_t>(comm.rank())];
          mine.insert(mine.end(), outcome.violations.begin(), outcome.violations.end());
          if (comm.rank() == 0) reports.outcomes.push_back(std::move(outcome));
        }
        if (disagree && options.stop_at_first_violation) return;
        if (flagged) return;
      }
      if (driver) driver->finish(rank);
    });
  } catch (const RankFailure& failure) {
    reports.failed_rank = failure.rank();
    reports.failure = failure.what();
  }
  if (world.hosts(0)) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return reports;
}

namespace {

RankReports run_valid_scenario_ranks(const Scenario& scenario, const RunOptions& options, World& world,
                                     const RankDrivers& drivers = nullptr) {
  if (scenario.world_size > world.size())
    throw zero3::UsageError(
        fmt::format("the scenario needs {} ranks; the world has {}", scenario.world_size, world.size()));
  if (options.world.ranks == RankKind::fibers)
    for (size_t i = 0; i < scenario.ops.size(); ++i)
      if (scenario.ops[i].kind == OpKind::backward)
        throw zero3::UsageError(fmt::format("ranks as fibers cannot run a backward (operation #{}): autograd keeps "
                                            "per-thread state while it runs",
                                            i));
  const model::Workload workload = model::workload_of(scenario);
  if (scenario.world_size == world.size()) return run_ops(workload, scenario.ops, options, world, drivers);
  const std::unique_ptr<World> fewer = world.first(scenario.world_size);
  RankReports reports = run_ops(workload, scenario.ops, options, *fewer, drivers);
  reports.found.resize(static_cast<size_t>(scenario.world_size));
  return reports;
}

}  // namespace

Verdict run_scenario(const Scenario& scenario, const RunOptions& options) {
  validate(scenario);
  const ScenarioRun run = [](const Scenario& s, const RunOptions& o, const RankDrivers& drivers) {
    const std::unique_ptr<World> world = make_world(s.world_size, o.world);
    return run_valid_scenario_ranks(s, o, *world, drivers);
  };
  if (replays_inert_knobs(scenario, options)) return judge_with_inert_knobs(scenario, options, run);
  return judge(run(scenario, options, nullptr), options);
}

RankReports run_scenario_ranks(const Scenario& scenario, const RunOptions& options, World& world) {
  validate(scenario);
  return run_valid_scenario_ranks(scenario, options, world);
}

Verdict judge(const RankReports& reports, const RunOptions& options) {
  Verdict verdict;
  verdict.outcomes = reports.outcomes;
  for (size_t i = 0; i < reports.outcomes.size(); ++i)
    verdict.history.push_back(reports.outcomes[i].to_text(static_cast<int64_t>(i)));
  const bool any = std::any_of(reports.found.begin(), reports.found.end(), [](const auto& f) { return !f.empty(); });
  if (reports.failed_rank && !any && options.enabled("I7"))
    verdict.violation = Violation{"I7", static_cast<int64_t>(verdict.history.size()), *reports.failed_rank, "", "", "",
                                  "", std::string("unexpected error: ") + reports.failure};
  for (const auto& f : reports.found)
    if (!f.empty() && !verdict.violation) verdict.violation = f.front();
  return verdict;
}


nlohmann::json RankReports::to_json() const {
  nlohmann::json outcomes_json = nlohmann::json::array();
  for (const auto& o : outcomes) outcomes_json.push_back(o.to_json());
  nlohmann::json found_json = nlohmann::json::array();
  for (const auto& rank : found) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& v : rank) list.push_back(v.to_json());
    found_json.push_back(list);
  }
  return {{"outcomes", outcomes_json},
          {"found", found_json},
          {"failed_rank", failed_rank ? nlohmann::json(*failed_rank) : nlohmann::json(nullptr)},
          {"failure", failure}};
}

RankReports RankReports::from_json(const nlohmann::json& json) {
  try {
    RankReports reports;
    for (const auto& o : json.at("outcomes")) reports.outcomes.push_back(OpOutcome::from_json(o));
    for (const auto& rank : json.at("found")) {
      reports.found.emplace_back();
      for (const auto& v : rank) reports.found.back().push_back(Violation::from_json(v));
    }
    if (!json.at("failed_rank").is_null()) reports.failed_rank = json.at("failed_rank").get<int>();
    reports.failure = json.at("failure").get<std::string>();
    return reports;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's scenario report is malformed: ") + e.what());
  }
}

void RankReports::merge(const RankReports& other) {
  if (outcomes.empty()) outcomes = other.outcomes;
  if (found.size() < other.found.size()) found.resize(other.found.size());
  for (size_t r = 0; r < other.found.size(); ++r)
    if (!other.found[r].empty() && found[r].empty()) found[r] = other.found[r];
  // Every rank names the same first failure (the store decides it); keep the one we have.
  if (!failed_rank && other.failed_rank) {
    failed_rank = other.failed_rank;
    failure = other.failure;
  }
}

}  // namespace zerocheck
