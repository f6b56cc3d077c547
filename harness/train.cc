#include "harness/train.h"

#include "engine/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/optimizer_rebuild.h"
#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"
#include "harness/dense_baseline.h"
#include "harness/models.h"
#include "harness/process/process_rank.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <mutex>

namespace zerocheck {
namespace {

// What the dense side and the model know per step, computed before the world starts.
struct DenseRun {
  std::vector<double> losses;
  // per step, per rank: what forward and backward must move (model/traffic.cc)
  std::vector<std::vector<std::pair<model::Traffic, model::Traffic>>> traffic;
  std::vector<std::vector<int64_t>> expected_state_bytes;  // per step, per rank, after the step
  std::map<std::string, at::Tensor> final_parameters;
};

double mean_in_rank_order(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

zero3::Config training_config(const ModelSpec& spec) {
  zero3::Config config;
  // Partition everything with elements: the point is to exercise sharding on small models.
  config.zero_optimization.stage3_param_persistence_threshold = 0;
  config.placement = spec.placement;
  return config;
}

std::vector<zero3::Route> routes_of(const ModelSpec& spec, int64_t step, int world) {
  std::vector<zero3::Route> routes;
  for (int r = 0; r < world; ++r) routes.push_back(spec.route(step, r));
  return routes;
}

std::vector<at::Tensor> trainable_parameters(const zero3::Module& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : zero3::unique_parameters(model))
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Replays one rank's forward on the dense model with the schedule traced, and finds which
// parameters its backward reaches (without touching the dense model's gradients).
std::pair<model::Traffic, model::Traffic> rank_traffic(zero3::Module& dense, const std::shared_ptr<zero3::Module>& root,
                                                       const model::Expectation& expected, int world,
                                                       const Batch& batch, const zero3::Route& route,
                                                       std::set<std::string>& trained) {
  model::TrafficTrace trace(expected, root, world);
  at::Tensor loss;
  {
    zero3::InterceptorScope scope(&trace);
    zero3::Route cursor = route;
    loss = training_loss(dense(batch.input, cursor), batch.target);
  }
  std::set<std::string> reached;
  if (loss.requires_grad()) {
    const auto named = unique_named_parameters(root);
    std::vector<std::string> paths;
    std::vector<at::Tensor> inputs;
    for (const auto& [path, p] : named)
      if (p.requires_grad()) paths.push_back(path), inputs.push_back(p);
    const auto grads = torch::autograd::grad({loss}, inputs, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                             /*allow_unused=*/true);
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) reached.insert(paths[i]);
  }
  trained.insert(reached.begin(), reached.end());
  return {trace.forward(), trace.backward(reached)};
}

// Where a resumed run starts: the steps its checkpoint had taken, at which world size.
struct Resume {
  int64_t first_step = 0;
  int world = 0;
};

model::Expectation expectation_at(const std::shared_ptr<zero3::Module>& model, const ModelSpec& spec, int world) {
  const zero3::Config config = training_config(spec);
  auto expected = model::expect(model, config.placement, config.zero_optimization.stage3_param_persistence_threshold,
                                world);
  if (auto* refusal = std::get_if<model::PlacementRefusal>(&expected))
    throw zero3::UsageError("model '" + spec.name + "': its placement cannot be evaluated: " + refusal->reason);
  return std::get<model::Expectation>(expected);
}

DenseRun run_dense(const TrainOptions& options, const ModelSpec& spec, int64_t optimizer_states, const Resume& resume) {
  DenseRun run;
  const int world = options.world_size;
  const zero3::Config config = training_config(spec);
  auto model = spec.build(options.seed);
  auto expected = model::expect(model, config.placement, config.zero_optimization.stage3_param_persistence_threshold,
                                world);
  if (auto* refusal = std::get_if<model::PlacementRefusal>(&expected))
    throw zero3::UsageError("model '" + spec.name + "': its placement cannot be evaluated: " + refusal->reason);
  const model::Expectation& expectation = std::get<model::Expectation>(expected);
  DenseBaseline dense(model, adam_factory(options.lr));
  std::set<std::string> trained;  // parameters that have had a gradient on some rank so far
  if (resume.first_step > 0) {  // the saved run's steps, at its world size
    const model::Expectation saved_expectation = expectation_at(model, spec, resume.world);
    for (int64_t step = 0; step < resume.first_step; ++step) {
      std::vector<Batch> batches;
      for (int r = 0; r < resume.world; ++r) batches.push_back(make_batch(spec, options.seed, step, r, options.batch_size));
      const std::vector<zero3::Route> routes = routes_of(spec, step, resume.world);
      for (int r = 0; r < resume.world; ++r)
        rank_traffic(*model, model, saved_expectation, resume.world, batches[r], routes[r], trained);
      dense.step(batches, routes);
    }
  }
  for (int64_t step = resume.first_step; step < resume.first_step + options.steps; ++step) {
    std::vector<Batch> batches;
    for (int r = 0; r < world; ++r) batches.push_back(make_batch(spec, options.seed, step, r, options.batch_size));
    const std::vector<zero3::Route> routes = routes_of(spec, step, world);
    std::vector<std::pair<model::Traffic, model::Traffic>> traffic;
    for (int r = 0; r < world; ++r)
      traffic.push_back(rank_traffic(*model, model, expectation, world, batches[r], routes[r], trained));
    run.traffic.push_back(traffic);
    std::vector<int64_t> bytes;
    for (int r = 0; r < world; ++r)
      bytes.push_back(model::expected_state_bytes(expectation, trained, r, optimizer_states));
    run.expected_state_bytes.push_back(bytes);
    run.losses.push_back(mean_in_rank_order(dense.step(batches, routes)));
  }
  run.final_parameters = dense.parameters_by_path();
  return run;
}

// Returns `given` with the saved run's model, seed, batch size and learning rate when it resumes,
// and where the saved run stopped.
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
    options.lr = run.at("lr").get<double>();
    resume.first_step = run.at("steps").get<int64_t>();
    resume.world = run.at("world").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CheckpointError(zero3::manifest_path(given.resume_dir) + ": client_state.zerocheck_train: " + e.what());
  }
  if (resume.world != saved.manifest.world_size || resume.first_step < 0)
    throw zero3::CheckpointError(zero3::manifest_path(given.resume_dir) + ": client_state.zerocheck_train disagrees with the manifest");
  return {options, resume};
}

