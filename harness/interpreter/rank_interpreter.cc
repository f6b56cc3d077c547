// One rank's interpreter: applies an operation to this rank's engine and to the model, measures
// what the engine holds and moved, and hands both to the oracles.
//
// Whose memory: the engine's calls and the user's model are the rank's (rank_memory.h); the
// harness's own work on the rank (the dense twin, the data it feeds, the oracles' copies) runs
// NotChargedToTheRank, so what the memory oracle measures is what the rank holds.
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/optimizer_rebuild.h"
#include "engine/testing/training.h"
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/internal/shared_twin.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"
#include "harness/world/failure_text.h"
#include "harness/world/rank_memory.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_set>
#include <utility>

namespace zerocheck {
namespace {

using zero3::Module;

std::map<std::string, std::shared_ptr<Module>> modules_by_path(const std::shared_ptr<Module>& root) {
  std::map<std::string, std::shared_ptr<Module>> out;
  for (auto& entry : zero3::unique_modules(root)) out.emplace(entry.path, entry.module);
  return out;
}

bool covers_exactly(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& trainable_in_target) {
  std::vector<const c10::TensorImpl*> have, want;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) have.push_back(p.unsafeGetTensorImpl());
  for (auto& p : trainable_in_target) want.push_back(p.unsafeGetTensorImpl());
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  return have == want;
}

OpOutcome applied(std::string detail) {
  OpOutcome out;
  out.detail = std::move(detail);
  return out;
}
OpOutcome skipped(std::string why) {
  OpOutcome out;
  out.status = OpOutcome::Status::skipped;
  out.detail = std::move(why);
  return out;
}

}  // namespace

class ScenarioRunner {
 public:
  ScenarioRunner(const model::Workload& workload, zero3::Comm& comm, const RunOptions& options, std::string dir,
                 std::shared_ptr<SharedTwin> shared_twin)
      : w_(workload), comm_(comm), options_(options), dir_(std::move(dir)), account_(current_account()),
        model_(workload.build()), modules_(modules_by_path(model_)), ledger_(ledger_of(model_)) {
    // The twin is a whole second model trained alongside: only I3, I6 and I8 read it, and the
    // attributes fuzzer (I1, I2, I5, I7) runs hundreds of scenarios a second without it.
    if (options_.needs_dense_twin()) {
      const NotChargedToTheRank harness;
      twin_.emplace(w_, std::move(shared_twin));
    }
  }

  OpOutcome apply(int64_t index, const Op& op) {
    index_ = index;
    found_.clear();
    deferred_traffic_.reset();
    dense_losses_.clear();
    OpOutcome outcome;
    switch (op.kind) {
      case OpKind::initialize: outcome = initialize(op); break;
      case OpKind::forward: outcome = forward(op); break;
      case OpKind::backward: outcome = backward(); break;
      case OpKind::step: outcome = step(); break;
      case OpKind::zero_grad: outcome = zero_grad(); break;
      case OpKind::set_attr:
      case OpKind::del_attr: outcome = write_attr(op); break;
      case OpKind::release: outcome = release(false); break;
      case OpKind::destroy: outcome = release(true); break;
      case OpKind::save: outcome = save(op); break;
      case OpKind::load: outcome = load(op); break;
      case OpKind::gather: outcome = gather(op); break;
    }
    outcome.kind = op.kind;
    sweep();
    if (deferred_traffic_) {
      outcome.traffic = deferred_traffic_->measured;
      if (deferred_traffic_->expected) {
        outcome.expected_traffic = *deferred_traffic_->expected;
        require(oracles::traffic(deferred_traffic_->operation, *deferred_traffic_->expected,
                                 deferred_traffic_->measured, engine_target_));
      }
    }
    outcome.violations = std::move(found_);
    if (options_.twin_observer && twin_ && comm_.rank() == 0)
      twin_->read([&](const model::DenseTwin& twin) { options_.twin_observer(index, op.kind, twin, dense_losses_); });
    return outcome;
  }

