#include "harness/repro_seed.h"

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/legacy_mode.h"
#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"
#include "harness/models.h"
#include "harness/oracles/oracles.h"
#include "harness/process/process_rank.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adam.h>

#include <algorithm>

namespace zerocheck {
namespace {

std::vector<int64_t> expert_ids(const zero3::Module& model) {
  std::vector<int64_t> ids;
  for (const auto& expert : seed_experts(model)) {
    const auto& attrs = expert->attrs();
    ids.push_back(attrs.has("id") && attrs.get("id").is_int() ? attrs.get("id").as_int() : -1);
  }
  return ids;
}

std::vector<int64_t> placement_of(const std::vector<int64_t>& ids, int world) {
  std::vector<int64_t> owners;
  for (int64_t id : ids) owners.push_back(model::owner_by_attr_mod(id, world));
  return owners;
}

zero3::Config with_placement(zero3::Config config, const zero3::PlacementSpec& spec) {
  config.placement = spec;
  return config;
}

std::string error_text(const std::exception& e) {
  const char* kind = dynamic_cast<const zero3::AlreadyInitialized*>(&e) ? "AlreadyInitialized"
                     : dynamic_cast<const zero3::OptimizerMismatch*>(&e) ? "OptimizerMismatch"
                     : dynamic_cast<const zero3::Error*>(&e)             ? "zero3::Error"
                                                                         : "exception";
  return std::string(kind) + ": " + e.what();
}

}  // namespace

bool ReproReport::ids_intact() const {
  return ids_after_init == ids_before && ids_after_reinit == ids_before;
}

bool ReproReport::intact() const {
  return ids_intact() && placement_after == placement_before &&
         placement_observed == placement_before && placement_oracle.empty() && reinit_error.has_value() &&
         !forward_error.has_value();
}

std::vector<ReproRankPart> run_repro_seed_ranks(const ReproOptions& options) {
  zero3::reset_legacy_counters();
  const zero3::Config config = zero3::Config::parse(kSeedConfig);
  WorldOptions world;
  world.world_size = options.world_size;
  world.comm = options.comm;
  std::vector<ReproRankPart> parts(options.world_size);
  std::vector<char> ran(options.world_size, 0);  // in a worker: only its own rank
  run_world(world, [&](zero3::Comm& comm) {
    ReproRankPart& part = parts[comm.rank()];
    ran[comm.rank()] = 1;
    part.rank = comm.rank();
    part.holds.assign(60, 0);
    ReproReport mine;
    auto model = model_spec("seed").build(0);
    mine.ids_before = expert_ids(*model);
    torch::optim::Adam optimizer(zero3::unique_parameters(*model), torch::optim::AdamOptions(3e-5));
    zero3::EngineOptions engine_options;
    engine_options.fault = options.fault;
    // The user's placement: expert i on rank id mod N, read from the attribute at initialize.
    zero3::PlacementSpec by_id;
    by_id.kind = zero3::PlacementSpec::Kind::attr_mod;
    by_id.attr = "id";
    // I2's expectation, from the user's attributes before initialize (harness/model).
    const auto expected = model::expect(model, by_id, config.zero_optimization.stage3_param_persistence_threshold,
                                        comm.world_size());
    note_operation(0, "initialize");
    auto engine = zero3::initialize(model, optimizer, with_placement(config, by_id), comm, engine_options);
    if (const auto found = oracles::placement(std::get<model::Expectation>(expected), observe(*engine), comm.rank(), ""))
      part.placement_oracle =
          fmt::format("{}: '{}' expected {}, is {}", found->message, found->attribute, found->expected, found->actual);
    mine.ids_after_init = expert_ids(*model);
    for (const auto& r : engine->residency()) {
      // "0.<i>.linear.weight": expert i's weight
      const auto first = r.path.find('.'), second = r.path.find('.', first + 1);
      if (r.path.rfind("0.", 0) == 0 && r.path.size() > 7 &&
          r.path.compare(r.path.size() - 7, 7, ".weight") == 0)
        part.holds[std::stoul(r.path.substr(first + 1, second - first - 1))] = r.param_elements > 0;
    }
    note_operation(1, "initialize again");
    std::unique_ptr<zero3::Engine> second;
    try {
      second = zero3::initialize(model, optimizer, config, comm, engine_options);
    } catch (const zero3::Error& e) {
      mine.reinit_error = error_text(e);
    }
    mine.ids_after_reinit = expert_ids(*model);
    mine.placement_before = placement_of(mine.ids_before, comm.world_size());
    // Placement is decided at initialize, from the ids the user's policy reads then.
    mine.placement_after = placement_of(mine.ids_after_init, comm.world_size());
    note_operation(2, "forward");
    try {
      at::NoGradGuard no_grad;
      mine.forward_output_sum = engine->forward(at::ones({1, 128})).sum().item<double>();
    } catch (const std::exception& e) {  // a corrupted engine may fail anywhere in LibTorch
      mine.forward_error = error_text(e);
    }
    if (comm.rank() == 0) part.report = mine.to_json();
  });
  std::vector<ReproRankPart> out;
  for (int r = 0; r < options.world_size; ++r)
    if (ran[r]) out.push_back(std::move(parts[r]));
  return out;
}

ReproReport judge_repro_seed(const ReproOptions& options, std::vector<ReproRankPart> parts) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (static_cast<int>(parts.size()) != options.world_size || parts[0].rank != 0 || parts[0].report.is_null())
    throw zero3::CommError(fmt::format("repro seed: reports came back from {} ranks of {}", parts.size(),
                                       options.world_size));
  ReproReport report = ReproReport::from_json(parts[0].report);
  report.engine = std::string(zero3::fault_name(options.fault));
  report.world_size = options.world_size;
  report.placement_observed.clear();
  report.placement_oracle.clear();
  for (int expert = 0; expert < 60; ++expert) {
    int64_t owner = -1;
    for (int r = 0; r < options.world_size; ++r)
      if (parts[r].holds.at(expert)) owner = owner == -1 ? r : -2;
    report.placement_observed.push_back(owner < 0 ? -1 : owner);
  }
  for (int r = 0; r < options.world_size; ++r)
    if (!parts[r].placement_oracle.empty())
      report.placement_oracle.push_back(fmt::format("rank {}: {}", r, parts[r].placement_oracle));
  return report;
}