void check_options(const TrainOptions& options) {
  if (options.steps < 1) throw zero3::UsageError("--steps must be >= 1");
  if (options.batch_size < 1) throw zero3::UsageError("batch size must be >= 1");
}

// Rank 0's consolidated parameters against the dense ones (I3), into its result.
void compare_parameters(const DenseRun& dense, const std::map<std::string, at::Tensor>& consolidated,
                        TrainRankResult& out) {
  for (const auto& [path, expected] : dense.final_parameters) {
    auto it = consolidated.find(path);
    if (it == consolidated.end()) {
      out.problems.push_back("consolidated state dict lacks '" + path + "'");
      continue;
    }
    if (it->second.sizes() != expected.sizes()) {
      out.problems.push_back("'" + path + "' has shape " + c10::str(it->second.sizes()) + ", dense has " +
                             c10::str(expected.sizes()));
      continue;
    }
    if (expected.numel() == 0) continue;
    const double diff = (it->second - expected).abs().max().item<double>();
    out.max_param_abs_diff = std::max(out.max_param_abs_diff, diff);
    if (diff > kParityTolerance) out.differing_parameters.push_back(fmt::format("'{}' by {:g}", path, diff));
  }
}

std::vector<TrainRankResult> train_ranks(const TrainOptions& options, const Resume& resume, const ModelSpec& spec,
                                         const DenseRun& dense) {
  const int world = options.world_size;
  const zero3::Config config = training_config(spec);
  std::vector<TrainRankResult> results(world);
  std::vector<char> ran(world, 0);  // in a worker: only its own rank (char: ranks write it concurrently)
  WorldOptions world_options;
  world_options.world_size = world;
  world_options.comm = options.comm;
  world_options.timeout = options.timeout;
  run_world(world_options, [&](zero3::Comm& comm) {
    const int rank = comm.rank();
    TrainRankResult& mine = results[rank];
    ran[rank] = 1;
    mine.rank = rank;
    mine.losses.assign(options.steps, 0.0);
    auto problem = [&](const std::string& what) { mine.problems.push_back(what); };
    auto judge = [&](int64_t step, const oracles::Result& found) {
      if (found)
        problem(fmt::format("rank {} step {}: {} {}: expected {}, measured {}", rank, step, found->invariant,
                            found->message, found->expected, found->actual));
    };
    auto model = spec.build(options.seed);
    auto user_optimizer = adam_factory(options.lr)(trainable_parameters(*model));
    auto engine = zero3::initialize(model, *user_optimizer, config, comm, zero3::EngineOptions(options.fault));
    if (!options.resume_dir.empty()) engine->load_checkpoint(options.resume_dir);
    for (int64_t step = 0; step < options.steps; ++step) {
      note_operation(step, "training step");
      if (rank == options.fail_rank && step == options.fail_step)
        throw zero3::UsageError("injected failure at step " + std::to_string(step) + " (--fail-rank)");
      const int64_t data_step = resume.first_step + step;  // batches and routes continue the saved run's
      const Batch batch = make_batch(spec, options.seed, data_step, rank, options.batch_size);
      const auto& [forward_expected, backward_expected] = dense.traffic[step][rank];
      // Every collective kind, every operation of every step (I8).
      auto before = comm.stats();
      at::Tensor loss = training_loss(engine->forward(batch.input, spec.route(data_step, rank)), batch.target);
      const model::Traffic forward = model::traffic_between(before, comm.stats());
      judge(step, oracles::traffic("forward", forward_expected, forward, ""));
      before = comm.stats();
      engine->backward(loss);
      const model::Traffic backward = model::traffic_between(before, comm.stats());
      judge(step, oracles::traffic("backward", backward_expected, backward, ""));
      before = comm.stats();
      engine->step();
      engine->zero_grad();
      judge(step, oracles::traffic("step and zero_grad", model::Traffic{}, model::traffic_between(before, comm.stats()), ""));
      mine.last_step = forward;
      mine.last_step += backward;
      mine.losses[step] = loss.item<double>();
      // State bytes, measured from storage, after every step (I4's yardstick).
      const int64_t held = measured_state_bytes(*engine);
      if (held != dense.expected_state_bytes[step][rank])
        problem(fmt::format("rank {} step {}: holds {} state bytes, expected {}", rank, step, held,
                            dense.expected_state_bytes[step][rank]));
      if (step == options.steps - 1) mine.state_bytes = held;
      // Padding stays zero (I3), cut where the spec cuts: c = ceil(n/N), rank r owns [r*c, (r+1)*c).
      for (const auto& p : engine->params()) {
        if (p.persistent || p.owner >= 0) continue;
        int64_t numel = 1;
        for (int64_t d : p.shape) numel *= d;
        const int64_t c = model::chunk_of(numel, world);
        const int64_t real = std::clamp<int64_t>(numel - rank * c, 0, c);
        if (p.master.numel() != c) {
          problem(fmt::format("rank {} step {}: the shard of '{}' has {} elements, expected ceil({}/{}) = {}", rank,
                              step, p.path, p.master.numel(), numel, world, c));
          continue;
        }
        at::Tensor padding = p.master.detach().narrow(0, real, c - real);
        if (padding.numel() > 0 && padding.abs().max().item<double>() != 0.0)
          problem(fmt::format("rank {} step {}: padding of '{}' is not zero", rank, step, p.path));
      }
    }
    auto state = engine->consolidated_state_dict();
    if (rank == 0) compare_parameters(dense, state, mine);
    if (!options.save_dir.empty()) {
      const nlohmann::json client{{"zerocheck_train", {{"model", options.model}, {"seed", options.seed},
                                                       {"batch", options.batch_size}, {"lr", options.lr},
                                                       {"steps", resume.first_step + options.steps},
                                                       {"world", world}}}};
      engine->save_checkpoint(options.save_dir, client.dump());
    }
  });
  std::vector<TrainRankResult> mine;
  for (int r = 0; r < world; ++r)
    if (ran[r]) mine.push_back(std::move(results[r]));
  return mine;
}