  zero3::Engine* engine() { return engine_.get(); }
  const std::shared_ptr<Module>& model() const { return model_; }
  const model::Expectation& expectation() const { return *expectation_; }
  bool counted() const { return account_ != nullptr && account_->live_bytes() >= 0; }
  int64_t settled_bytes(int64_t expected) const { return account_->settled_bytes(expected); }

  void save_to(const std::string& dir, const std::string& client_state_json) {
    if (!engine_) throw zero3::UsageError("save_to: no live engine");
    engine_->save_checkpoint(dir, client_state_json);
  }

  RankInterpreter::Consolidated check_consolidated() {
    RankInterpreter::Consolidated out;
    if (!engine_) return out;
    auto consolidated = engine_->consolidated_state_dict();
    if (comm_.rank() != 0 || !twin_) return out;
    const NotChargedToTheRank harness;
    twin_->read([&](const model::DenseTwin& twin) {
      out.violation = oracles::consolidated(*expectation_, consolidated, twin, engine_target_);
      for (const auto& [key, tensor] : consolidated) {
        const model::ExpectedParam* expected = expectation_->find_state_dict_key(key);
        const at::Tensor dense = expected ? twin.param(expected->path) : at::Tensor();
        out.max_abs_difference[key] =
            dense.defined() ? oracles::max_abs_difference(tensor, dense) : std::numeric_limits<double>::infinity();
      }
      return 0;
    });
    if (out.violation) {
      out.violation->op_index = index_;
      out.violation->rank = comm_.rank();
    }
    return out;
  }

 private:
  struct MeasuredTraffic {
    std::string operation;
    std::optional<model::Traffic> expected;  // none without the dense twin
    model::Traffic measured;
  };

  static model::AttributeLedger ledger_of(const std::shared_ptr<Module>& model) {
    const NotChargedToTheRank harness;  // deep copies: the harness's
    return model::AttributeLedger(model);
  }

  bool enabled(const std::string& invariant) const { return options_.enabled(invariant); }

  void require(oracles::Result found) {
    if (!found || !enabled(found->invariant)) return;
    found->op_index = index_;
    found->rank = comm_.rank();
    if (options_.stop_at_first_violation) throw ViolationFound(std::move(*found));
    found_.push_back(std::move(*found));
  }

  TwinOutcome twin_call(TwinCall call) {
    const NotChargedToTheRank harness;
    return twin_->call(std::move(call));
  }

  std::vector<oracles::ObservedParam> observe(bool held_tensors = false) const {
    const NotChargedToTheRank harness;
    return oracles::observe(*engine_, held_tensors);
  }

  // The sweeps after every operation: I1, then I2, I4 and I3 measured once for those that are
  // on (a switched-off oracle costs nothing).
  void sweep() {
    if (!options_.checks_after_every_op) return;
    if (enabled("I1")) require(oracles::attributes(ledger_));
    const bool whole_rank = enabled("I4") && counted() && !pending_.defined() && unwanted_.empty();
    if (engine_ && (enabled("I2") || enabled("I4") || (twin_ && enabled("I3")))) {
      const auto observed = observe(whole_rank);
      if (enabled("I2")) require(oracles::placement(*expectation_, observed, comm_.rank(), engine_target_));
      if (enabled("I4")) require(oracles::memory(*expectation_, observed, engine_target_));
      if (whole_rank) {
        const int64_t expected = accounted(observed);
        require(oracles::unlisted_memory(account_->settled_bytes(expected), expected, engine_target_));
      }
      if (twin_ && enabled("I3")) {
        const NotChargedToTheRank harness;
        require(twin_->read([&](const model::DenseTwin& twin) {
          return oracles::parity(*expectation_, twin, observed, comm_.rank(), comm_.world_size(), engine_target_);
        }));
      }
    } else if (whole_rank && !engine_) {
      const int64_t expected = accounted({});
      require(oracles::unlisted_memory(account_->settled_bytes(expected), expected, ""));
    }
  }

