#include "harness/tools/repro_seed.h"

#include "engine/config.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/testing/models.h"
#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace zerocheck {
namespace {

constexpr int kExperts = 60;
constexpr int64_t kWidth = 128;

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

// The seed as a workload: the report's model (expert i with user attribute id = i) built the
// same every time, Adam lr 3e-5, the seed's config with the user's policy (expert i on rank
// id mod N, read from the attribute at initialize), and one sample of ones.
model::Workload seed_workload() {
  model::Workload w;
  w.build = [] { return model_spec("seed").build(0); };
  w.batch = [](int64_t, int) { return Batch{at::ones({1, kWidth}), at::zeros({1, kWidth})}; };
  w.route = [](int64_t, int, const Op&) { return zero3::Route(); };
  w.optimizer = adam_factory(3e-5);
  w.optimizer_states = 2;
  w.config = zero3::Config::parse(kSeedConfig);
  w.config.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
  w.config.placement.attr = "id";
  return w;
}

// The bug report's operations: initialize, initialize again with the same optimizer, forward.
std::vector<Op> seed_ops() {
  Op again(OpKind::initialize);
  again.optimizer = "same";
  return {Op(OpKind::initialize), again, Op(OpKind::forward)};
}

// What one rank sees of the replay, between the interpreter's operations.
class SeedDriver final : public RankDriver {
 public:
  explicit SeedDriver(ReproRankPart& part) : part_(part) { part_.holds.assign(kExperts, 0); }

  void before(RankInterpreter& rank, int64_t index) override {
    if (index == 0) report_.ids_before = expert_ids(*rank.model());
  }

  void after(RankInterpreter& rank, int64_t index, const OpOutcome& outcome) override {
    for (const auto& v : outcome.violations) part_.violations.push_back(v.to_text());
    if (index == 0) {
      report_.ids_after_init = expert_ids(*rank.model());
      // Which experts' bytes live here, from the user's own tensors: what the engine reports
      // about itself plays no part.
      const auto experts = seed_experts(*rank.model());
      for (size_t i = 0; i < experts.size(); ++i) {
        // Held: find() points into the dictionary, which must outlive the read (ASan).
        const auto parameters = experts[i]->named_parameters(/*recurse=*/true);
        const at::Tensor* weight = parameters.find("linear.weight");
        part_.holds[i] = weight != nullptr && weight->has_storage() && weight->storage().nbytes() > 0;
      }
    } else if (index == 1) {
      report_.ids_after_reinit = expert_ids(*rank.model());
      if (outcome.status == OpOutcome::Status::refused) {
        report_.reinit_error = outcome.error_kind + ": " + outcome.error_message;
        report_.reinit_error_kind = outcome.error_kind;
      }
    } else if (index == 2) {
      report_.forward_loss = outcome.loss;
    }
    if (part_.rank == 0) part_.report = report_.to_json();
  }

 private:
  ReproRankPart& part_;
  ReproReport report_;  // what this rank saw (rank 0's is the report)
};

}  // namespace

bool ReproReport::ids_intact() const {
  return ids_after_init == ids_before && ids_after_reinit == ids_before;
}

bool ReproReport::intact() const {
  return ids_intact() && placement_after == placement_before && placement_observed == placement_before &&
         violations.empty() && reinit_error.has_value() && !failure.has_value() && forward_loss.has_value();
}

std::vector<ReproRankPart> run_repro_seed_ranks(const ReproOptions& options, World& world) {
  const model::Workload workload = seed_workload();
  RunOptions run(options.fault);
  run.stop_at_first_violation = false;  // the report shows everything the legacy engines break
  std::vector<ReproRankPart> parts(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) parts[static_cast<size_t>(r)].rank = r;
  const RankReports reports = run_ops(workload, seed_ops(), run, world, [&](int rank) {
    return std::make_unique<SeedDriver>(parts[static_cast<size_t>(rank)]);
  });
  std::vector<ReproRankPart> out;
  for (int r = 0; r < world.size(); ++r) {
    if (!world.hosts(r)) continue;
    ReproRankPart& part = parts[static_cast<size_t>(r)];
    if (reports.failed_rank && r == 0) {
      ReproReport seen = part.report.is_null() ? ReproReport{} : ReproReport::from_json(part.report);
      seen.failure = reports.failure;
      part.report = seen.to_json();
    }
    out.push_back(std::move(part));
  }
  return out;
}

ReproReport judge_repro_seed(const ReproOptions& options, std::vector<ReproRankPart> parts) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (parts.empty() || parts[0].rank != 0 || parts[0].report.is_null())
    throw zero3::CommError(fmt::format("repro seed: no report from rank 0 ({} ranks reported)", parts.size()));
  for (size_t r = 0; r < parts.size(); ++r)
    if (parts[r].rank != static_cast<int>(r))
      throw zero3::CommError(fmt::format("repro seed: the report of rank {} is missing", r));
  const int world = static_cast<int>(parts.size());
  ReproReport report = ReproReport::from_json(parts[0].report);
  report.engine = std::string(zero3::fault_name(options.fault));
  report.world_size = world;
  report.placement_before = placement_of(report.ids_before, world);
  // Placement is decided at initialize, from the ids the user's policy reads then.
  report.placement_after = placement_of(report.ids_after_init, world);
  report.placement_observed.clear();
  for (int expert = 0; expert < kExperts; ++expert) {
    int64_t owner = -1;
    for (int r = 0; r < world; ++r)
      if (parts[static_cast<size_t>(r)].holds.at(static_cast<size_t>(expert))) owner = owner == -1 ? r : -2;
    report.placement_observed.push_back(owner < 0 ? -1 : owner);
  }
  report.violations.clear();
  for (int r = 0; r < world; ++r)
    for (const auto& v : parts[static_cast<size_t>(r)].violations) report.violations.push_back(v);
  return report;
}

