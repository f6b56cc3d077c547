// One rank's interpreter: sends each operation to the function of its name in the file of its
// family (internal/rank_state.h lists them), then runs the checks after it (checks.cc). The
// dispatch is generated from ZEROCHECK_OPS, so a new row of the table with no function of its
// name does not compile.
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/internal/attributes.h"
#include "harness/interpreter/internal/checkpoints.h"
#include "harness/interpreter/internal/checks.h"
#include "harness/interpreter/internal/injections.h"
#include "harness/interpreter/internal/lifecycle.h"
#include "harness/interpreter/internal/rank_state.h"
#include "harness/interpreter/internal/training.h"

#include <stdexcept>
#include <utility>

namespace zerocheck {
namespace interpreter {
namespace {

OpOutcome dispatch(RankState& state, const Op& op) {
  switch (op.kind) {
#define ZEROCHECK_OP_CASE(name, required, optional, weight, attributes_weight, doc) \
  case OpKind::name:                                                                 \
    return name(state, op);
    ZEROCHECK_OPS(ZEROCHECK_OP_CASE)
#undef ZEROCHECK_OP_CASE
  }
  throw std::logic_error("dispatch: an operation kind outside ZEROCHECK_OPS");
}

}  // namespace
}  // namespace interpreter

class ScenarioRunner {
 public:
  ScenarioRunner(const model::Workload& workload, zero3::Comm& comm, const RunOptions& options, std::string dir,
                 std::shared_ptr<SharedTwin> shared_twin)
      : state_(workload, comm, options, std::move(dir), std::move(shared_twin)) {}

  OpOutcome apply(int64_t index, const Op& op) {
    state_.index = index;
    state_.found.clear();
    state_.deferred_traffic.reset();
    state_.dense_losses.clear();
    OpOutcome outcome = interpreter::dispatch(state_, op);
    outcome.kind = op.kind;
    interpreter::sweep(state_);
    interpreter::check_traffic(state_, outcome);
    outcome.violations = std::move(state_.found);
    if (state_.options.twin_observer && state_.twin && state_.comm.rank() == 0)
      state_.twin->read([&](const model::DenseTwin& twin) {
        state_.options.twin_observer(index, op.kind, twin, state_.dense_losses);
      });
    return outcome;
  }

  zero3::Engine* engine() { return state_.engine.get(); }
  const std::shared_ptr<zero3::Module>& model() const { return state_.model; }
  const model::Expectation& expectation() const { return *state_.expectation; }
  bool counted() const { return state_.counted(); }
  int64_t settled_bytes(int64_t expected) const { return state_.account->settled_bytes(expected); }

  void save_to(const std::string& dir, const std::string& client_state_json) {
    if (!state_.engine) throw zero3::UsageError("save_to: no live engine");
    state_.engine->save_checkpoint(dir, client_state_json);
  }

  RankInterpreter::Consolidated check_consolidated() { return interpreter::check_consolidated(state_); }

 private:
  interpreter::RankState state_;
};

RankInterpreter::RankInterpreter(const model::Workload& workload, zero3::Comm& comm, const RunOptions& options,
                                 const std::string& checkpoint_dir, std::shared_ptr<SharedTwin> shared_twin)
    : impl_(std::make_unique<ScenarioRunner>(workload, comm, options, checkpoint_dir, std::move(shared_twin))) {}

RankInterpreter::RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                                 const std::string& checkpoint_dir)
    : own_workload_(std::make_unique<model::Workload>(model::workload_of(scenario))),
      impl_(std::make_unique<ScenarioRunner>(*own_workload_, comm, options, checkpoint_dir, nullptr)) {}

RankInterpreter::~RankInterpreter() = default;
OpOutcome RankInterpreter::apply(int64_t index, const Op& op) { return impl_->apply(index, op); }
zero3::Engine* RankInterpreter::engine() { return impl_->engine(); }
const std::shared_ptr<zero3::Module>& RankInterpreter::model() const { return impl_->model(); }
const model::Expectation& RankInterpreter::expectation() const { return impl_->expectation(); }
int64_t RankInterpreter::held_bytes(int64_t expected) const {
  return impl_->counted() ? impl_->settled_bytes(expected) : -1;
}
void RankInterpreter::save_to(const std::string& dir, const std::string& client_state_json) {
  impl_->save_to(dir, client_state_json);
}
RankInterpreter::Consolidated RankInterpreter::check_consolidated() { return impl_->check_consolidated(); }

}  // namespace zerocheck
