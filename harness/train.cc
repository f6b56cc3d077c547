#include "harness/train.h"

#include "engine/engine.h"
#include "engine/optimizer_rebuild.h"
#include "harness/accounting.h"
#include "harness/dense_baseline.h"
#include "harness/models.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <mutex>

namespace zerocheck {
namespace {

// Everything the dense side knows per step, computed before the world starts.
struct DenseRun {
  std::vector<double> losses;
  std::vector<int64_t> expected_elements;                  // per step
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

void count_calls(zero3::Module& model, CallCounter& counter, const at::Tensor& input,
                 const zero3::Route& route) {
  zero3::InterceptorScope scope(&counter);
  at::NoGradGuard no_grad;
  zero3::Route cursor = route;
  model(input, cursor);
}

DenseRun run_dense(const TrainOptions& options, const ModelSpec& spec, int64_t optimizer_states) {
  DenseRun run;
  const int world = options.world_size;
  const zero3::Config config = training_config(spec);
  const int64_t threshold = config.zero_optimization.stage3_param_persistence_threshold;
  auto model = spec.build(options.seed);
  const Owners owners = placement_owners(model, config.placement, world);
  DenseBaseline dense(model, adam_factory(options.lr));
  CallCounter calls_so_far;
  for (int64_t step = 0; step < options.steps; ++step) {
    std::vector<Batch> batches;
    for (int r = 0; r < world; ++r)
      batches.push_back(make_batch(spec, options.seed, step, r, options.batch_size));
    const std::vector<zero3::Route> routes = routes_of(spec, step, world);
    // Partitioned modules run alike on every rank, so rank 0's calls give the traffic; any
    // rank's calls make a module "trained so far".
    CallCounter step_calls;
    count_calls(*model, step_calls, batches[0].input, routes[0]);
    for (int r = 0; r < world; ++r) count_calls(*model, calls_so_far, batches[r].input, routes[r]);
    run.expected_elements.push_back(
        expected_elements_per_step(model, step_calls, world, threshold, owners));
    std::vector<int64_t> bytes;
    for (int r = 0; r < world; ++r)
      bytes.push_back(expected_state_bytes(model, calls_so_far, world, r, threshold,
                                           optimizer_states, owners));
    run.expected_state_bytes.push_back(bytes);
    run.losses.push_back(mean_in_rank_order(dense.step(batches, routes)));
  }
  run.final_parameters = dense.parameters_by_path();
  return run;
}

}  // namespace

TrainReport run_training(const TrainOptions& options) {
  if (options.steps < 1) throw zero3::UsageError("--steps must be >= 1");
  if (options.batch_size < 1) throw zero3::UsageError("batch size must be >= 1");
  const ModelSpec spec = model_spec(options.model);
  const int world = options.world_size;
  const zero3::Config config = training_config(spec);
  const int64_t adam_states = 2;
  const DenseRun dense = run_dense(options, spec, adam_states);

  TrainReport report;
  report.world_size = world;
  report.steps = options.steps;
  report.model = options.model;
  report.dense_losses = dense.losses;
  report.state_bytes_per_rank.assign(world, 0);
  report.expected_state_bytes_per_rank = dense.expected_state_bytes.back();

  std::vector<std::vector<double>> rank_losses(world, std::vector<double>(options.steps));
  std::vector<int64_t> elements(world, 0);
  std::map<std::string, at::Tensor> consolidated;
  std::mutex problems_mutex;
  auto problem = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(problems_mutex);
    report.problems.push_back(what);
  };

