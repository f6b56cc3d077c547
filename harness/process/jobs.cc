#include "harness/process/jobs.h"

#include "engine/errors.h"
#include "harness/models.h"
#include "harness/process/process_rank.h"
#include "harness/world.h"

#include <fmt/format.h>

#include <string>

namespace zerocheck {
namespace {

nlohmann::json run_options_json(const RunOptions& options) {
  return {{"engine", std::string(zero3::fault_name(options.fault))},
          {"checks_after_every_op", options.checks_after_every_op},
          {"disabled_oracles", options.disabled_oracles}};
}

RunOptions run_options_from(const nlohmann::json& json) {
  RunOptions options(zero3::engine_by_name(json.at("engine").get<std::string>(), "engine"));
  options.comm = CommKind::gloo;
  options.checks_after_every_op = json.at("checks_after_every_op").get<bool>();
  options.disabled_oracles = json.at("disabled_oracles").get<std::set<std::string>>();
  return options;
}

// Rethrows the error a worker sent back as the kind the thread world would have thrown.
const nlohmann::json& result_or_rethrow(const nlohmann::json& result, int rank) {
  if (!result.contains("error")) return result.at("result");
  const auto& error = result.at("error");
  const std::string kind = error.at("kind").get<std::string>();
  const std::string what = error.at("what").get<std::string>();
  if (kind == "rank_failure") throw RankFailure(error.at("rank").get<int>(), error.at("detail").get<std::string>());
  if (kind == "usage") throw zero3::UsageError(what);
  if (kind == "scenario") throw ScenarioError(what);
  throw zero3::CommError(fmt::format("rank {}: the worker's job failed: {}", rank, what));
}

}  // namespace

Verdict run_scenario_on(JobPool& pool, const Scenario& scenario, const RunOptions& options) {
  validate(scenario);
  if (scenario.world_size > pool.world_size())
    throw zero3::UsageError(fmt::format("the scenario needs {} ranks; the process world has {}", scenario.world_size,
                                        pool.world_size()));
  const auto results = pool.run({{"kind", "scenario"}, {"scenario", to_json(scenario)}, {"run", run_options_json(options)}});
  RankReports merged;
  for (size_t r = 0; r < results.size(); ++r)
    merged.merge(RankReports::from_json(result_or_rethrow(results[r], static_cast<int>(r))));
  merged.found.resize(static_cast<size_t>(scenario.world_size));
  return judge(merged, options);
}

TrainReport run_training_on(JobPool& pool, const TrainOptions& options) {
  if (options.world_size != pool.world_size())
    throw zero3::UsageError(fmt::format("training on {} ranks needs {} processes, the pool has {}", options.world_size,
                                        options.world_size, pool.world_size()));
  (void)model_spec(options.model);  // an unknown model is a usage error here, before any worker runs
  const auto results = pool.run({{"kind", "train"}, {"options", options.to_json()}});
  std::vector<TrainRankResult> parts;
  for (size_t r = 0; r < results.size(); ++r)
    for (const auto& part : result_or_rethrow(results[r], static_cast<int>(r)))
      parts.push_back(TrainRankResult::from_json(part));
  return judge_training(options, parts);
}

ReproReport run_repro_seed_on(JobPool& pool, const ReproOptions& options) {
  if (options.world_size != pool.world_size())
    throw zero3::UsageError(fmt::format("repro seed on {} ranks needs {} processes, the pool has {}",
                                        options.world_size, options.world_size, pool.world_size()));
  const auto results = pool.run({{"kind", "repro_seed"}, {"engine", std::string(zero3::fault_name(options.fault))}});
  std::vector<ReproRankPart> parts;
  for (size_t r = 0; r < results.size(); ++r)
    for (const auto& part : result_or_rethrow(results[r], static_cast<int>(r)))
      parts.push_back(ReproRankPart::from_json(part));
  return judge_repro_seed(options, std::move(parts));
}

nlohmann::json run_job_here(const nlohmann::json& job) {
  try {
    const std::string kind = job.at("kind").get<std::string>();
    if (kind == "scenario") {
      const Scenario scenario = scenario_from_json(job.at("scenario"));
      return {{"result", run_scenario_ranks(scenario, run_options_from(job.at("run"))).to_json()}};
    }
    if (kind == "train") {
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : run_training_ranks(TrainOptions::from_json(job.at("options"))))
        parts.push_back(part.to_json());
      return {{"result", parts}};
    }
    if (kind == "repro_seed") {
      ReproOptions options;
      options.fault = zero3::engine_by_name(job.at("engine").get<std::string>(), "engine");
      options.world_size = current_process_rank() ? current_process_rank()->world_size() : 1;
      options.comm = CommKind::gloo;
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : run_repro_seed_ranks(options)) parts.push_back(part.to_json());
      return {{"result", parts}};
    }
    return {{"error", {{"kind", "usage"}, {"what", "unknown job kind '" + kind + "'"}}}};
  } catch (const RankFailure& e) {
    // RankFailure's text is "rank R: detail"; the launcher rebuilds it from the parts.
    const std::string what = e.what();
    const std::string prefix = fmt::format("rank {}: ", e.rank());
    const std::string detail = what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
    return {{"error", {{"kind", "rank_failure"}, {"rank", e.rank()}, {"detail", detail}, {"what", what}}}};
  } catch (const ScenarioError& e) {
    return {{"error", {{"kind", "scenario"}, {"what", e.what()}}}};
  } catch (const zero3::UsageError& e) {
    return {{"error", {{"kind", "usage"}, {"what", e.what()}}}};
  } catch (const nlohmann::json::exception& e) {
    return {{"error", {{"kind", "usage"}, {"what", std::string("malformed job: ") + e.what()}}}};
  } catch (const std::exception& e) {
    return {{"error", {{"kind", "other"}, {"what", e.what()}}}};
  }
}

}  // namespace zerocheck