  // What this rank is known to hold: the engine's parameters' tensors (observed) and the user's
  // parameters the engine does not manage, whole.
  int64_t accounted(const std::vector<oracles::ObservedParam>& observed) const {
    const NotChargedToTheRank harness;
    std::unordered_set<const c10::TensorImpl*> managed;
    for (const auto& o : observed)
      if (!o.held.empty()) managed.insert(o.held.front().unsafeGetTensorImpl());  // the model tensor
    std::vector<at::Tensor> users;
    for (const auto& p : zero3::unique_parameters(*model_))
      if (!managed.count(p.unsafeGetTensorImpl())) users.push_back(p);
    return oracles::accounted_bytes(observed, users);
  }

  // A module's subtree as initialize needs it, worked out once per path: the tree never changes
  // within a run (only attributes and parameter data do), and a script initializes again
  // and again.
  struct Subtree {
    std::shared_ptr<Module> root;
    std::unordered_set<const Module*> modules;
    std::vector<at::Tensor> trainable;  // what a fresh optimizer over it holds
  };
  const Subtree* subtree_at(const std::string& path) {
    auto cached = subtrees_.find(path);
    if (cached != subtrees_.end()) return &cached->second;
    auto it = modules_.find(path);
    if (it == modules_.end()) return nullptr;
    Subtree subtree{it->second, {}, trainable_parameters(*it->second)};
    for (auto& entry : zero3::unique_modules(it->second)) subtree.modules.insert(entry.module.get());
    return &subtrees_.emplace(path, std::move(subtree)).first->second;
  }

  zero3::CommStats stats() const { return comm_.stats(); }

  // ---- operations -----------------------------------------------------------------------------

