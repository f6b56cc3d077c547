// What one rank's interpreter keeps between operations (internal/rank_state.h).
#include "harness/interpreter/internal/rank_state.h"

#include "engine/testing/training.h"

#include <utility>

namespace zerocheck::interpreter {

RankState::RankState(const model::Workload& w, zero3::Comm& c, const RunOptions& o, std::string checkpoint_dir,
                     std::shared_ptr<SharedTwin> shared_twin)
    : workload(w), comm(c), options(o), dir(std::move(checkpoint_dir)), account(current_account()),
      model(w.build()), modules(modules_by_path(model)), ledger(ledger_of(model)) {
  // The twin is a whole second model trained alongside: only I3, I6 and I8 read it, and the
  // attributes fuzzer (I1, I2, I5, I7) runs hundreds of scenarios a second without it.
  if (options.needs_dense_twin()) {
    const NotChargedToTheRank harness;
    twin.emplace(workload, std::move(shared_twin));
  }
}

TwinOutcome RankState::twin_call(TwinCall call) {
  const NotChargedToTheRank harness;
  return twin->call(std::move(call));
}

std::vector<oracles::ObservedParam> RankState::observe(bool held_tensors) const {
  const NotChargedToTheRank harness;
  return oracles::observe(*engine, held_tensors);
}

const Subtree* RankState::subtree_at(const std::string& path) {
  auto cached = subtrees.find(path);
  if (cached != subtrees.end()) return &cached->second;
  auto it = modules.find(path);
  if (it == modules.end()) return nullptr;
  Subtree subtree{it->second, {}, trainable_parameters(*it->second)};
  for (auto& entry : zero3::unique_modules(it->second)) subtree.modules.insert(entry.module.get());
  return &subtrees.emplace(path, std::move(subtree)).first->second;
}

const std::shared_ptr<model::TrafficTrace>& RankState::trace() const {
  return traces.at(static_cast<size_t>(comm.rank()));
}

OpOutcome applied(std::string detail) {
  OpOutcome out;
  out.detail = std::move(detail);
  return out;
}

zero3::EngineOptions engine_options(const RankState& state) {
  zero3::EngineOptions options(state.options.fault);
  options.precision = state.workload.precision;
  return options;
}

OpOutcome skipped(std::string why) {
  OpOutcome out;
  out.status = OpOutcome::Status::skipped;
  out.detail = std::move(why);
  return out;
}

std::map<std::string, std::shared_ptr<zero3::Module>> modules_by_path(const std::shared_ptr<zero3::Module>& root) {
  std::map<std::string, std::shared_ptr<zero3::Module>> out;
  for (auto& entry : zero3::unique_modules(root)) out.emplace(entry.path, entry.module);
  return out;
}

model::AttributeLedger ledger_of(const std::shared_ptr<zero3::Module>& model) {
  const NotChargedToTheRank harness;  // deep copies: the harness's
  return model::AttributeLedger(model);
}

}  // namespace zerocheck::interpreter