ReproReport run_repro_seed(const ReproOptions& options) {
  return judge_repro_seed(options, run_repro_seed_ranks(options));
}

ReproReport ReproReport::from_json(const nlohmann::json& j) {
  try {
    ReproReport r;
    r.engine = j.at("engine").get<std::string>();
    r.world_size = j.at("world").get<int>();
    r.ids_before = j.at("ids_before").get<std::vector<int64_t>>();
    r.ids_after_init = j.at("ids_after_init").get<std::vector<int64_t>>();
    r.ids_after_reinit = j.at("ids_after_reinit").get<std::vector<int64_t>>();
    if (!j.at("reinit_error").is_null()) r.reinit_error = j.at("reinit_error").get<std::string>();
    r.placement_before = j.at("placement_before").get<std::vector<int64_t>>();
    r.placement_after = j.at("placement_after").get<std::vector<int64_t>>();
    r.placement_observed = j.at("placement_observed").get<std::vector<int64_t>>();
    r.placement_oracle = j.at("placement_oracle").get<std::vector<std::string>>();
    if (!j.at("forward_error").is_null()) r.forward_error = j.at("forward_error").get<std::string>();
    r.forward_output_sum = j.at("forward_output_sum").get<double>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a repro seed report is malformed: ") + e.what());
  }
}

nlohmann::json ReproRankPart::to_json() const {
  return {{"rank", rank}, {"holds", holds}, {"placement_oracle", placement_oracle}, {"report", report}};
}

ReproRankPart ReproRankPart::from_json(const nlohmann::json& j) {
  try {
    ReproRankPart p;
    p.rank = j.at("rank").get<int>();
    p.holds = j.at("holds").get<std::vector<int64_t>>();
    p.placement_oracle = j.at("placement_oracle").get<std::string>();
    p.report = j.at("report");
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's repro seed report is malformed: ") + e.what());
  }
}

nlohmann::json ReproReport::to_json() const {
  nlohmann::json out{{"engine", engine},
                     {"world", world_size},
                     {"ids_before", ids_before},
                     {"ids_after_init", ids_after_init},
                     {"ids_after_reinit", ids_after_reinit},
                     {"reinit_error", nullptr},
                     {"placement_before", placement_before},
                     {"placement_after", placement_after},
                     {"placement_observed", placement_observed},
                     {"placement_oracle", placement_oracle},
                     {"forward_error", nullptr},
                     {"forward_output_sum", forward_output_sum},
                     {"intact", intact()}};
  if (reinit_error) out["reinit_error"] = *reinit_error;
  if (forward_error) out["forward_error"] = *forward_error;
  return out;
}

std::string ReproReport::to_text() const {
  std::string out = fmt::format("zerocheck repro seed: engine {}, world {}\n", engine, world_size);
  out += fmt::format("expert ids before initialize:       {}\n", fmt::join(ids_before, " "));
  out += fmt::format("expert ids after initialize:        {}\n", fmt::join(ids_after_init, " "));
  out += fmt::format("second initialize, same optimizer:  {}\n",
                     reinit_error ? "refused: " + *reinit_error : std::string("ACCEPTED"));
  out += fmt::format("expert ids after 2nd initialize:    {}\n", fmt::join(ids_after_reinit, " "));
  out += fmt::format("placement (rank = id mod {}) before: {}\n", world_size,
                     fmt::join(placement_before, " "));
  out += fmt::format("placement (rank = id mod {}) after:  {}\n", world_size,
                     fmt::join(placement_after, " "));
  out += fmt::format("placement observed (who holds the bytes): {}\n", fmt::join(placement_observed, " "));
  for (const auto& finding : placement_oracle) out += "placement oracle (I2): " + finding + "\n";
  out += forward_error ? fmt::format("forward through 60 experts: FAILED: {}\n", *forward_error)
                       : fmt::format("forward through 60 experts: ok (output sum {:.6g})\n",
                                     forward_output_sum);
  std::vector<std::string> broken;
  if (ids_after_init != ids_before) broken.push_back("initialize changed the experts' ids");
  if (ids_after_reinit != ids_after_init) broken.push_back("the second initialize changed them again");
  if (placement_after != placement_before) broken.push_back("experts moved to other ranks");
  if (placement_observed != placement_before)
    broken.push_back("the experts' bytes do not live where the user placed them");
  if (!placement_oracle.empty()) broken.push_back("the placement oracle (I2) failed");
  if (!reinit_error) broken.push_back("a repeated initialize was accepted");
  if (forward_error) broken.push_back("the forward failed");
  out += broken.empty() ? "verdict: INTACT\n"
                        : fmt::format("verdict: CORRUPTED: {}\n", fmt::join(broken, "; "));
  return out;
}

}  // namespace zerocheck