  OpOutcome initialize(const Op& op) {
    const Subtree* subtree = subtree_at(op.target);
    if (subtree == nullptr) return skipped(fmt::format("no module '{}'", op.target));
    const std::shared_ptr<Module>& target = subtree->root;
    const std::unordered_set<const Module*>& new_tree = subtree->modules;
    model::InitializeFacts facts;
    facts.engine_live = engine_ != nullptr;
    const zero3::Config config = model::config_with_error(w_.config, op.config_error, comm_.world_size());
    if (engine_tree_)
      for (const Module* m : *engine_tree_) facts.overlaps_live_engine |= new_tree.count(m) > 0;
    const bool same_optimizer = op.optimizer == "same" && user_optimizer_ != nullptr;
    facts.optimizer_held_by_live_engine = same_optimizer && engine_optimizer_ == user_optimizer_.get();
    std::unique_ptr<torch::optim::Optimizer> fresh;
    torch::optim::Optimizer* optimizer =
        same_optimizer ? user_optimizer_.get() : (fresh = w_.optimizer(subtree->trainable)).get();
    // From the user's attributes as they are before initialize: an engine that writes
    // attributes must not move the goalposts. A repeat the model refuses whatever the placement
    // says needs none (the common case: scripts initialize again and again).
    std::variant<model::Expectation, model::PlacementRefusal> expected;
    if (!model::predict_initialize(facts)) {
      expected = model::expect(target, w_.config.placement,
                               w_.config.zero_optimization.stage3_param_persistence_threshold, comm_.world_size());
      facts.placement_evaluates = std::holds_alternative<model::Expectation>(expected);
      facts.config_valid = op.config_error == schema::ConfigErrorKind::none;  // the reader checked the scenario's
      facts.optimizer_covers_target = covers_exactly(*optimizer, subtree->trainable);
    }
    const std::optional<std::string> predicted = model::predict_initialize(facts);
    const bool repeat_refused = predicted == std::optional<std::string>(zero3::kind_name<zero3::AlreadyInitialized>());
    const bool config_refused = predicted == std::optional<std::string>(zero3::kind_name<zero3::ConfigError>()) &&
                                op.config_error != schema::ConfigErrorKind::none;

    // What a refused call must leave as it found: the attributes as they are now (deep copies,
    // not the ledger: I1 judges the user's writes, I5 only this call) and the live shards.
    std::optional<model::AttributeLedger> attrs_before;
    std::vector<at::Tensor> masters_before;
    std::vector<oracles::ParameterSnapshot> model_before;
    if (repeat_refused || config_refused) {
      attrs_before = ledger_of(model_);
      const NotChargedToTheRank harness;
      if (engine_)
        for (const auto& p : observe()) masters_before.push_back(p.master.detach().clone());
      if (config_refused) model_before = oracles::snapshot_parameters(model_);
    }

    std::unique_ptr<zero3::Engine> created;
    std::string raised, message;
    try {
      created = zero3::initialize(target, *optimizer, config, comm_, zero3::EngineOptions(options_.fault));
    } catch (const zero3::Error& e) {
      raised = zero3::error_kind(e);
      if (!model::is_predicted_refusal(raised)) throw;  // no refusal the model knows: unexpected (I7)
      message = e.what();
    }
    require(oracles::initialize_outcome(predicted, created != nullptr, raised, op.target));
    if (repeat_refused || config_refused) {
      require(oracles::attributes(*attrs_before, "I5"));
      if (engine_) require(oracles::refused_changed_nothing(masters_before, observe()));
    }
    if (config_refused && !created) {
      // Nothing the refused engine built may stay: the model is as it was, and the user can run
      // it (no live engine manages it, or the refusal would have been AlreadyInitialized).
      {
        const NotChargedToTheRank harness;
        require(oracles::model_unchanged(model_before, oracles::snapshot_parameters(model_), op.target));
      }
      if (found_.empty()) require(plain_forward_works(*target, op.target));
    }
    if (predicted || !created) {
      // Only with an oracle switched off (or a run that goes on after a violation) does an
      // engine get here that the model says must not exist: it is kept, unused, until the run
      // ends (releasing it now would touch the live engine's parameters; leaking it would leave
      // its claims in the process-wide registry for the next scenario); what it does to training
      // is for the other oracles to see.
      if (created) {
        unwanted_.push_back(std::move(created));
        return applied(fmt::format("accepted, although the model predicts {}", *predicted));
      }
      OpOutcome out;
      out.status = OpOutcome::Status::refused;
      out.error_kind = raised;
      out.error_message = message;
      return out;
    }
    engine_ = std::move(created);
    micro_steps_ = 0;
    engine_target_ = op.target;
    engine_tree_ = &new_tree;
    engine_optimizer_ = optimizer;
    if (fresh) user_optimizer_ = std::move(fresh);  // the user holds the new optimizer now
    expectation_ = std::make_shared<const model::Expectation>(std::get<model::Expectation>(std::move(expected)));
    if (twin_) twin_call(TwinCall::retarget_to(op.target));
    pending_ = at::Tensor();
    traces_.clear();
    if (!w_.resume_from.empty()) {  // a resumed run: the engine loads the checkpoint, the twin
      engine_->load_checkpoint(w_.resume_from);  // what the workload's history saved
      micro_steps_ = engine_->micro_steps();      // the resumed run's (the twin checks its numbers)
      if (twin_) twin_call(TwinCall(TwinCall::Kind::load));
      return applied(fmt::format("engine over '{}' ({} parameters), resumed from {}", op.target,
                                 engine_->params().size(), w_.resume_from));
    }
    return applied(fmt::format("engine over '{}' ({} parameters)", op.target, engine_->params().size()));
  }

  // I5: the user's own forward of `module` (no engine, no gradient) runs after a refused
  // initialize.
  oracles::Result plain_forward_works(Module& module, const std::string& target) {
    const NotChargedToTheRank harness;
    try {
      at::NoGradGuard no_grad;
      // Cyclic, as every scenario's routes are: an MoE takes expert 0 (a strict empty route
      // would refuse it, a failure of the check, not of the model).
      zero3::Route route = zero3::Route::cyclic({});
      module(w_.batch(index_, comm_.rank()).input, route);
    } catch (const std::exception& e) {
      return oracles::violation("I5", target, "", "a plain forward of the model", failure_text(e),
                                "the model does not run after a refused initialize");
    }
    return std::nullopt;
  }

