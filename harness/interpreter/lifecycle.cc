// The life-cycle operations of one rank's interpreter (internal/lifecycle.h).
#include "harness/interpreter/internal/lifecycle.h"

#include "engine/errors.h"
#include "engine/testing/training.h"
#include "harness/interpreter/internal/checks.h"
#include "harness/world/failure_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <variant>

namespace zerocheck::interpreter {
namespace {

using zero3::Module;

bool covers_exactly(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& trainable_in_target) {
  std::vector<const c10::TensorImpl*> have, want;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) have.push_back(p.unsafeGetTensorImpl());
  for (auto& p : trainable_in_target) want.push_back(p.unsafeGetTensorImpl());
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  return have == want;
}

// What the refusal model says of an initialize, and what a live engine from it must do.
struct Prediction {
  std::variant<model::Expectation, model::PlacementRefusal> expected;
  std::optional<std::string> refusal;  // the error kind the model predicts (none: accepted)
  bool repeat_refused = false;         // refused as AlreadyInitialized
  bool config_refused = false;         // refused as a ConfigError, for the op's config_error
};

Prediction predict(RankState& state, const Op& op, const Subtree& subtree, torch::optim::Optimizer& optimizer,
                   bool same_optimizer) {
  model::InitializeFacts facts;
  facts.engine_live = state.engine != nullptr;
  if (state.engine_tree)
    for (const Module* m : *state.engine_tree) facts.overlaps_live_engine |= subtree.modules.count(m) > 0;
  facts.optimizer_held_by_live_engine = same_optimizer && state.engine_optimizer == state.user_optimizer.get();
  Prediction out;
  // From the user's attributes as they are before initialize: an engine that writes
  // attributes must not move the goalposts. A repeat the model refuses whatever the placement
  // says needs none (the common case: scripts initialize again and again).
  if (!model::predict_initialize(facts)) {
    out.expected = model::expect(subtree.root, state.workload.config.placement,
                                 state.workload.config.zero_optimization.stage3_param_persistence_threshold,
                                 state.comm.world_size());
    facts.placement_evaluates = std::holds_alternative<model::Expectation>(out.expected);
    facts.config_valid = op.config_error == schema::ConfigErrorKind::none;  // the reader checked the scenario's
    facts.optimizer_covers_target = covers_exactly(optimizer, subtree.trainable);
  }
  out.refusal = model::predict_initialize(facts);
  out.repeat_refused = out.refusal == std::optional<std::string>(zero3::kind_name<zero3::AlreadyInitialized>());
  out.config_refused = out.refusal == std::optional<std::string>(zero3::kind_name<zero3::ConfigError>()) &&
                       op.config_error != schema::ConfigErrorKind::none;
  return out;
}

// What a refused call must leave as it found: the attributes as they are now (deep copies, not
// the ledger: I1 judges the user's writes, I5 only this call) and the live shards.
struct BeforeRefusal {
  std::optional<model::AttributeLedger> attrs;
  std::vector<at::Tensor> masters;
  std::vector<oracles::ParameterSnapshot> model;
};

BeforeRefusal before_refusal(RankState& state, const Prediction& prediction) {
  BeforeRefusal before;
  if (!prediction.repeat_refused && !prediction.config_refused) return before;
  before.attrs = ledger_of(state.model);
  const NotChargedToTheRank harness;
  if (state.engine)
    for (const auto& p : state.observe()) before.masters.push_back(p.master.detach().clone());
  if (prediction.config_refused) before.model = oracles::snapshot_parameters(state.model);
  return before;
}

// I5: the user's own forward of `module` (no engine, no gradient) runs after a refused
// initialize.
oracles::Result plain_forward_works(RankState& state, Module& module, const std::string& target) {
  const NotChargedToTheRank harness;
  try {
    at::NoGradGuard no_grad;
    // Cyclic, as every scenario's routes are: an MoE takes expert 0 (a strict empty route
    // would refuse it, a failure of the check, not of the model).
    zero3::Route route = zero3::Route::cyclic({});
    at::Tensor input = state.workload.batch(state.index, state.comm.rank()).input;
    // In the model's dtype as it is now: fp32 after a refused first initialize (the engine gives
    // the model back as it was), bf16 where a bf16 engine had it before.
    for (const auto& p : module.parameters())
      if (p.defined() && p.is_floating_point()) {
        input = input.to(p.scalar_type());
        break;
      }
    module(input, route);
  } catch (const std::exception& e) {
    return oracles::violation("I5", target, "", "a plain forward of the model", failure_text(e),
                              "the model does not run after a refused initialize");
  }
  return std::nullopt;
}

// I5 after a refusal the model predicts: nothing changed, and the model still runs.
void judge_refusal(RankState& state, const Op& op, const Prediction& prediction, const BeforeRefusal& before,
                   bool created, Module& target) {
  if (prediction.repeat_refused || prediction.config_refused) {
    require(state, oracles::attributes(*before.attrs, "I5"));
    if (state.engine) require(state, oracles::refused_changed_nothing(before.masters, state.observe()));
  }
  if (prediction.config_refused && !created) {
    // Nothing the refused engine built may stay: the model is as it was, and the user can run
    // it (no live engine manages it, or the refusal would have been AlreadyInitialized).
    {
      const NotChargedToTheRank harness;
      require(state, oracles::model_unchanged(before.model, oracles::snapshot_parameters(state.model), op.target));
    }
    if (state.found.empty()) require(state, plain_forward_works(state, target, op.target));
  }
}

// An initialize that makes no live engine: refused, or accepted where the model refuses.
OpOutcome not_live(RankState& state, const Prediction& prediction, std::unique_ptr<zero3::Engine> created,
                   const std::string& raised, const std::string& message) {
  // Only with an oracle switched off (or a run that goes on after a violation) does an engine
  // get here that the model says must not exist: it is kept, unused, until the run ends
  // (releasing it now would touch the live engine's parameters; leaking it would leave its
  // claims in the process-wide registry for the next scenario); what it does to training is for
  // the other oracles to see.
  if (created) {
    state.unwanted.push_back(std::move(created));
    return applied(fmt::format("accepted, although the model predicts {}", *prediction.refusal));
  }
  OpOutcome out;
  out.status = OpOutcome::Status::refused;
  out.error_kind = raised;
  out.error_message = message;
  return out;
}

// The new engine goes live over op.target with `optimizer` (the user now holds `fresh`, if any).
OpOutcome go_live(RankState& state, const Op& op, std::unique_ptr<zero3::Engine> created, const Subtree& subtree,
                  const torch::optim::Optimizer* optimizer, std::unique_ptr<torch::optim::Optimizer> fresh,
                  model::Expectation expected) {
  state.engine = std::move(created);
  state.micro_steps = 0;
  state.engine_target = op.target;
  state.engine_tree = &subtree.modules;
  state.engine_optimizer = optimizer;
  if (fresh) state.user_optimizer = std::move(fresh);  // the user holds the new optimizer now
  state.expectation = std::make_shared<const model::Expectation>(std::move(expected));
  if (state.twin) state.twin_call(TwinCall::retarget_to(op.target));
  state.pending = at::Tensor();
  state.traces.clear();
  state.fetch_memory = model::FetchMemory{};
  const std::string& resume_from = state.workload.resume_from;
  if (!resume_from.empty()) {  // a resumed run: the engine loads the checkpoint, the twin
    state.engine->load_checkpoint(resume_from);     // what the workload's history saved
    state.micro_steps = state.engine->micro_steps();  // the resumed run's (the twin checks its numbers)
    if (state.twin) state.twin_call(TwinCall(TwinCall::Kind::load));
    return applied(fmt::format("engine over '{}' ({} parameters), resumed from {}", op.target,
                               state.engine->params().size(), resume_from));
  }
  return applied(fmt::format("engine over '{}' ({} parameters)", op.target, state.engine->params().size()));
}

// The live engine lets go of the model (`destroy`: without a release call).
OpOutcome let_go(RankState& state, bool destroy) {
  if (!state.engine) return skipped("no live engine");
  if (!destroy) state.engine->release();
  state.engine.reset();
  state.engine_tree = nullptr;
  state.engine_optimizer = nullptr;
  state.pending = at::Tensor();
  state.traces.clear();
  state.fetch_memory = model::FetchMemory{};
  // The model is the user's again: every parameter whole and equal to the twin's.
  if (state.twin && state.enabled("I3")) {
    const NotChargedToTheRank harness;
    const auto model_params = unique_named_parameters(state.modules.at(state.engine_target));
    require(state, state.twin->read([&](const model::DenseTwin& twin) {
      return oracles::released_parity(model_params, twin, state.engine_target);
    }));
  }
  return applied("ok");
}

}  // namespace

