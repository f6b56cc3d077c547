#include "harness/tools/train.h"

#include "engine/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/testing/models.h"
#include "harness/interpreter/interpreter.h"
#include "harness/oracles/oracles.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>

namespace zerocheck {
namespace {

// The operations of a run: initialize (index 0), then these four per step.
const OpKind kStepOps[] = {OpKind::forward, OpKind::backward, OpKind::step, OpKind::zero_grad};
constexpr int64_t kOpsPerStep = 4;

// Where a resumed run starts: the steps its checkpoint had taken, at which world size.
struct Resume {
  int64_t first_step = 0;
  int world = 0;
  bool resumed() const { return world > 0; }
};

double mean_in_rank_order(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// The one NaN rule (oracles::same_numbers) for two numbers: a NaN on one side only is an
// infinite difference, never a dropped one.
double difference(double a, double b) {
  if (oracles::same_numbers(a, b)) return 0;
  const double d = std::abs(a - b);
  return std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
}

OptimizerFactory optimizer_factory(const TrainOptions& options) {
  if (options.optimizer == "sgd") return sgd_factory(options.lr, 0.9);
  if (options.optimizer == "adam") return adam_factory(options.lr);
  throw zero3::UsageError("--optimizer " + options.optimizer + ": expected adam or sgd");
}

// The training step `index` (an operation of the run) belongs to, counting the saved run's.
int64_t step_of(int64_t index, const Resume& resume) { return resume.first_step + (index - 1) / kOpsPerStep; }

// What the saved run's steps reached, collected as a twin replays them (every twin does, the
// shared one before any rank runs, a rank's own later).
struct ReachedBefore {
  std::mutex mutex;
  std::set<std::string> paths;
};

model::Workload train_workload(const TrainOptions& options, const ModelSpec& spec, const Resume& resume,
                               ReachedBefore* reached_before) {
  model::Workload w;
  // A resumed rank starts from other values than the saved run did: a parameter the load missed
  // then shows as a difference from the twin, which starts from the saved run's.
  const uint64_t seed = options.seed;
  w.build = [spec, seed, resumed = resume.resumed()] { return spec.build(resumed ? seed + 1 : seed); };
  if (resume.resumed()) {
    w.build_twin = [spec, seed] { return spec.build(seed); };
    w.resume_from = options.resume_dir;
  }
  const int64_t batch = options.batch_size;
  w.batch = [spec, seed, batch, resume](int64_t index, int rank) {
    return make_batch(spec, seed, step_of(index, resume), rank, batch);
  };
  w.route = [spec, resume](int64_t index, int rank, const Op&) { return spec.route(step_of(index, resume), rank); };
  w.optimizer = optimizer_factory(options);
  w.optimizer_states = options.optimizer == "sgd" ? 1 : 2;
  w.config.zero_optimization.stage3_param_persistence_threshold = options.persistence_threshold;
  w.config.placement = spec.placement;
  if (resume.resumed()) {
    // The saved run's steps, at its world size, as its twin took them; left saved for the resume.
    w.history = [spec, seed, batch, resume, reached_before](model::DenseTwin& twin) {
      twin.retarget("");
      for (int64_t step = 0; step < resume.first_step; ++step) {
        std::vector<Batch> batches;
        std::vector<zero3::Route> routes;
        for (int r = 0; r < resume.world; ++r) {
          batches.push_back(make_batch(spec, seed, step, r, batch));
          routes.push_back(spec.route(step, r));
        }
        twin.forward(batches, routes);
        const std::set<std::string> reached = twin.backward();
        const std::lock_guard<std::mutex> lock(reached_before->mutex);
        reached_before->paths.insert(reached.begin(), reached.end());
        twin.step();
        twin.zero_grad();
      }
      twin.save();
    };
  }
  return w;
}

std::vector<Op> train_ops(int64_t steps) {
  std::vector<Op> ops{Op(OpKind::initialize)};
  for (int64_t s = 0; s < steps; ++s)
    for (OpKind kind : kStepOps) ops.emplace_back(kind);
  return ops;
}

// Returns `given` with the saved run's model, seed, batch size, optimizer, learning rate and
// threshold when it resumes, and where the saved run stopped.
std::pair<TrainOptions, Resume> resolve_resume(const TrainOptions& given) {
  if (given.resume_dir.empty()) return {given, Resume{}};
  const zero3::LoadedCheckpoint saved = zero3::read_checkpoint(given.resume_dir);
  const nlohmann::json& client = saved.manifest.client_state;
  if (!client.contains("zerocheck_train") || !client["zerocheck_train"].is_object())
    throw zero3::CheckpointError(zero3::manifest_path(given.resume_dir) +
                                 ": not written by `zerocheck train --save` (no client_state.zerocheck_train)");
  const nlohmann::json& run = client["zerocheck_train"];
  TrainOptions options = given;
  Resume resume;
  try {
    options.model = run.at("model").get<std::string>();
    options.seed = run.at("seed").get<uint64_t>();
    options.batch_size = run.at("batch").get<int64_t>();
    options.optimizer = run.at("optimizer").get<std::string>();
    options.lr = run.at("lr").get<double>();
    options.persistence_threshold = run.at("persistence_threshold").get<int64_t>();
    resume.first_step = run.at("steps").get<int64_t>();
    resume.world = run.at("world").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CheckpointError(zero3::manifest_path(given.resume_dir) + ": client_state.zerocheck_train: " + e.what());
  }
  if (resume.world != saved.manifest.world_size || resume.first_step < 0)
    throw zero3::CheckpointError(zero3::manifest_path(given.resume_dir) +
                                 ": client_state.zerocheck_train disagrees with the manifest");
  return {options, resume};
}

void check_options(const TrainOptions& options) {
  if (options.steps < 1) throw zero3::UsageError("--steps must be >= 1");
  if (options.batch_size < 1) throw zero3::UsageError("batch size must be >= 1");
  (void)optimizer_factory(options);
}

// One rank's part of a training run, between the interpreter's operations.
class TrainDriver final : public RankDriver {
 public:
  TrainDriver(const TrainOptions& options, const Resume& resume, int64_t optimizer_states, World& world,
              ReachedBefore& reached_before, TrainRankResult& result)
      : options_(options), resume_(resume), optimizer_states_(optimizer_states), world_(world), result_(result) {
    const std::lock_guard<std::mutex> lock(reached_before.mutex);
    trained_ = reached_before.paths;
  }

  void before(RankInterpreter& rank, int64_t index) override {
    // A lost rank's peers name the training step it was in (`--kill-rank R --at-op STEP`);
    // initialize is part of step 0.
    const int64_t step = index == 0 ? 0 : (index - 1) / kOpsPerStep;
    world_.note_operation(step, "training step");
    if (index > 0 && result_.rank == options_.fail_rank && step == options_.fail_step && (index - 1) % kOpsPerStep == 0)
      throw zero3::UsageError("injected failure at step " + std::to_string(step) + " (--fail-rank)");
  }

  void after(RankInterpreter& rank, int64_t index, const OpOutcome& outcome) override {
    note_violations(outcome);
    if (index == 0) return;
    const auto step = static_cast<size_t>((index - 1) / kOpsPerStep);
    switch (outcome.kind) {
      case OpKind::forward:
        if (outcome.loss) result_.losses[step] = *outcome.loss;
        if (outcome.twin_loss) result_.twin_losses[step] = *outcome.twin_loss;
        forward_ = outcome;
        break;
      case OpKind::backward:
        trained_.insert(outcome.reached.begin(), outcome.reached.end());
        result_.last_step = forward_.traffic.value_or(model::Traffic{});
        result_.last_step += outcome.traffic.value_or(model::Traffic{});
        result_.expected_last_step = forward_.expected_traffic.value_or(model::Traffic{});
        result_.expected_last_step += outcome.expected_traffic.value_or(model::Traffic{});
        break;
      case OpKind::zero_grad: {
        // What the rank's allocations hold after every step, against the spec's yardstick
        // (docs/DESIGN.md): counted where allocated, so a copy nobody lists counts too.
        const int64_t expected = model::expected_state_bytes(rank.expectation(), trained_, result_.rank, optimizer_states_);
        const int64_t held = rank.held_bytes(expected);
        result_.state_bytes = held;
        result_.expected_state_bytes = expected;
        if (held >= 0 && held != expected)
          result_.problems.push_back(fmt::format("rank {} step {}: holds {} state bytes, expected {}", result_.rank,
                                                 resume_.first_step + static_cast<int64_t>(step), held, expected));
        break;
      }
      default: break;
    }
  }

  void finish(RankInterpreter& rank) override {
    const RankInterpreter::Consolidated consolidated = rank.check_consolidated();
    if (consolidated.violation) result_.problems.push_back(consolidated.violation->to_text());
    for (const auto& [path, diff] : consolidated.max_abs_difference) {
      result_.max_param_abs_diff = std::max(result_.max_param_abs_diff, diff);
      if (diff != 0) result_.differing_parameters.push_back(fmt::format("'{}' by {:g}", path, diff));
    }
    if (options_.save_dir.empty()) return;
    const nlohmann::json client{
        {"zerocheck_train",
         {{"model", options_.model}, {"seed", options_.seed}, {"batch", options_.batch_size},
          {"optimizer", options_.optimizer}, {"lr", options_.lr},
          {"persistence_threshold", options_.persistence_threshold},
          {"steps", resume_.first_step + options_.steps}, {"world", world_.size()}}}};
    rank.save_to(options_.save_dir, client.dump());
  }

 private:

  void note_violations(const OpOutcome& outcome) {
    for (const auto& v : outcome.violations) result_.problems.push_back(v.to_text());
  }

  const TrainOptions& options_;
  const Resume resume_;
  const int64_t optimizer_states_;
  World& world_;
  TrainRankResult& result_;
  std::set<std::string> trained_;  // parameters that have had a gradient on some rank so far
  OpOutcome forward_;              // this step's
};

std::vector<TrainRankResult> train_ranks(const TrainOptions& options, const Resume& resume, const ModelSpec& spec,
                                         World& world) {
  ReachedBefore reached_before;  // filled by the twin's history, before any rank runs
  const model::Workload workload = train_workload(options, spec, resume, &reached_before);
  RunOptions run(options.fault);
  run.stop_at_first_violation = false;  // report every broken promise, as a training log would
  std::vector<TrainRankResult> results(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    // Every step has a loss on both sides, NaN until measured: a run that fails early still
    // reports every rank and step.
    TrainRankResult& result = results[static_cast<size_t>(r)];
    result.rank = r;
    result.losses.assign(static_cast<size_t>(options.steps), std::nan(""));
    result.twin_losses.assign(static_cast<size_t>(options.steps), std::nan(""));
  }
  const RankReports reports = run_ops(workload, train_ops(options.steps), run, world, [&](int rank) {
    return std::make_unique<TrainDriver>(options, resume, workload.optimizer_states, world, reached_before,
                                         results[static_cast<size_t>(rank)]);
  });
  std::vector<TrainRankResult> mine;
  for (int r = 0; r < world.size(); ++r) {
    if (!world.hosts(r)) continue;
    if (reports.failed_rank) results[static_cast<size_t>(r)].failure = reports.failure;
    mine.push_back(std::move(results[static_cast<size_t>(r)]));
  }
  return mine;
}

}  // namespace

std::vector<TrainRankResult> run_training_ranks(const TrainOptions& given, World& world) {
  const auto [options, resume] = resolve_resume(given);
  check_options(options);
  return train_ranks(options, resume, model_spec(options.model), world);
}

TrainReport judge_training(const TrainOptions& given, std::vector<TrainRankResult> parts) {
  const auto [options, resume] = resolve_resume(given);
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const int world = static_cast<int>(parts.size());
  for (int r = 0; r < world; ++r)
    if (parts[static_cast<size_t>(r)].rank != r ||
        static_cast<int64_t>(parts[static_cast<size_t>(r)].losses.size()) != options.steps)
      throw zero3::CommError(fmt::format("training report {} is for rank {} with {} losses; expected rank {} with {}",
                                         r, parts[static_cast<size_t>(r)].rank,
                                         parts[static_cast<size_t>(r)].losses.size(), r, options.steps));
  if (world == 0) throw zero3::CommError("no rank reported its training");
  TrainReport report;
  report.world_size = world;
  report.steps = options.steps;
  report.model = options.model;
  report.first_step = resume.first_step;
  report.resumed_from_world = resume.world;
  if (!parts[0].failure.empty()) report.problems.push_back(parts[0].failure);
  for (const auto& part : parts) {
    report.state_bytes_per_rank.push_back(part.state_bytes);
    report.expected_state_bytes_per_rank.push_back(part.expected_state_bytes);
    report.problems.insert(report.problems.end(), part.problems.begin(), part.problems.end());
  }
  for (int64_t step = 0; step < options.steps; ++step) {
    std::vector<double> engine, dense;
    for (const auto& part : parts) {
      engine.push_back(part.losses[static_cast<size_t>(step)]);
      dense.push_back(part.twin_losses[static_cast<size_t>(step)]);
    }
    report.losses.push_back(mean_in_rank_order(engine));
    report.dense_losses.push_back(mean_in_rank_order(dense));
    report.max_loss_abs_diff = std::max(report.max_loss_abs_diff, difference(report.losses.back(), report.dense_losses.back()));
  }
  report.max_param_abs_diff = parts[0].max_param_abs_diff;
  report.traffic_last_step = parts[0].last_step;
  report.expected_traffic_last_step = parts[0].expected_last_step;
  return report;
}

TrainReport run_training(const TrainOptions& options, World& world) {
  return judge_training(options, run_training_ranks(options, world));
}

namespace {
nlohmann::json traffic_json(const model::Traffic& t) {
  return {{"all_gather", t.all_gather}, {"reduce_scatter", t.reduce_scatter}, {"all_reduce", t.all_reduce},
          {"broadcast", t.broadcast}, {"all_to_all", t.all_to_all}, {"reduce_scatters", t.reduce_scatters},
          {"all_gathers", t.all_gathers}};
}
int64_t total(const model::Traffic& t) {
  return t.all_gather + t.reduce_scatter + t.all_reduce + t.broadcast + t.all_to_all;
}

model::Traffic traffic_from_json(const nlohmann::json& j) {
  model::Traffic t;
  t.all_gather = j.at("all_gather").get<int64_t>();
  t.reduce_scatter = j.at("reduce_scatter").get<int64_t>();
  t.all_reduce = j.at("all_reduce").get<int64_t>();
  t.broadcast = j.at("broadcast").get<int64_t>();
  t.all_to_all = j.at("all_to_all").get<int64_t>();
  t.reduce_scatters = j.at("reduce_scatters").get<int64_t>();
  t.all_gathers = j.at("all_gathers").get<int64_t>();
  return t;
}

// JSON has no NaN or infinity: such a number travels as a string ("nan", "inf") and comes back.
nlohmann::json number_json(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
}
double number_from(const nlohmann::json& j) {
  if (!j.is_string()) return j.get<double>();
  const std::string text = j.get<std::string>();
  if (text == "nan") return std::nan("");
  return text == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}
nlohmann::json numbers_json(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : values) out.push_back(number_json(v));
  return out;
}
std::vector<double> numbers_from(const nlohmann::json& j) {
  std::vector<double> out;
  for (const auto& v : j) out.push_back(number_from(v));
  return out;
}
}  // namespace

nlohmann::json TrainRankResult::to_json() const {
  return {{"rank", rank},
          {"losses", numbers_json(losses)},
          {"twin_losses", numbers_json(twin_losses)},
          {"last_step", traffic_json(last_step)},
          {"expected_last_step", traffic_json(expected_last_step)},
          {"state_bytes", state_bytes},
          {"expected_state_bytes", expected_state_bytes},
          {"problems", problems},
          {"failure", failure},
          {"max_param_abs_diff", number_json(max_param_abs_diff)},
          {"differing_parameters", differing_parameters}};
}

TrainRankResult TrainRankResult::from_json(const nlohmann::json& j) {
  try {
    TrainRankResult r;
    r.rank = j.at("rank").get<int>();
    r.losses = numbers_from(j.at("losses"));
    r.twin_losses = numbers_from(j.at("twin_losses"));
    r.last_step = traffic_from_json(j.at("last_step"));
    r.expected_last_step = traffic_from_json(j.at("expected_last_step"));
    r.state_bytes = j.at("state_bytes").get<int64_t>();
    r.expected_state_bytes = j.at("expected_state_bytes").get<int64_t>();
    r.problems = j.at("problems").get<std::vector<std::string>>();
    r.failure = j.at("failure").get<std::string>();
    r.max_param_abs_diff = number_from(j.at("max_param_abs_diff"));
    r.differing_parameters = j.at("differing_parameters").get<std::vector<std::string>>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's training report is malformed: ") + e.what());
  }
}

nlohmann::json TrainOptions::to_json() const {
  return {{"steps", steps},
          {"model", model},
          {"seed", seed},
          {"batch", batch_size},
          {"optimizer", optimizer},
          {"lr", lr},
          {"persistence_threshold", persistence_threshold},
          {"engine", std::string(zero3::fault_name(fault))},
          {"fail_rank", fail_rank},
          {"fail_step", fail_step},
          {"save_dir", save_dir},
          {"resume_dir", resume_dir}};
}

TrainOptions TrainOptions::from_json(const nlohmann::json& j) {
  try {
    TrainOptions o;
    o.steps = j.at("steps").get<int64_t>();
    o.model = j.at("model").get<std::string>();
    o.seed = j.at("seed").get<uint64_t>();
    o.batch_size = j.at("batch").get<int64_t>();
    o.optimizer = j.at("optimizer").get<std::string>();
    o.lr = j.at("lr").get<double>();
    o.persistence_threshold = j.at("persistence_threshold").get<int64_t>();
    o.fault = zero3::engine_by_name(j.at("engine").get<std::string>(), "engine");
    o.fail_rank = j.at("fail_rank").get<int>();
    o.fail_step = j.at("fail_step").get<int64_t>();
    o.save_dir = j.at("save_dir").get<std::string>();
    o.resume_dir = j.at("resume_dir").get<std::string>();
    return o;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::UsageError(std::string("training options JSON is malformed: ") + e.what());
  }
}

int64_t TrainReport::elements_moved_per_step() const { return total(traffic_last_step); }
int64_t TrainReport::expected_elements_per_step() const { return total(expected_traffic_last_step); }

nlohmann::json TrainReport::to_json() const {
  return nlohmann::json{{"world", world_size},
                        {"steps", steps},
                        {"first_step", first_step},
                        {"resumed_from_world", resumed_from_world},
                        {"model", model},
                        {"losses", numbers_json(losses)},
                        {"dense_losses", numbers_json(dense_losses)},
                        {"max_loss_abs_diff", number_json(max_loss_abs_diff)},
                        {"max_param_abs_diff", number_json(max_param_abs_diff)},
                        {"parity_tolerance", kParityTolerance},
                        {"state_bytes_per_rank", state_bytes_per_rank},
                        {"expected_state_bytes_per_rank", expected_state_bytes_per_rank},
                        {"elements_moved_per_step", elements_moved_per_step()},
                        {"expected_elements_per_step", expected_elements_per_step()},
                        {"traffic_last_step", traffic_json(traffic_last_step)},
                        {"expected_traffic_last_step", traffic_json(expected_traffic_last_step)},
                        {"problems", problems},
                        {"ok", ok()}};
}

}  // namespace zerocheck
