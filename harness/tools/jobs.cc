#include "harness/tools/jobs.h"

#include "engine/errors.h"
#include "engine/testing/models.h"

#include <fmt/format.h>

#include <string>

namespace zerocheck {
namespace {

nlohmann::json run_options_json(const RunOptions& options) {
  return {{"engine", std::string(zero3::fault_name(options.fault))},
          {"checks_after_every_op", options.checks_after_every_op},
          {"disabled_oracles", options.disabled_oracles},
          {"stop_at_first_violation", options.stop_at_first_violation}};
}

RunOptions run_options_from(const nlohmann::json& json) {
  RunOptions options(zero3::engine_by_name(json.at("engine").get<std::string>(), "engine"));
  options.checks_after_every_op = json.at("checks_after_every_op").get<bool>();
  options.disabled_oracles = json.at("disabled_oracles").get<std::set<std::string>>();
  options.stop_at_first_violation = json.at("stop_at_first_violation").get<bool>();
  return options;
}

// Raises again the error a worker sent back, as the kind it was.
const nlohmann::json& result_or_rethrow(const nlohmann::json& result, int rank) {
  if (result.contains("rank_failure")) {
    const auto& failure = result.at("rank_failure");
    throw RankFailure(failure.at("rank").get<int>(), failure.at("detail").get<std::string>());
  }
  if (!result.contains("error")) return result.at("result");
  const auto& error = result.at("error");
  zero3::throw_error_of_kind(error.at("kind").get<std::string>(),
                             fmt::format("rank {}: {}", rank, error.at("what").get<std::string>()));
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
  (void)model_spec(options.model);  // an unknown model is a usage error here, before any worker runs
  const auto results = pool.run({{"kind", "train"}, {"options", options.to_json()}});
  std::vector<TrainRankResult> parts;
  for (size_t r = 0; r < results.size(); ++r)
    for (const auto& part : result_or_rethrow(results[r], static_cast<int>(r))) parts.push_back(TrainRankResult::from_json(part));
  return judge_training(options, parts);
}

ReproReport run_repro_seed_on(JobPool& pool, const ReproOptions& options) {
  const auto results = pool.run({{"kind", "repro_seed"}, {"engine", std::string(zero3::fault_name(options.fault))}});
  std::vector<ReproRankPart> parts;
  for (size_t r = 0; r < results.size(); ++r)
    for (const auto& part : result_or_rethrow(results[r], static_cast<int>(r))) parts.push_back(ReproRankPart::from_json(part));
  return judge_repro_seed(options, std::move(parts));
}

nlohmann::json run_job_here(World& world, const nlohmann::json& job) {
  try {
    const std::string kind = job.at("kind").get<std::string>();
    if (kind == "scenario") {
      const Scenario scenario = scenario_from_json(job.at("scenario"));
      return {{"result", run_scenario_ranks(scenario, run_options_from(job.at("run")), world).to_json()}};
    }
    if (kind == "train") {
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : run_training_ranks(TrainOptions::from_json(job.at("options")), world))
        parts.push_back(part.to_json());
      return {{"result", parts}};
    }
    if (kind == "repro_seed") {
      ReproOptions options;
      options.fault = zero3::engine_by_name(job.at("engine").get<std::string>(), "engine");
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : run_repro_seed_ranks(options, world)) parts.push_back(part.to_json());
      return {{"result", parts}};
    }
    return {{"error", {{"kind", zero3::kind_name<zero3::UsageError>()}, {"what", "unknown job kind '" + kind + "'"}}}};
  } catch (const RankFailure& e) {
    return {{"rank_failure", {{"rank", e.rank()}, {"detail", e.detail()}}}};
  } catch (const std::exception& e) {
    // A zero3::Error keeps its kind; anything else (a malformed job, a scenario that does not
    // read back) is the harness's own failure, raised again as a plain zero3::Error.
    return {{"error", {{"kind", zero3::error_kind(e)}, {"what", e.what()}}}};
  }
}

}  // namespace zerocheck
