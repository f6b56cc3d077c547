// A stateful, model-based test (rc::state) over the operation set, on one rank: the model
// decides which operations are possible (checkPreconditions) and predicts which the engine must
// refuse; the interpreter checks invariants I1..I8 after every command. Any unpredicted
// exception is a finding.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include "engine/local_comm.h"
#include "harness/scenario/collision_names.h"
#include "engine/testing/fault_under_test.h"
#include "harness/interpreter/interpreter.h"

namespace zerocheck {
namespace {

// A fixed tree with experts placed by their `id` and no sharing, so the model can reason
// about overlap by paths alone.
Scenario header() {
  Scenario s;
  s.world_size = 1;
  s.features = 3;
  s.batch = 2;
  s.config.zero_optimization.stage3_param_persistence_threshold = 4;
  s.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
  s.placement.attr = "id";
  auto node = [](std::string kind, std::vector<int> children = {}) {
    NodeSpec n;
    n.kind = std::move(kind);
    n.children = std::move(children);
    return n;
  };
  s.tree = {node("Sequential", {1, 2, 5}), node("Linear"), node("MoE", {3, 4}), node("Expert"), node("Expert"),
            node("Sequential", {6, 7}), node("LayerNorm"), node("Offset")};
  s.tree[3].attrs = {{"id", zero3::AttrValue(int64_t{0})}};
  s.tree[4].attrs = {{"id", zero3::AttrValue(int64_t{1})}};
  s.tree[7].shape = {13};
  return s;
}

const std::vector<std::string> kTargets = {"", "0", "1", "2", "2.0"};

bool overlaps(const std::string& a, const std::string& b) {
  auto within = [](const std::string& inner, const std::string& outer) {
    return outer.empty() || inner == outer || inner.rfind(outer + ".", 0) == 0;
  };
  return within(a, b) || within(b, a);
}

struct Model {
  bool live = false;
  std::string target;
  bool engine_has_user_optimizer = false;  // the live engine was built with the user's optimizer
  bool user_optimizer_exists = false;
  std::string user_optimizer_target;
  bool pending = false;
  bool saved = false;
  std::string saved_target;
};

struct Sut {
  Scenario scenario = header();
  std::shared_ptr<zero3::LocalCommGroup> group = zero3::LocalCommGroup::create(1, zero3::CommOptions());
  std::unique_ptr<zero3::Comm> comm = group->comm_for(0);
  std::string dir = "/tmp/zerocheck_stateful_" + std::to_string(::getpid());
  RankInterpreter rank{scenario, *comm, RunOptions{fault_under_test()}, dir};
  int64_t index = 0;

  OpOutcome apply(const Op& op) {
    try {
      return rank.apply(index++, op);
    } catch (const ViolationFound& v) {
      RC_FAIL(v.violation.to_text());
    }
  }
};

using Command = rc::state::Command<Model, Sut>;

struct Initialize : Command {
  std::string optimizer = *rc::gen::elementOf(std::vector<std::string>{"same", "fresh"});
  std::string target = *rc::gen::elementOf(kTargets);

  bool refused(const Model& m) const {
    const bool same = optimizer == "same" && m.user_optimizer_exists;
    return m.live && (overlaps(target, m.target) || (same && m.engine_has_user_optimizer));
  }
  bool mismatched(const Model& m) const {  // "same" optimizer built over another target
    return optimizer == "same" && m.user_optimizer_exists && m.user_optimizer_target != target;
  }
  void apply(Model& m) const override {
    if (refused(m) || mismatched(m)) return;
    m.live = true;
    m.target = target;
    m.pending = false;
    m.engine_has_user_optimizer = true;  // the engine was handed the optimizer the user now holds
    if (!m.user_optimizer_exists || optimizer == "fresh") {
      m.user_optimizer_exists = true;
      m.user_optimizer_target = target;
    }
  }
  void run(const Model& m, Sut& sut) const override {
    Op op;
    op.kind = OpKind::initialize;
    op.optimizer = optimizer;
    op.target = target;
    const OpOutcome outcome = sut.apply(op);
    using Status = OpOutcome::Status;
    if (refused(m)) RC_ASSERT(outcome.status == Status::refused && outcome.error_kind == "AlreadyInitialized");
    else if (mismatched(m)) RC_ASSERT(outcome.status == Status::refused && outcome.error_kind == "OptimizerMismatch");
    else RC_ASSERT(outcome.status == Status::applied);
  }
  void show(std::ostream& os) const override { os << "initialize(" << optimizer << ", '" << target << "')"; }
};

struct Forward : Command {
  std::vector<int64_t> route = *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, 3));
  void checkPreconditions(const Model& m) const override { RC_PRE(m.live); }
  void apply(Model& m) const override { m.pending = true; }
  void run(const Model&, Sut& sut) const override {
    Op op;
    op.kind = OpKind::forward;
    op.route = route;
    RC_ASSERT(sut.apply(op).loss.has_value());
  }
  void show(std::ostream& os) const override { os << "forward"; }
};

template <OpKind kind>
struct Simple : Command {
  void checkPreconditions(const Model& m) const override {
    RC_PRE(m.live);
    if (kind == OpKind::backward) RC_PRE(m.pending);
    if (kind == OpKind::load) RC_PRE(m.saved && m.saved_target == m.target);
  }
  void apply(Model& m) const override {
    if (kind == OpKind::backward || kind == OpKind::step || kind == OpKind::load) m.pending = false;
    if (kind == OpKind::release || kind == OpKind::destroy) m.live = false, m.pending = false;
    if (kind == OpKind::save) m.saved = true, m.saved_target = m.target;
  }
  void run(const Model&, Sut& sut) const override {
    Op op;
    op.kind = kind;
    RC_ASSERT(sut.apply(op).status == OpOutcome::Status::applied);
  }
  void show(std::ostream& os) const override { os << to_string(kind); }
};

struct SetAttr : Command {
  std::string module = *rc::gen::elementOf(std::vector<std::string>{"", "0", "1.experts.0", "1.experts.1", "2.1"});
  std::string name = *rc::gen::map(rc::gen::elementOf(collision_names()), [](const CollisionName& c) { return c.name; });
  int64_t value = *rc::gen::inRange<int64_t>(0, 8);
  void apply(Model&) const override {}
  void run(const Model&, Sut& sut) const override {
    Op op;
    op.kind = OpKind::set_attr;
    op.module = module;
    op.name = name;
    op.value = zero3::AttrValue(value);
    RC_ASSERT(sut.apply(op).status == OpOutcome::Status::applied);
  }
  void show(std::ostream& os) const override { os << "set_attr('" << module << "', " << name << "=" << value << ")"; }
};

RC_GTEST_PROP(StatefulEngine, OperationsMatchTheModel, ()) {
  Model model;
  Sut sut;
  rc::state::check(model, sut,
                   rc::state::gen::execOneOfWithArgs<Initialize, Forward, Simple<OpKind::backward>,
                                                     Simple<OpKind::step>, Simple<OpKind::zero_grad>,
                                                     Simple<OpKind::release>, Simple<OpKind::destroy>,
                                                     Simple<OpKind::save>, Simple<OpKind::load>, SetAttr>());
  std::error_code ignored;
  std::filesystem::remove_all(sut.dir, ignored);
}

}  // namespace
}  // namespace zerocheck
