// I10: the second run with the ZeRO knobs drawn again, and the comparison (internal/inert_knobs.h).
#include "harness/interpreter/internal/inert_knobs.h"

#include "engine/crc32c.h"
#include "engine/optimizer_rebuild.h"
#include "engine/seeded_values.h"
#include "harness/scenario/draw/draw_scenario.h"
#include "harness/scenario/invariants.h"
#include "harness/world/rank_memory.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <regex>
#include <utility>

namespace zerocheck {
namespace {

// What one rank saw after one operation: (field, value) in a fixed order.
using Record = std::vector<std::pair<std::string, std::string>>;
// Per rank, one record per operation it applied.
using Trace = std::vector<std::vector<Record>>;

// A seed of its own for the second draw, so the knobs drawn again are not the first draw's bytes.
constexpr uint64_t kRedrawSalt = 0x1e2f3a4b5c6d7e8fULL;

std::string bits(double value) {
  uint64_t b = 0;
  std::memcpy(&b, &value, sizeof b);
  return fmt::format("{} ({:016x})", value, b);
}

// A tensor by its dtype, shape and the CRC-32C of its bytes: equal bits, equal digest.
std::string digest(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  const at::Tensor flat = t.detach().to(at::kCPU).contiguous();
  return fmt::format("{} {} crc32c {:08x}", c10::toString(flat.scalar_type()), c10::str(flat.sizes()),
                     zero3::crc32c(flat.data_ptr(), flat.numel() * flat.element_size()));
}

Record record_of(RankInterpreter& rank, const OpOutcome& outcome) {
  const NotChargedToTheRank harness;  // the digests' copies are the harness's
  static const char* const kStatus[] = {"applied", "skipped", "refused"};
  Record r;
  // An error names the engine that holds a model by its address, which differs from run to run.
  static const std::regex kAddress("0x[0-9a-f]+");
  r.emplace_back("outcome", fmt::format("{} {} {}", kStatus[static_cast<int>(outcome.status)], outcome.error_kind,
                                        std::regex_replace(outcome.error_message, kAddress, "0x…")));
  r.emplace_back("loss", outcome.loss ? bits(*outcome.loss) : "none");
  zero3::Engine* engine = rank.engine();
  if (engine == nullptr || engine->released()) return r;
  r.emplace_back("step() calls", std::to_string(engine->micro_steps()));
  r.emplace_back("optimizer steps", std::to_string(engine->optimizer_steps()));
  r.emplace_back("skipped steps", std::to_string(engine->skipped_steps()));
  r.emplace_back("reported gradient norm", bits(engine->global_grad_norm()));
  r.emplace_back("loss scale", bits(engine->loss_scale()));
  for (const auto& p : engine->params()) {
    r.emplace_back("fp32 master " + p.path, digest(p.master));
    r.emplace_back("shard gradient " + p.path, digest(p.grad_shard));
    r.emplace_back("optimizer state " + p.path, digest(zero3::state_tensors_of(engine->optimizer(), p.master)));
  }
  return r;
}

class Recorder final : public RankDriver {
 public:
  explicit Recorder(std::vector<Record>& out) : out_(out) {}
  void after(RankInterpreter& rank, int64_t, const OpOutcome& outcome) override {
    out_.push_back(record_of(rank, outcome));
  }