OpOutcome initialize(RankState& state, const Op& op) {
  const Subtree* subtree = state.subtree_at(op.target);
  if (subtree == nullptr) return skipped(fmt::format("no module '{}'", op.target));
  const zero3::Config config = model::config_with_error(state.workload.config, op.config_error, state.comm.world_size());
  const bool same_optimizer = op.optimizer == "same" && state.user_optimizer != nullptr;
  std::unique_ptr<torch::optim::Optimizer> fresh;
  torch::optim::Optimizer* optimizer =
      same_optimizer ? state.user_optimizer.get() : (fresh = state.workload.optimizer(subtree->trainable)).get();
  Prediction prediction = predict(state, op, *subtree, *optimizer, same_optimizer);
  const BeforeRefusal before = before_refusal(state, prediction);

  std::unique_ptr<zero3::Engine> created;
  std::string raised, message;
  try {
    created = zero3::initialize(subtree->root, *optimizer, config, state.comm, engine_options(state));
  } catch (const zero3::Error& e) {
    raised = zero3::error_kind(e);
    if (!model::is_predicted_refusal(raised)) throw;  // no refusal the model knows: unexpected (I7)
    message = e.what();
  }
  require(state, oracles::initialize_outcome(prediction.refusal, created != nullptr, raised, message, op.target));
  judge_refusal(state, op, prediction, before, created != nullptr, *subtree->root);
  if (prediction.refusal || !created) return not_live(state, prediction, std::move(created), raised, message);
  return go_live(state, op, std::move(created), *subtree, optimizer, std::move(fresh),
                 std::get<model::Expectation>(std::move(prediction.expected)));
}

OpOutcome release(RankState& state, const Op& op) { return let_go(state, false); }

OpOutcome destroy(RankState& state, const Op& op) { return let_go(state, true); }

}  // namespace zerocheck::interpreter