  OpOutcome gather(const Op& op) {
    if (!engine_) return skipped("no live engine");
    const auto found = modules_.find(op.module);
    if (found == modules_.end()) return skipped(fmt::format("no module '{}'", op.module));
    const std::shared_ptr<Module>& target = subtree_at(engine_target_)->root;
    if (!subtree_at(engine_target_)->modules.count(found->second.get()))
      return skipped(fmt::format("module '{}' is outside the engine's model '{}'", op.module, engine_target_));
    const std::vector<const model::ExpectedParam*> reached = model::gathered_params(*expectation_, *found->second, target);
    const bool publish = op.modifier_rank.has_value();
    std::map<std::string, at::Tensor> by_path;
    for (auto& [path, tensor] : unique_named_parameters(target)) by_path.emplace(path, tensor);
    const auto before = stats();
    {
      zero3::GatheredParameters gathered(*engine_, *found->second, op.modifier_rank);
      if (!publish || comm_.rank() == *op.modifier_rank) {  // the user's edit, in place
        at::NoGradGuard no_grad;
        for (const model::ExpectedParam* p : reached) by_path.at(p->path).mul_(op.scale);
      }
      if (publish) gathered.publish_edits();
    }
    pending_ = at::Tensor();  // parameters changed in place: a pending graph is stale
    std::optional<model::Traffic> expected;
    if (twin_) expected = model::gather_traffic(reached, publish, comm_.world_size());
    deferred_traffic_ = MeasuredTraffic{"gather", expected, model::traffic_between(before, stats())};
    if (twin_) {
      twin_call(TwinCall(TwinCall::Kind::drop_pending));
      if (publish) {
        TwinCall call(TwinCall::Kind::scale);
        for (const model::ExpectedParam* p : reached) call.paths.push_back(p->path);
        call.scale = op.scale;
        twin_call(std::move(call));
      }
    }
    return applied(fmt::format("ok; {} parameters gathered, {}", reached.size(),
                               publish ? fmt::format("rank {}'s edit kept", *op.modifier_rank) : "no edit kept"));
  }

  OpOutcome forward(const Op& op) {
    if (!engine_) return skipped("no live engine");
    Batch batch;
    {
      const NotChargedToTheRank harness;  // the data is the harness's
      batch = w_.batch(index_, comm_.rank());
    }
    const auto before = stats();
    at::Tensor out = engine_->forward(batch.input, w_.route(index_, comm_.rank(), op));
    const model::Traffic measured = model::traffic_between(before, stats());
    pending_ = training_loss(out, batch.target);
    const double mine = pending_.item<double>();
    OpOutcome outcome = applied(fmt::format("loss {:.6g}", mine));
    outcome.loss = mine;
    deferred_traffic_ = MeasuredTraffic{"forward", std::nullopt, measured};
    if (twin_) {
      TwinOutcome dense_run = twin_call(TwinCall::forward_of(w_, index_, op, comm_.world_size(), expectation_));
      traces_ = std::move(dense_run.traces);
      dense_losses_ = dense_run.losses;
      outcome.twin_loss = dense_run.losses[static_cast<size_t>(comm_.rank())];
      require(oracles::loss_parity(*outcome.twin_loss, mine, engine_target_));
      deferred_traffic_->expected = trace()->forward();
    }
    return outcome;
  }

  // This rank's traffic trace of the last forward.
  const std::shared_ptr<model::TrafficTrace>& trace() const { return traces_.at(static_cast<size_t>(comm_.rank())); }

  OpOutcome backward() {
    if (!engine_ || !pending_.defined()) return skipped("no forward to back-propagate");
    if (!pending_.requires_grad()) {
      pending_ = at::Tensor();
      if (twin_) twin_call(TwinCall(TwinCall::Kind::drop_pending));
      return skipped("nothing trainable");
    }
    const auto before = stats();
    engine_->backward(pending_);
    const model::Traffic measured = model::traffic_between(before, stats());
    pending_ = at::Tensor();
    OpOutcome outcome = applied("ok");
    deferred_traffic_ = MeasuredTraffic{"backward", std::nullopt, measured};
    if (twin_) {
      const std::set<std::string> with_gradient = twin_call(TwinCall(TwinCall::Kind::backward)).with_gradient;
      outcome.reached.assign(with_gradient.begin(), with_gradient.end());
      if (!traces_.empty()) deferred_traffic_->expected = trace()->backward(with_gradient);
    }
    return outcome;
  }