ReproReport run_repro_seed(const ReproOptions& options, World& world) {
  return judge_repro_seed(options, run_repro_seed_ranks(options, world));
}

namespace {

template <class T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

ReproReport ReproReport::from_json(const nlohmann::json& j) {
  try {
    ReproReport r;
    r.engine = j.at("engine").get<std::string>();
    r.world_size = j.at("world").get<int>();
    r.ids_before = j.at("ids_before").get<std::vector<int64_t>>();
    r.ids_after_init = j.at("ids_after_init").get<std::vector<int64_t>>();
    r.ids_after_reinit = j.at("ids_after_reinit").get<std::vector<int64_t>>();
    if (!j.at("reinit_error").is_null()) r.reinit_error = j.at("reinit_error").get<std::string>();
    r.reinit_error_kind = j.at("reinit_error_kind").get<std::string>();
    r.placement_before = j.at("placement_before").get<std::vector<int64_t>>();
    r.placement_after = j.at("placement_after").get<std::vector<int64_t>>();
    r.placement_observed = j.at("placement_observed").get<std::vector<int64_t>>();
    r.violations = j.at("violations").get<std::vector<std::string>>();
    if (!j.at("failure").is_null()) r.failure = j.at("failure").get<std::string>();
    if (!j.at("forward_loss").is_null()) r.forward_loss = j.at("forward_loss").get<double>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a repro seed report is malformed: ") + e.what());
  }
}

nlohmann::json ReproRankPart::to_json() const {
  return {{"rank", rank}, {"holds", holds}, {"violations", violations}, {"report", report}};
}

ReproRankPart ReproRankPart::from_json(const nlohmann::json& j) {
  try {
    ReproRankPart p;
    p.rank = j.at("rank").get<int>();
    p.holds = j.at("holds").get<std::vector<int64_t>>();
    p.violations = j.at("violations").get<std::vector<std::string>>();
    p.report = j.at("report");
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw zero3::CommError(std::string("a worker's repro seed report is malformed: ") + e.what());
  }
}

nlohmann::json ReproReport::to_json() const {
  return {{"engine", engine},
          {"world", world_size},
          {"ids_before", ids_before},
          {"ids_after_init", ids_after_init},
          {"ids_after_reinit", ids_after_reinit},
          {"reinit_error", optional_json(reinit_error)},
          {"reinit_error_kind", reinit_error_kind},
          {"placement_before", placement_before},
          {"placement_after", placement_after},
          {"placement_observed", placement_observed},
          {"violations", violations},
          {"failure", optional_json(failure)},
          {"forward_loss", optional_json(forward_loss)},
          {"intact", intact()}};
}

std::string ReproReport::to_text() const {
  std::string out = fmt::format("zerocheck repro seed: engine {}, world {}\n", engine, world_size);
  out += fmt::format("expert ids before initialize:       {}\n", fmt::join(ids_before, " "));
  out += fmt::format("expert ids after initialize:        {}\n", fmt::join(ids_after_init, " "));
  out += fmt::format("second initialize, same optimizer:  {}\n",
                     reinit_error ? "refused: " + *reinit_error : std::string("ACCEPTED"));
  out += fmt::format("expert ids after 2nd initialize:    {}\n", fmt::join(ids_after_reinit, " "));
  out += fmt::format("placement (rank = id mod {}) before: {}\n", world_size, fmt::join(placement_before, " "));
  out += fmt::format("placement (rank = id mod {}) after:  {}\n", world_size, fmt::join(placement_after, " "));
  out += fmt::format("placement observed (who holds the bytes): {}\n", fmt::join(placement_observed, " "));
  for (const auto& finding : violations) out += "oracle: " + finding + "\n";
  if (failure) out += fmt::format("the replay stopped: {}\n", *failure);
  else if (forward_loss) out += fmt::format("forward through 60 experts: ok (loss {:.6g})\n", *forward_loss);
  std::vector<std::string> broken;
  if (ids_after_init != ids_before) broken.push_back("initialize changed the experts' ids");
  if (ids_after_reinit != ids_after_init) broken.push_back("the second initialize changed them again");
  if (placement_after != placement_before) broken.push_back("experts moved to other ranks");
  if (placement_observed != placement_before)
    broken.push_back("the experts' bytes do not live where the user placed them");
  if (!violations.empty()) broken.push_back(fmt::format("the oracles found {} violations", violations.size()));
  if (!reinit_error) broken.push_back("a repeated initialize was accepted");
  if (failure) broken.push_back("a rank failed");
  else if (!forward_loss) broken.push_back("the forward did not run");
  out += broken.empty() ? "verdict: INTACT\n" : fmt::format("verdict: CORRUPTED: {}\n", fmt::join(broken, "; "));
  return out;
}

}  // namespace zerocheck
