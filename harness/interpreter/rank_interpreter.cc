// One rank's interpreter: applies an operation to this rank's engine and to the model, measures
// what the engine holds and moved, and hands both to the oracles.
#include "engine/awake_wait.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/optimizer_rebuild.h"
#include "harness/dense_baseline.h"
#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"
#include "harness/oracles/oracles.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
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

std::vector<at::Tensor> trainable(const Module& root) {
  std::vector<at::Tensor> out;
  for (const auto& p : zero3::unique_parameters(root))
    if (p.requires_grad()) out.push_back(p);
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

int64_t storage_bytes(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.has_storage() && b.has_storage() &&
         a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

std::vector<oracles::ObservedParam> observe(const zero3::Engine& engine) {
  std::vector<oracles::ObservedParam> out;
  const auto views = engine.params();
  out.reserve(views.size());
  const auto optimizer_elements = engine.optimizer_state_elements();
  for (size_t i = 0; i < views.size(); ++i) {
    const auto& v = views[i];
    oracles::ObservedParam o;
    o.path = v.path;
    o.reported_owner = v.owner;
    o.reported_persistent = v.persistent;
    o.param_elements = v.param.numel();
    o.param_bytes = storage_bytes(v.param);
    o.master_bytes = same_storage(v.master, v.param) ? 0 : storage_bytes(v.master);
    o.grad_shard_bytes = storage_bytes(v.grad_shard);
    const at::Tensor full_grad = v.param.grad();
    o.full_grad_bytes = same_storage(full_grad, v.grad_shard) ? 0 : storage_bytes(full_grad);
    o.optimizer_elements = optimizer_elements[i];
    o.master = v.master;
    out.push_back(std::move(o));
  }
  return out;
}

namespace {

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
OpOutcome refused(std::string error) {
  OpOutcome out;
  out.status = OpOutcome::Status::refused;
  out.refused_with = std::move(error);
  return out;
}

}  // namespace

// ---- the dense twin, shared by the ranks of a world ----------------------------------------------

namespace {

// One call the interpreter makes on the dense twin. The twin's state is a function of the calls
// made on it, so two ranks whose calls are equal see the same twin.
struct TwinCall {
  enum class Kind { retarget, forward, backward, drop_pending, step, zero_grad, save, load };
  explicit TwinCall(Kind k) : kind(k) {}
  static TwinCall retarget_to(std::string path) {
    TwinCall call(Kind::retarget);
    call.target = std::move(path);
    return call;
  }
  static TwinCall forward_of(int64_t index, const Op& op, std::shared_ptr<const model::Expectation> expectation) {
    TwinCall call(Kind::forward);
    call.index = index;
    call.route = route_of(op);
    call.expectation = std::move(expectation);
    return call;
  }

  Kind kind;
  std::string target;  // retarget
  int64_t index = -1;  // forward: the operation (its batches)
  zero3::Route route;  // forward: the operation's route, fresh (route_of)
  std::shared_ptr<const model::Expectation> expectation;  // forward: what its traffic trace follows

  friend bool operator==(const TwinCall& a, const TwinCall& b) {
    return a.kind == b.kind && a.target == b.target && a.index == b.index && a.route.choices() == b.route.choices() &&
           (a.expectation == b.expectation || (a.expectation && b.expectation && *a.expectation == *b.expectation));
  }
};

// What a call gave.
struct TwinOutcome {
  std::vector<double> losses;                  // forward: by rank
  std::shared_ptr<model::TrafficTrace> trace;  // forward: the schedule it traced
  std::set<std::string> with_gradient;         // backward
};

// A trace together with the expectation it reads.
struct OwnedTrace {
  OwnedTrace(std::shared_ptr<const model::Expectation> e, const std::shared_ptr<Module>& target, int world)
      : expectation(std::move(e)), trace(*expectation, target, world) {}
  std::shared_ptr<const model::Expectation> expectation;
  model::TrafficTrace trace;
};

TwinOutcome apply_call(model::DenseTwin& twin, const TwinCall& call, const Scenario& s) {
  TwinOutcome out;
  switch (call.kind) {
    case TwinCall::Kind::retarget: twin.retarget(call.target); break;
    case TwinCall::Kind::forward: {
      auto owned = std::make_shared<OwnedTrace>(call.expectation, twin.target(), s.world_size);
      out.trace = std::shared_ptr<model::TrafficTrace>(owned, &owned->trace);
      out.losses = twin.forward(call.index, call.route, out.trace.get());
      break;
    }
    case TwinCall::Kind::backward: out.with_gradient = twin.backward(); break;
    case TwinCall::Kind::drop_pending: twin.drop_pending(); break;
    case TwinCall::Kind::step: twin.step(); break;
    case TwinCall::Kind::zero_grad: twin.zero_grad(); break;
    case TwinCall::Kind::save: twin.save(); break;
    case TwinCall::Kind::load: twin.load(); break;
  }
  return out;
}

}  // namespace

class SharedTwin {
 public:
  explicit SharedTwin(const Scenario& s) : twin(s) {}
  std::shared_mutex mutex;
  model::DenseTwin twin;
  std::vector<TwinCall> calls;         // every call made on `twin`, in order
  std::vector<TwinOutcome> outcomes;  // what each gave
};

std::shared_ptr<SharedTwin> make_shared_twin(const Scenario& scenario) {
  use_sequential_kernels();  // the twin is built here, not on a rank thread: see world.h
  return std::make_shared<SharedTwin>(scenario);
}

namespace {

// Takes `lock`. A rank holding it is computing what this one needs next, mostly for less than a
// futex wake-up costs on a virtual machine: wait awake first (engine/awake_wait.h).
template <class Lock>
ZERO3_TIMING_DEPENDENT void take(Lock& lock) {
  if (!zero3::wait_awake([&] { return lock.try_lock(); }, std::chrono::microseconds(500))) lock.lock();
}

// One rank's dense twin: the world's shared one while this rank's calls are the shared calls,
// else its own.
class TwinView {
 public:
  TwinView(const Scenario& s, std::shared_ptr<SharedTwin> shared) : s_(s), shared_(std::move(shared)) {
    if (!shared_) own_ = std::make_unique<model::DenseTwin>(s);
  }

  TwinOutcome call(TwinCall call) {
    if (shared_) {
      std::unique_lock<std::shared_mutex> lock(shared_->mutex, std::defer_lock);
      take(lock);
      const size_t position = history_.size();
      if (shared_->calls.size() == position) {  // the first rank here computes
        TwinOutcome outcome = apply_call(shared_->twin, call, s_);
        shared_->calls.push_back(call);
        shared_->outcomes.push_back(outcome);
        history_.push_back(std::move(call));
        return outcome;
      }
      if (position < shared_->calls.size() && shared_->calls[position] == call) {  // computed by another rank
        history_.push_back(std::move(call));
        return shared_->outcomes[position];
      }
      lock.unlock();
      go_own();
    }
    TwinOutcome outcome = apply_call(*own_, call, s_);
    history_.push_back(std::move(call));
    return outcome;
  }

  // Returns read(twin) for the twin in the state this rank's calls put it in.
  template <class Read>
  auto read(Read&& read) {
    if (shared_) {
      std::shared_lock<std::shared_mutex> lock(shared_->mutex, std::defer_lock);
      take(lock);
      if (shared_->calls.size() == history_.size()) return read(std::as_const(shared_->twin));
      lock.unlock();
      go_own();
    }
    return read(std::as_const(*own_));
  }

 private:
  // From here on this rank trains its own twin, brought to where its calls so far put it.
  void go_own() {
    own_ = std::make_unique<model::DenseTwin>(s_);
    for (const TwinCall& call : history_) apply_call(*own_, call, s_);
    shared_.reset();
  }

  const Scenario& s_;
  std::shared_ptr<SharedTwin> shared_;      // null once this rank has its own
  std::unique_ptr<model::DenseTwin> own_;
  std::vector<TwinCall> history_;           // the calls this rank made
};

}  // namespace

class ScenarioRunner {
 public:
  ScenarioRunner(const Scenario& s, zero3::Comm& comm, const RunOptions& options, std::string dir,
                 std::shared_ptr<SharedTwin> shared_twin)
      : s_(s), comm_(comm), options_(options), dir_(std::move(dir)), model_(build_tree(s)),
        modules_(modules_by_path(model_)), ledger_(model_) {
    // The twin is a whole second model trained alongside: only I3 and I8 read it, and the
    // attributes fuzzer (I1, I2, I5, I7) runs hundreds of scenarios a second without it.
    if (options_.needs_dense_twin()) twin_.emplace(s, std::move(shared_twin));
  }

  OpOutcome apply(int64_t index, const Op& op) {
    index_ = index;
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
      case OpKind::save: outcome = save(); break;
      case OpKind::load: outcome = load(op); break;
    }
    outcome.kind = op.kind;
    if (options_.checks_after_every_op) {
      if (enabled("I1")) require(oracles::attributes(ledger_));
      // Measured once for the sweeps that are on; a switched-off oracle costs nothing.
      if (engine_ && (enabled("I2") || enabled("I4") || (twin_ && enabled("I3")))) {
        const auto observed = observe();
        if (enabled("I2")) require(oracles::placement(*expectation_, observed, comm_.rank(), engine_target_));
        if (enabled("I4")) require(oracles::memory(*expectation_, observed, engine_target_));
        if (twin_ && enabled("I3"))
          require(twin_->read([&](const model::DenseTwin& twin) {
            return oracles::parity(*expectation_, twin, observed, comm_.rank(), comm_.world_size(), engine_target_);
          }));
      }
    }
    if (deferred_traffic_) require(oracles::traffic(deferred_traffic_->operation, deferred_traffic_->expected,
                                                    deferred_traffic_->measured, engine_target_));
    if (options_.twin_observer && twin_ && comm_.rank() == 0)
      twin_->read([&](const model::DenseTwin& twin) { options_.twin_observer(index, op.kind, twin, dense_losses_); });
    return outcome;
  }

 private:
  struct MeasuredTraffic {
    std::string operation;
    model::Traffic expected, measured;
  };

  bool enabled(const std::string& invariant) const { return options_.disabled_oracles.count(invariant) == 0; }

  void require(oracles::Result found) {
    if (!found || !enabled(found->invariant)) return;
    found->op_index = index_;
    found->rank = comm_.rank();
    throw ViolationFound(std::move(*found));
  }

  std::vector<oracles::ObservedParam> observe() const { return zerocheck::observe(*engine_); }

  // A module's subtree as initialize needs it, worked out once per path: the tree never changes
  // within a scenario (only attributes and parameter data do), and a script initializes again
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
    Subtree subtree{it->second, {}, trainable(*it->second)};
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
    if (engine_tree_)
      for (const Module* m : *engine_tree_) facts.overlaps_live_engine |= new_tree.count(m) > 0;
    const bool same_optimizer = op.optimizer == "same" && user_optimizer_ != nullptr;
    facts.optimizer_held_by_live_engine = same_optimizer && engine_optimizer_ == user_optimizer_.get();
    std::unique_ptr<torch::optim::Optimizer> fresh;
    torch::optim::Optimizer* optimizer =
        same_optimizer ? user_optimizer_.get() : (fresh = model::make_optimizer(s_, subtree->trainable)).get();
    // From the user's attributes as they are before initialize: an engine that writes
    // attributes must not move the goalposts. A repeat the model refuses whatever the placement
    // says needs none (the common case: scripts initialize again and again).
    std::variant<model::Expectation, model::PlacementRefusal> expected;
    if (!model::predict_initialize(facts)) {
      expected = model::expect(target, s_.placement, s_.config.zero_optimization.stage3_param_persistence_threshold,
                               comm_.world_size());
      const int64_t batch = s_.config.train_batch_size;
      facts.batch_sizes_consistent =
          batch == 0 || batch == s_.config.train_micro_batch_size_per_gpu * s_.config.gradient_accumulation_steps *
                                     s_.world_size;
      facts.placement_evaluates = std::holds_alternative<model::Expectation>(expected);
      facts.optimizer_covers_target = covers_exactly(*optimizer, subtree->trainable);
    }
    const std::optional<std::string> predicted = model::predict_initialize(facts);

    // What a refused call must leave as it found: the attributes as they are now (deep copies,
    // not the ledger: I1 judges the user's writes, I5 only this call) and the live shards.
    std::optional<model::AttributeLedger> attrs_before;
    std::vector<at::Tensor> masters_before;
    if (predicted == std::optional<std::string>("AlreadyInitialized")) {
      attrs_before.emplace(model_);
      for (const auto& p : observe()) masters_before.push_back(p.master.detach().clone());
    }

    std::unique_ptr<zero3::Engine> created;
    std::string raised;
    try {
      zero3::Config config = s_.config;
      config.placement = s_.placement;  // the scenario's policy, handed over as the user would
      created = zero3::initialize(target, *optimizer, config, comm_, zero3::EngineOptions(options_.fault));
    } catch (const zero3::AlreadyInitialized&) {
      raised = "AlreadyInitialized";
    } catch (const zero3::ConfigError&) {
      raised = "ConfigError";
    } catch (const zero3::PlacementError&) {
      raised = "PlacementError";
    } catch (const zero3::OptimizerMismatch&) {
      raised = "OptimizerMismatch";
    }
    require(oracles::initialize_outcome(predicted, created != nullptr, raised, op.target));
    if (predicted == std::optional<std::string>("AlreadyInitialized")) {
      require(oracles::attributes(*attrs_before, "I5"));
      require(oracles::refused_changed_nothing(masters_before, observe()));
    }
    if (predicted || !created) {
      // Only with that oracle switched off does an engine get here that the model says must not
      // exist: it is kept, unused, until the scenario ends (releasing it now would touch the live
      // engine's parameters; leaking it would leave its claims in the process-wide registry for
      // the next scenario); what it does to training is for the other oracles to see.
      if (created) unwanted_.push_back(std::move(created));
      return refused(raised.empty() ? "nothing (accepted)" : raised);
    }
    engine_ = std::move(created);
    engine_target_ = op.target;
    engine_tree_ = &new_tree;
    engine_optimizer_ = optimizer;
    if (fresh) user_optimizer_ = std::move(fresh);  // the user holds the new optimizer now
    expectation_ = std::make_shared<const model::Expectation>(std::get<model::Expectation>(std::move(expected)));
    if (twin_) twin_->call(TwinCall::retarget_to(op.target));
    pending_ = at::Tensor();
    trace_.reset();
    return applied(fmt::format("engine over '{}' ({} parameters)", op.target, engine_->params().size()));
  }

  OpOutcome forward(const Op& op) {
    if (!engine_) return skipped("no live engine");
    const auto [x, y] = model::batch_of(s_, index_, comm_.rank());
    const auto before = stats();
    at::Tensor out = engine_->forward(x, route_of(op));
    const model::Traffic measured = model::traffic_between(before, stats());
    pending_ = training_loss(out, y);
    const double mine = pending_.item<double>();
    if (twin_) {
      TwinOutcome dense_run = twin_->call(TwinCall::forward_of(index_, op, expectation_));
      trace_ = std::move(dense_run.trace);
      const std::vector<double>& dense = dense_run.losses;
      dense_losses_ = dense;
      require(oracles::loss_parity(dense[static_cast<size_t>(comm_.rank())], mine, engine_target_));
      deferred_traffic_ = MeasuredTraffic{"forward", trace_->forward(), measured};
    }
    OpOutcome outcome = applied(fmt::format("loss {:.6g}", mine));
    outcome.loss = mine;
    return outcome;
  }

  OpOutcome backward() {
    if (!engine_ || !pending_.defined()) return skipped("no forward to back-propagate");
    if (!pending_.requires_grad()) {
      pending_ = at::Tensor();
      if (twin_) twin_->call(TwinCall(TwinCall::Kind::drop_pending));
      return skipped("nothing trainable");
    }
    const auto before = stats();
    engine_->backward(pending_);
    const model::Traffic measured = model::traffic_between(before, stats());
    pending_ = at::Tensor();
    if (twin_) {
      const std::set<std::string> with_gradient = twin_->call(TwinCall(TwinCall::Kind::backward)).with_gradient;
      deferred_traffic_ = MeasuredTraffic{"backward", trace_->backward(with_gradient), measured};
    }
    return applied("ok");
  }

  OpOutcome step() {
    if (!engine_) return skipped("no live engine");
    // A step changes parameters in place, so a pending forward's graph is stale: PyTorch would
    // refuse to back-propagate it. The step consumes it.
    pending_ = at::Tensor();
    const auto before = stats();
    engine_->step();
    deferred_traffic_ = MeasuredTraffic{"step", model::Traffic{}, model::traffic_between(before, stats())};
    if (twin_) twin_->call(TwinCall(TwinCall::Kind::step));
    return applied("ok");
  }

  OpOutcome zero_grad() {
    if (!engine_) return skipped("no live engine");
    const auto before = stats();
    engine_->zero_grad();
    deferred_traffic_ = MeasuredTraffic{"zero_grad", model::Traffic{}, model::traffic_between(before, stats())};
    if (twin_) twin_->call(TwinCall(TwinCall::Kind::zero_grad));
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
    trace_.reset();
    // The model is the user's again: every parameter whole and equal to the twin's.
    if (twin_) {
      const auto model_params = unique_named_parameters(modules_.at(engine_target_));
      require(twin_->read([&](const model::DenseTwin& twin) {
        return oracles::released_parity(model_params, twin, engine_target_);
      }));
    }
    return applied("ok");
  }

  OpOutcome save() {
    if (!engine_) return skipped("no live engine");
    engine_->save_checkpoint(dir_);
    saved_target_ = engine_target_;
    saved_masters_.clear();
    for (const auto& p : observe()) saved_masters_.push_back(p.master.detach().clone());
    saved_optimizer_state_ = optimizer_state_fingerprint();
    if (twin_) twin_->call(TwinCall(TwinCall::Kind::save));
    auto consolidated = engine_->consolidated_state_dict();
    const auto target = modules_.at(engine_target_);
    zero3::GatheredParameters gathered(*engine_, *target);
    if (comm_.rank() == 0)
      require(oracles::consolidated(*expectation_, consolidated, unique_named_parameters(target), engine_target_));
    return applied("ok");
  }

  // A cheap, exact summary of the engine optimizer's state: every state tensor, in parameter
  // order, concatenated.
  at::Tensor optimizer_state_fingerprint() {
    std::vector<at::Tensor> parts;
    for (const auto& p : engine_->params()) {
      at::Tensor snapshot = zero3::state_tensors_of(engine_->optimizer(), p.master);
      if (snapshot.defined()) parts.push_back(snapshot);
    }
    return parts.empty() ? at::zeros({0}) : at::cat(parts);
  }

  OpOutcome load(const Op& op) {
    if (!engine_) return skipped("no live engine");
    if (!saved_target_ || *saved_target_ != engine_target_) return skipped("no checkpoint of this engine's model");
    pending_ = at::Tensor();  // as with step: the graph would be stale
    engine_->load_checkpoint(dir_);
    require(oracles::round_trip(saved_masters_, saved_optimizer_state_, observe(), optimizer_state_fingerprint(),
                                engine_target_));
    if (twin_) twin_->call(TwinCall(TwinCall::Kind::load));
    if (op.world_size == 0) return applied("ok");
    // This world now holds exactly what it saved (I6 above), so what it holds whole is what any
    // world must hold after loading the same checkpoint.
    const auto here = gather_whole_state(*engine_);
    if (comm_.rank() != 0) return applied(fmt::format("ok; rank 0 loads it into a world of {} too", op.world_size));
    return load_in_side_world(op.world_size, here);
  }

  // Rank 0 loads the checkpoint into a second world of `m` ranks, threads of this process: the
  // model built afresh from the scenario (other initial values are overwritten by the load), the
  // same target initialized with a new optimizer of the scenario's kind, as a user resuming on
  // another cluster would. What that world holds whole must equal `here` (I6).
  OpOutcome load_in_side_world(int m, const std::vector<oracles::WholeParam>& here) {
    const std::shared_ptr<Module> fresh = modules_by_path(build_tree(s_)).at(engine_target_);
    const int64_t threshold = s_.config.zero_optimization.stage3_param_persistence_threshold;
    if (std::holds_alternative<model::PlacementRefusal>(model::expect(fresh, s_.placement, threshold, m)))
      return applied(fmt::format("ok; a world of {} cannot place the experts as the policy says, so it was not made", m));
    zero3::Config config = s_.config;
    config.placement = s_.placement;
    // The batch per step is the new world's: micro batch * accumulation * its ranks.
    if (config.train_batch_size != 0)
      config.train_batch_size = config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps * m;
    std::vector<oracles::WholeParam> there;
    std::string failure;
    auto side_world = [&] {
      try {
        WorldOptions world;
        world.world_size = m;
        world.timeout = options_.timeout;
        world.in_this_process = true;
        run_world(world, [&](zero3::Comm& comm) {
          const std::shared_ptr<Module> model = modules_by_path(build_tree(s_)).at(engine_target_);
          auto optimizer = model::make_optimizer(s_, trainable(*model));
          auto engine = zero3::initialize(model, *optimizer, config, comm, zero3::EngineOptions(options_.fault));
          engine->load_checkpoint(dir_);
          auto whole = gather_whole_state(*engine);
          if (comm.rank() == 0) there = std::move(whole);
        });
      } catch (const std::exception& e) {
        failure = e.what();
      }
    };
    // The side world's rank 0 runs on the calling thread (its other ranks on idle rank threads,
    // world.cc), which then gets its own LibTorch state back: creating a thread for it cost more
    // than the load. A fiber's stack is small, though, so from a fiber it gets a thread.
    if (options_.ranks_as_fibers) {
      std::thread host(side_world);
      host.join();
    } else {
      side_world();
    }
    if (!failure.empty())
      require(oracles::violation("I6", engine_target_, "", fmt::format("a world of {} loads the checkpoint", m),
                                 failure, fmt::format("the checkpoint of {} ranks does not load into {}",
                                                      comm_.world_size(), m)));
    require(oracles::resharded(here, there, comm_.world_size(), m, engine_target_));
    return applied(fmt::format("ok; a world of {} loaded it too and holds the same", m));
  }

  const Scenario& s_;
  zero3::Comm& comm_;
  RunOptions options_;
  std::string dir_;
  int64_t index_ = -1;
  std::shared_ptr<Module> model_;
  // The tree's modules by path: operations change attributes and parameter data, never the tree.
  const std::map<std::string, std::shared_ptr<Module>> modules_;
  model::AttributeLedger ledger_;
  std::optional<TwinView> twin_;  // none when neither I3 nor I8 is checked
  std::shared_ptr<const model::Expectation> expectation_ = std::make_shared<const model::Expectation>();
  std::unique_ptr<torch::optim::Optimizer> user_optimizer_;
  const torch::optim::Optimizer* engine_optimizer_ = nullptr;
  std::unique_ptr<zero3::Engine> engine_;
  std::vector<std::unique_ptr<zero3::Engine>> unwanted_;  // released first, at the end (see initialize)
  std::string engine_target_;
  std::map<std::string, Subtree> subtrees_;            // subtree_at's, by path
  const std::unordered_set<const Module*>* engine_tree_ = nullptr;  // the live engine's subtree
  at::Tensor pending_;
  std::shared_ptr<model::TrafficTrace> trace_;  // the schedule of the last forward
  std::optional<MeasuredTraffic> deferred_traffic_;  // checked after the sweep: I8 comes last
  std::vector<double> dense_losses_;                 // the twin's losses by rank, this operation's forward
  std::optional<std::string> saved_target_;
  std::vector<at::Tensor> saved_masters_;
  at::Tensor saved_optimizer_state_;
};

int64_t measured_state_bytes(const zero3::Engine& engine) {
  int64_t bytes = 0;
  for (const auto& o : observe(engine))
    bytes += o.param_bytes + o.master_bytes + o.grad_shard_bytes + o.full_grad_bytes + o.optimizer_elements * 4;
  return bytes;
}

RankInterpreter::RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                                 const std::string& checkpoint_dir, std::shared_ptr<SharedTwin> shared_twin)
    : impl_(std::make_unique<ScenarioRunner>(scenario, comm, options, checkpoint_dir, std::move(shared_twin))) {}
RankInterpreter::~RankInterpreter() = default;
OpOutcome RankInterpreter::apply(int64_t index, const Op& op) { return impl_->apply(index, op); }

}  // namespace zerocheck