  OpOutcome step() {
    if (!engine_) return skipped("no live engine");
    // A step changes parameters in place, so a pending forward's graph is stale: PyTorch would
    // refuse to back-propagate it. The step consumes it.
    pending_ = at::Tensor();
    const auto before = stats();
    engine_->step();
    ++micro_steps_;
    deferred_traffic_ = MeasuredTraffic{"step", model::Traffic{}, model::traffic_between(before, stats())};
    if (twin_) twin_call(TwinCall(TwinCall::Kind::step));
    return applied("ok");
  }

  OpOutcome zero_grad() {
    if (!engine_) return skipped("no live engine");
    const auto before = stats();
    engine_->zero_grad();
    deferred_traffic_ = MeasuredTraffic{"zero_grad", model::Traffic{}, model::traffic_between(before, stats())};
    if (twin_) twin_call(TwinCall(TwinCall::Kind::zero_grad));
    return applied("ok");
  }

  OpOutcome write_attr(const Op& op) {
    model::AttributeLedger::Entry* expected = ledger_.find(op.module, "");
    if (expected == nullptr) return skipped(fmt::format("no module '{}'", op.module));
    Module& module = *modules_.at(op.module);
    zero3::AttrDict* actual = &module.attrs();
    if (!op.param.empty()) {
      expected = ledger_.find(op.module, op.param);
      if (expected == nullptr) return skipped(fmt::format("no parameter '{}'", op.param));
      actual = &module.param_attrs(op.param);
    }
    if (op.kind == OpKind::set_attr) {
      actual->set(op.name, op.value);
      const NotChargedToTheRank harness;
      expected->attrs.set(op.name, model::deep_copy(op.value));
      return applied("ok");
    }
    if (!expected->attrs.has(op.name)) return skipped("no such attribute");
    expected->attrs.del(op.name);
    if (actual->has(op.name)) actual->del(op.name);
    return applied("ok");
  }

  OpOutcome release(bool destroy) {
    if (!engine_) return skipped("no live engine");
    if (destroy) engine_.reset();
    else {
      engine_->release();
      engine_.reset();
    }
    engine_tree_ = nullptr;
    engine_optimizer_ = nullptr;
    pending_ = at::Tensor();
    traces_.clear();
    // The model is the user's again: every parameter whole and equal to the twin's.
    if (twin_ && enabled("I3")) {
      const NotChargedToTheRank harness;
      const auto model_params = unique_named_parameters(modules_.at(engine_target_));
      require(twin_->read([&](const model::DenseTwin& twin) {
        return oracles::released_parity(model_params, twin, engine_target_);
      }));
    }
    return applied("ok");
  }

  OpOutcome save(const Op& op) {
    if (!engine_) return skipped("no live engine");
    // An untagged save writes DeepSpeed's default tag, from the model's count of step() calls.
    const std::string tag =
        op.tag ? *op.tag : model::default_tag(micro_steps_, w_.config.gradient_accumulation_steps);
    engine_->save_checkpoint_tagged(dir_, tag);
    latest_tag_ = tag;
    SavedCheckpoint& saved = saved_[tag];
    saved.target = engine_target_;
    saved.micro_steps = micro_steps_;
    {
      const NotChargedToTheRank harness;
      saved.masters.clear();
      for (const auto& p : observe()) saved.masters.push_back(p.master.detach().clone());
      saved.optimizer_state = optimizer_state_fingerprint();
    }
    if (twin_) {
      TwinCall call(TwinCall::Kind::save);
      call.tag = tag;
      twin_call(std::move(call));
    }
    if (twin_ && enabled("I6")) require(check_consolidated().violation);
    return applied(fmt::format("ok; tag '{}'", tag));
  }