TrainReport judge_training(const TrainOptions& options, const Resume& resume, const DenseRun& dense,
                           std::vector<TrainRankResult> parts) {
  const int world = options.world_size;
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (static_cast<int>(parts.size()) != world)
    throw zero3::CommError(fmt::format("training reports came back from {} ranks of {}", parts.size(), world));
  for (int r = 0; r < world; ++r)
    if (parts[r].rank != r || static_cast<int64_t>(parts[r].losses.size()) != options.steps)
      throw zero3::CommError(fmt::format("training report {} is for rank {} with {} losses; expected rank {} with {}",
                                         r, parts[r].rank, parts[r].losses.size(), r, options.steps));
  TrainReport report;
  report.world_size = world;
  report.steps = options.steps;
  report.model = options.model;
  report.first_step = resume.first_step;
  report.resumed_from_world = resume.world;
  report.dense_losses = dense.losses;
  report.expected_state_bytes_per_rank = dense.expected_state_bytes.back();
  for (const auto& part : parts) {
    report.state_bytes_per_rank.push_back(part.state_bytes);
    report.problems.insert(report.problems.end(), part.problems.begin(), part.problems.end());
  }
  for (int64_t step = 0; step < options.steps; ++step) {
    std::vector<double> per_rank;
    for (int r = 0; r < world; ++r) per_rank.push_back(parts[r].losses[step]);
    report.losses.push_back(mean_in_rank_order(per_rank));
    report.max_loss_abs_diff = std::max(report.max_loss_abs_diff, std::abs(report.losses.back() - dense.losses[step]));
  }
  report.max_param_abs_diff = parts[0].max_param_abs_diff;
  const auto& [forward0, backward0] = dense.traffic.back()[0];
  report.traffic_last_step = parts[0].last_step;
  report.expected_traffic_last_step = forward0;
  report.expected_traffic_last_step += backward0;
  if (report.max_loss_abs_diff > kParityTolerance)
    report.problems.push_back(fmt::format("losses differ from the dense baseline by up to {:g}", report.max_loss_abs_diff));
  if (report.max_param_abs_diff > kParityTolerance)
    report.problems.push_back(fmt::format("parameters differ from the dense baseline by up to {:g}: {}",
                                          report.max_param_abs_diff, fmt::join(parts[0].differing_parameters, ", ")));
  return report;
}