  WorldOptions world_options;
  world_options.world_size = world;
  world_options.comm = options.comm;
  world_options.timeout = options.timeout;
  run_world(world_options, [&](zero3::Comm& comm) {
    const int rank = comm.rank();
    auto model = spec.build(options.seed);
    auto user_optimizer = adam_factory(options.lr)(zero3::unique_parameters(*model));
    zero3::EngineOptions engine_options;
    engine_options.fault = options.fault;
    auto engine = zero3::initialize(model, *user_optimizer, config, comm, engine_options);
    for (int64_t step = 0; step < options.steps; ++step) {
      if (rank == options.fail_rank && step == options.fail_step)
        throw zero3::UsageError("injected failure at step " + std::to_string(step) +
                                " (--fail-rank)");
      const Batch batch = make_batch(spec, options.seed, step, rank, options.batch_size);
      comm.reset_stats();
      at::Tensor loss =
          training_loss(engine->forward(batch.input, spec.route(step, rank)), batch.target);
      engine->backward(loss);
      engine->step();
      elements[rank] = comm.stats().all_gather_elements + comm.stats().reduce_scatter_elements;
      rank_losses[rank][step] = loss.item<double>();
      for (const auto& p : engine->params()) {
        if (p.persistent || p.owner >= 0) continue;
        if (p.param.numel() != 0)
          problem("rank " + std::to_string(rank) + " step " + std::to_string(step) + ": '" +
                  p.path + "' holds " + std::to_string(p.param.numel()) +
                  " elements of full data outside forward/backward");
        const int64_t real = p.layout.real_in_shard(rank);
        at::Tensor padding = p.master.detach().narrow(0, real, p.layout.chunk() - real);
        if (padding.numel() > 0 && padding.abs().max().item<double>() != 0.0)
          problem("rank " + std::to_string(rank) + " step " + std::to_string(step) +
                  ": padding of '" + p.path + "' is not zero");
      }
      if (step == options.steps - 1) report.state_bytes_per_rank[rank] = engine->measured_state_bytes();
      engine->zero_grad();
    }
    auto state = engine->consolidated_state_dict();
    if (rank == 0) consolidated = std::move(state);
  });

  for (int64_t step = 0; step < options.steps; ++step) {
    std::vector<double> per_rank;
    for (int r = 0; r < world; ++r) per_rank.push_back(rank_losses[r][step]);
    report.losses.push_back(mean_in_rank_order(per_rank));
    report.max_loss_abs_diff =
        std::max(report.max_loss_abs_diff, std::abs(report.losses.back() - dense.losses[step]));
  }
  std::vector<std::string> differing;  // which parameters broke parity, and by how much
  for (const auto& [path, expected] : dense.final_parameters) {
    auto it = consolidated.find(path);
    if (it == consolidated.end()) {
      problem("consolidated state dict lacks '" + path + "'");
      continue;
    }
    if (it->second.sizes() != expected.sizes()) {
      problem("'" + path + "' has shape " + c10::str(it->second.sizes()) + ", dense has " +
              c10::str(expected.sizes()));
      continue;
    }
    if (expected.numel() == 0) continue;
    const double diff = (it->second - expected).abs().max().item<double>();
    report.max_param_abs_diff = std::max(report.max_param_abs_diff, diff);
    if (diff > kParityTolerance) differing.push_back(fmt::format("'{}' by {:g}", path, diff));
  }
  report.elements_moved_per_step = elements[0];
  report.expected_elements_per_step = dense.expected_elements.back();

  if (report.max_loss_abs_diff > kParityTolerance)
    problem(fmt::format("losses differ from the dense baseline by up to {:g}",
                        report.max_loss_abs_diff));
  if (report.max_param_abs_diff > kParityTolerance)
    problem(fmt::format("parameters differ from the dense baseline by up to {:g}: {}",
                        report.max_param_abs_diff, fmt::join(differing, ", ")));
  for (int r = 0; r < world; ++r) {
    if (report.state_bytes_per_rank[r] != report.expected_state_bytes_per_rank[r])
      problem("rank " + std::to_string(r) + " holds " +
              std::to_string(report.state_bytes_per_rank[r]) + " state bytes, expected " +
              std::to_string(report.expected_state_bytes_per_rank[r]));
    if (elements[r] != report.expected_elements_per_step)
      problem("rank " + std::to_string(r) + " moved " + std::to_string(elements[r]) +
              " elements in the last step, expected " +
              std::to_string(report.expected_elements_per_step));
  }
  return report;
}

nlohmann::json TrainReport::to_json() const {
  return nlohmann::json{{"world", world_size},
                        {"steps", steps},
                        {"model", model},
                        {"losses", losses},
                        {"dense_losses", dense_losses},
                        {"max_loss_abs_diff", max_loss_abs_diff},
                        {"max_param_abs_diff", max_param_abs_diff},
                        {"parity_tolerance", kParityTolerance},
                        {"state_bytes_per_rank", state_bytes_per_rank},
                        {"expected_state_bytes_per_rank", expected_state_bytes_per_rank},
                        {"elements_moved_per_step", elements_moved_per_step},
                        {"expected_elements_per_step", expected_elements_per_step},
                        {"problems", problems},
                        {"ok", ok()}};
}

}  // namespace zerocheck