  // A cheap, exact summary of the engine optimizer's state: every state tensor, in parameter
  // order, concatenated.
  at::Tensor optimizer_state_fingerprint() {
    const NotChargedToTheRank harness;
    std::vector<at::Tensor> parts;
    for (const auto& p : engine_->params()) {
      at::Tensor snapshot = zero3::state_tensors_of(engine_->optimizer(), p.master);
      if (snapshot.defined()) parts.push_back(snapshot);
    }
    return parts.empty() ? at::zeros({0}) : at::cat(parts);
  }

  OpOutcome load(const Op& op) {
    if (!engine_) return skipped("no live engine");
    if (!op.tag && !latest_tag_) return skipped("no checkpoint saved");
    const std::string tag = op.tag ? *op.tag : *latest_tag_;
    const auto saved = saved_.find(tag);
    if (saved == saved_.end()) return skipped(fmt::format("no checkpoint saved under tag '{}'", tag));
    if (saved->second.target != engine_target_)
      return skipped(fmt::format("the checkpoint of tag '{}' is of another model", tag));
    pending_ = at::Tensor();  // as with step: the graph would be stale
    const model::LoadEffect effect = model::load_effect(op.optimizer_states, op.module_only);
    // Per the option matrix: the parameters and masters are the checkpoint's; the optimizer state
    // and the step counter the checkpoint's or as they are now.
    const at::Tensor state_expected = effect.optimizer_state ? saved->second.optimizer_state : optimizer_state_fingerprint();
    const int64_t steps_expected = effect.step_counters ? saved->second.micro_steps : micro_steps_;
    engine_->load_checkpoint_tagged(dir_, op.tag.value_or(""), zero3::LoadOptions{op.optimizer_states, op.module_only});
    require(oracles::round_trip(saved->second.masters, state_expected, observe(), optimizer_state_fingerprint(),
                                engine_target_));
    require(oracles::step_counter(steps_expected, engine_->micro_steps(), engine_target_));
    micro_steps_ = steps_expected;
    if (twin_) {
      TwinCall call(TwinCall::Kind::load);
      call.tag = tag;
      call.effect = effect;
      twin_call(std::move(call));
    }
    const std::string what = fmt::format("ok; tag '{}'{}", tag,
                                         op.module_only             ? ", module only"
                                         : !op.optimizer_states ? ", without optimizer states"
                                                                    : "");
    if (op.world_size == 0) return applied(what);
    // A second world starts with a fresh optimizer: it could keep no state of its own, so only a
    // load that restores everything is resumed there.
    if (!effect.optimizer_state || !effect.step_counters)
      return applied(what + fmt::format("; no world of {} made (a partial load resumes nothing)", op.world_size));
    // This world now holds exactly what it saved (I6 above), so what it holds whole is what any
    // world must hold after loading the same checkpoint.
    std::vector<oracles::WholeParam> here;
    {
      const NotChargedToTheRank harness;
      here = oracles::gather_whole_state(*engine_);
    }
    if (comm_.rank() != 0) {
      OpOutcome outcome = applied(what + fmt::format("; rank 0 loads it into a world of {} too", op.world_size));
      outcome.side_world = op.world_size;
      return outcome;
    }
    return load_in_side_world(op.world_size, tag, here);
  }

