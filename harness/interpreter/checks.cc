// What runs after every operation of one rank's interpreter (internal/checks.h).
#include "harness/interpreter/internal/checks.h"

#include <optional>
#include <unordered_set>
#include <utility>

namespace zerocheck::interpreter {
namespace {

// What this rank is known to hold: the engine's parameters' tensors (observed) and the user's
// parameters the engine does not manage, whole.
int64_t accounted(const RankState& state, const std::vector<oracles::ObservedParam>& observed) {
  const NotChargedToTheRank harness;
  std::unordered_set<const c10::TensorImpl*> managed;
  for (const auto& o : observed)
    if (!o.held.empty()) managed.insert(o.held.front().unsafeGetTensorImpl());  // the model tensor
  std::vector<at::Tensor> users;
  for (const auto& p : zero3::unique_parameters(*state.model))
    if (!managed.count(p.unsafeGetTensorImpl())) users.push_back(p);
  return oracles::accounted_bytes(observed, users);
}

// I2, I4 and I3 over what the live engine holds, observed once.
void sweep_engine(RankState& state, bool whole_rank) {
  const auto observed = state.observe(whole_rank);
  const auto& expectation = *state.expectation;
  if (state.enabled("I2"))
    require(state, oracles::placement(expectation, observed, state.comm.rank(), state.engine_target));
  if (state.enabled("I4")) require(state, oracles::memory(expectation, observed, state.engine_target, state.engine->precision()));
  if (whole_rank) {
    const int64_t expected = accounted(state, observed);
    require(state, oracles::unlisted_memory(state.account->settled_bytes(expected), expected, state.engine_target));
  }
  if (state.twin && state.enabled("I3")) {
    const NotChargedToTheRank harness;
    require(state, state.twin->read([&](const model::DenseTwin& twin) {
      return oracles::parity(expectation, twin, observed, state.comm.rank(), state.comm.world_size(),
                             state.engine_target);
    }));
  }
}

}  // namespace

void require(RankState& state, oracles::Result found) {
  if (!found || !state.enabled(found->invariant)) return;
  found->op_index = state.index;
  found->rank = state.comm.rank();
  if (state.options.stop_at_first_violation) throw ViolationFound(std::move(*found));
  state.found.push_back(std::move(*found));
}

void sweep(RankState& state) {
  if (!state.options.checks_after_every_op) return;
  if (state.enabled("I1")) require(state, oracles::attributes(state.ledger));
  // I11 before I3: a step skipped on the wrong ranks also moves the parameters, but the contract
  // is what it breaks. Its finite norm's value after I3 (oracles.h reported_norm).
  const bool overflow = state.engine && state.twin && state.enabled("I11") && state.workload.precision.check_overflow;
  std::optional<oracles::OverflowReport> report;
  if (overflow) {
    const NotChargedToTheRank harness;
    report = oracles::observe_overflow(*state.engine);
    require(state, state.twin->read([&](const model::DenseTwin& twin) {
      return oracles::overflow_contract(twin, *report, state.engine_target);
    }));
  }
  const bool whole_rank =
      state.enabled("I4") && state.counted() && !state.pending.defined() && state.unwanted.empty();
  if (state.engine && (state.enabled("I2") || state.enabled("I4") || (state.twin && state.enabled("I3")))) {
    sweep_engine(state, whole_rank);
  } else if (whole_rank && !state.engine) {
    const int64_t expected = accounted(state, {});
    require(state, oracles::unlisted_memory(state.account->settled_bytes(expected), expected, ""));
  }
  if (report)
    require(state, state.twin->read([&](const model::DenseTwin& twin) {
      return oracles::reported_norm(twin, *report, state.engine_target);
    }));
}

void check_traffic(RankState& state, OpOutcome& outcome) {
  if (!state.deferred_traffic) return;
  const MeasuredTraffic& traffic = *state.deferred_traffic;
  outcome.traffic = traffic.measured;
  if (!traffic.expected) return;
  outcome.expected_traffic = *traffic.expected;
  require(state, oracles::traffic(traffic.operation, *traffic.expected, traffic.measured, state.engine_target));
}

}  // namespace zerocheck::interpreter