constexpr int64_t kAdamStates = 2;

}  // namespace

// Each entry resolves a resume the same way, so a worker and its launcher agree on the run.
std::vector<TrainRankResult> run_training_ranks(const TrainOptions& given) {
  const auto [options, resume] = resolve_resume(given);
  check_options(options);
  const ModelSpec spec = model_spec(options.model);
  return train_ranks(options, resume, spec, run_dense(options, spec, kAdamStates, resume));
}

TrainReport judge_training(const TrainOptions& given, const std::vector<TrainRankResult>& parts) {
  const auto [options, resume] = resolve_resume(given);
  check_options(options);
  const ModelSpec spec = model_spec(options.model);
  return judge_training(options, resume, run_dense(options, spec, kAdamStates, resume), parts);
}

TrainReport run_training(const TrainOptions& given) {
  const auto [options, resume] = resolve_resume(given);
  check_options(options);
  const ModelSpec spec = model_spec(options.model);
  const DenseRun dense = run_dense(options, spec, kAdamStates, resume);
  return judge_training(options, resume, dense, train_ranks(options, resume, spec, dense));
}

namespace {
nlohmann::json traffic_json(const model::Traffic& t) {
  return {{"all_gather", t.all_gather}, {"reduce_scatter", t.reduce_scatter}, {"all_reduce", t.all_reduce},
          {"broadcast", t.broadcast}, {"all_to_all", t.all_to_all}};
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
  return t;
}
}  // namespace

nlohmann::json TrainRankResult::to_json() const {
  return {{"rank", rank},
          {"losses", losses},
          {"last_step", traffic_json(last_step)},
          {"state_bytes", state_bytes},
          {"problems", problems},
          {"max_param_abs_diff", max_param_abs_diff},
          {"differing_parameters", differing_parameters}};
}

TrainRankResult TrainRankResult::from_json(const nlohmann::json& j) {
  try {
    TrainRankResult r;
    r.rank = j.at("rank").get<int>();
    r.losses = j.at("losses").get<std::vector<double>>();
    r.last_step = traffic_from_json(j.at("last_step"));
    r.state_bytes = j.at("state_bytes").get<int64_t>();
    r.problems = j.at("problems").get<std::vector<std::string>>();
    r.max_param_abs_diff = j.at("max_param_abs_diff").get<double>();
    r.differing_parameters = j.at("differing_parameters").get<std::vector<std::string>>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's training report is malformed: ") + e.what());
  }
}

nlohmann::json TrainOptions::to_json() const {
  return {{"world", world_size}, {"steps", steps},         {"model", model},         {"seed", seed},
          {"batch", batch_size}, {"lr", lr},               {"engine", std::string(zero3::fault_name(fault))},
          {"fail_rank", fail_rank}, {"fail_step", fail_step}, {"save_dir", save_dir}, {"resume_dir", resume_dir}};
}

TrainOptions TrainOptions::from_json(const nlohmann::json& j) {
  try {
    TrainOptions o;
    o.world_size = j.at("world").get<int>();
    o.steps = j.at("steps").get<int64_t>();
    o.model = j.at("model").get<std::string>();
    o.seed = j.at("seed").get<uint64_t>();
    o.batch_size = j.at("batch").get<int64_t>();
    o.lr = j.at("lr").get<double>();
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
                        {"losses", losses},
                        {"dense_losses", dense_losses},
                        {"max_loss_abs_diff", max_loss_abs_diff},
                        {"max_param_abs_diff", max_param_abs_diff},
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