  // Rank 0 loads the checkpoint into a second world of `m` ranks, threads of this process: the
  // model built afresh (other initial values are overwritten by the load), the same target
  // initialized with a new optimizer of the workload's kind, as a user resuming on another
  // cluster would. What that world holds whole must equal `here` (I6).
  OpOutcome load_in_side_world(int m, const std::string& tag, const std::vector<oracles::WholeParam>& here) {
    OpOutcome outcome;
    outcome.side_world = m;
    const std::shared_ptr<Module> fresh = modules_by_path(w_.build()).at(engine_target_);
    const int64_t threshold = w_.config.zero_optimization.stage3_param_persistence_threshold;
    if (std::holds_alternative<model::PlacementRefusal>(model::expect(fresh, w_.config.placement, threshold, m))) {
      outcome.detail = fmt::format("ok; a world of {} cannot place the experts as the policy says, so it was not made", m);
      return outcome;
    }
    zero3::Config config = w_.config;
    // The batch per step is the new world's: micro batch * accumulation * its ranks.
    if (config.train_batch_size != 0)
      config.train_batch_size = config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps * m;
    std::vector<oracles::WholeParam> there;
    std::string failure;
    try {
      WorldOptions threads;
      threads.timeout = options_.world.timeout;
      // Threads of this process whatever this world is made of: the side world is this rank's
      // own (a fiber's small stack gets a thread of its own: thread_world.cc).
      make_world(m, threads)->run([&](zero3::Comm& comm) {
        const std::shared_ptr<Module> model = modules_by_path(w_.build()).at(engine_target_);
        auto optimizer = w_.optimizer(trainable_parameters(*model));
        auto engine = zero3::initialize(model, *optimizer, config, comm, zero3::EngineOptions(options_.fault));
        engine->load_checkpoint_tagged(dir_, tag);
        const NotChargedToTheRank harness;
        auto whole = oracles::gather_whole_state(*engine);
        if (comm.rank() == 0) there = std::move(whole);
      });
    } catch (const std::exception& e) {
      failure = failure_text(e);
    }
    if (!failure.empty())
      require(oracles::violation("I6", engine_target_, "", fmt::format("a world of {} loads the checkpoint", m),
                                 failure, fmt::format("the checkpoint of {} ranks does not load into {}",
                                                      comm_.world_size(), m)));
    require(oracles::resharded(here, there, comm_.world_size(), m, engine_target_));
    outcome.side_world_made = failure.empty();
    outcome.detail = fmt::format("ok; a world of {} loaded it too and holds the same", m);
    return outcome;
  }

  const model::Workload& w_;
  zero3::Comm& comm_;
  RunOptions options_;
  std::string dir_;
  RankAccount* account_;  // this rank's memory account (nullptr: not counted)
  int64_t index_ = -1;
  std::shared_ptr<Module> model_;
  // The tree's modules by path: operations change attributes and parameter data, never the tree.
  const std::map<std::string, std::shared_ptr<Module>> modules_;
  model::AttributeLedger ledger_;
  std::optional<TwinView> twin_;  // none when no oracle reads it
  std::shared_ptr<const model::Expectation> expectation_ = std::make_shared<const model::Expectation>();
  std::unique_ptr<torch::optim::Optimizer> user_optimizer_;
  const torch::optim::Optimizer* engine_optimizer_ = nullptr;
  std::unique_ptr<zero3::Engine> engine_;
  std::vector<std::unique_ptr<zero3::Engine>> unwanted_;  // released first, at the end (see initialize)
  std::string engine_target_;
  std::map<std::string, Subtree> subtrees_;            // subtree_at's, by path
  const std::unordered_set<const Module*>* engine_tree_ = nullptr;  // the live engine's subtree
  at::Tensor pending_;
  std::vector<std::shared_ptr<model::TrafficTrace>> traces_;  // each rank's schedule of the last forward
  std::optional<MeasuredTraffic> deferred_traffic_;  // checked after the sweep: I8 comes last
  std::vector<Violation> found_;  // this operation's, when the run goes on after one
  std::vector<double> dense_losses_;  // the twin's losses by rank, this operation's forward
  // The checkpoints saved in dir_, by tag, with what each must restore (I6), and the last tag.
  struct SavedCheckpoint {
    std::string target;
    std::vector<at::Tensor> masters;
    at::Tensor optimizer_state;
    int64_t micro_steps = 0;
  };
  std::map<std::string, SavedCheckpoint> saved_;
  std::optional<std::string> latest_tag_;
  int64_t micro_steps_ = 0;  // the model's count of the live engine's step() calls
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