 private:
  std::vector<Record>& out_;
};

RankDrivers recording_into(Trace& trace) {
  return [&trace](int rank) { return std::make_unique<Recorder>(trace.at(static_cast<size_t>(rank))); };
}

// "reduce_bucket_size 500000000 -> 13, overlap_comm true -> false": the knobs the second run changed.
std::string knob_changes(const zero3::ZeroOptimizationConfig& a, const zero3::ZeroOptimizationConfig& b) {
  std::vector<std::string> out;
#define ZEROCHECK_KNOB_CHANGE(key, def, lo, hi, doc) \
  if (a.key != b.key) out.push_back(fmt::format("{} {} -> {}", #key, a.key, b.key));
  ZERO3_ZERO_INT_KEYS(ZEROCHECK_KNOB_CHANGE)
#undef ZEROCHECK_KNOB_CHANGE
#define ZEROCHECK_FLAG_CHANGE(key, def, doc) \
  if (a.key != b.key) out.push_back(fmt::format("{} {} -> {}", #key, a.key, b.key));
  ZERO3_ZERO_BOOL_KEYS(ZEROCHECK_FLAG_CHANGE)
#undef ZEROCHECK_FLAG_CHANGE
  return out.empty() ? "none" : fmt::format("{}", fmt::join(out, ", "));
}

// The first operation (then the lowest rank) where the runs' records differ.
std::optional<Violation> first_difference(const Trace& first, const Trace& second, const RankReports& second_reports,
                                          const std::string& changes) {
  std::optional<Violation> found;
  for (size_t r = 0; r < first.size(); ++r) {
    const auto& a = first[r];
    const auto& b = second[r];
    for (size_t i = 0; i < a.size(); ++i) {
      if (found && found->op_index <= static_cast<int64_t>(i)) break;
      Violation v{"I10", static_cast<int64_t>(i), static_cast<int>(r), "", "", "", "", ""};
      if (i >= b.size()) {
        v.expected = "the operation applied as in the first run";
        v.actual = second_reports.failure.empty() ? "the second run stopped before it" : second_reports.failure;
        v.message = fmt::format("the run with the ZeRO knobs drawn again ({}) did not get to this operation", changes);
        found = v;
        break;
      }
      if (a[i] == b[i]) continue;
      size_t f = 0;
      while (f < a[i].size() && f < b[i].size() && a[i][f] == b[i][f]) ++f;
      const std::string field = f < a[i].size() ? a[i][f].first : b[i][f].first;
      v.attribute = field;
      v.expected = f < a[i].size() ? a[i][f].second : "absent";
      v.actual = f < b[i].size() ? b[i][f].second : "absent";
      v.message = fmt::format("{} differs when the ZeRO knobs are drawn again ({})", field, changes);
      found = v;
      break;
    }
  }
  return found;
}

// Every invariant but I10: the second run is I10's alone (and the faster for it).
std::set<std::string> all_but_i10() {
  std::set<std::string> out;
  for (const auto& row : invariant_rows())
    if (std::string(row.name) != "I10") out.insert(row.name);
  return out;
}

}  // namespace

bool replays_inert_knobs(const Scenario& scenario, const RunOptions& options) {
  if (!options.enabled("I10") || options.inert_knobs_fraction <= 0) return false;
  // A function of the seed alone: the same scenario is chosen on every replay and by its shrinks.
  const uint64_t z = zero3::splitmix64(scenario.seed);
  return static_cast<double>(z >> 11) / static_cast<double>(1ULL << 53) < options.inert_knobs_fraction;
}

Verdict judge_with_inert_knobs(const Scenario& scenario, const RunOptions& options, const ScenarioRun& run) {
  const auto ranks = static_cast<size_t>(scenario.world_size);
  Trace first(ranks), second(ranks);
  Verdict verdict = judge(run(scenario, options, recording_into(first)), options);
  if (!verdict.ok()) return verdict;
  const Scenario redrawn = with_zero_knobs_redrawn(scenario, scenario.seed ^ kRedrawSalt);
  RunOptions quiet = options;
  quiet.disabled_oracles = all_but_i10();
  quiet.checks_after_every_op = false;
  quiet.stop_at_first_violation = false;
  quiet.twin_observer = nullptr;
  const RankReports again = run(redrawn, quiet, recording_into(second));
  if (auto v = first_difference(first, second, again,
                                knob_changes(scenario.config.zero_optimization, redrawn.config.zero_optimization)))
    verdict.violation = std::move(*v);
  return verdict;
}

}  // namespace zerocheck
