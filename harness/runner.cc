#include "harness/runner.h"

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/legacy_mode.h"
#include "engine/optimizer_rebuild.h"
#include "engine/registry.h"
#include "harness/accounting.h"
#include "harness/dense_baseline.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <unistd.h>
#include <unordered_set>

namespace zerocheck {
namespace {

using zero3::AttrDict;
using zero3::Module;

// ---- small helpers ----------------------------------------------------------------------------

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

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Scenario& s, std::vector<at::Tensor> params) {
  return s.optimizer == "sgd" ? sgd_factory(s.lr, 0.9)(std::move(params)) : adam_factory(s.lr)(std::move(params));
}

// The micro-batch of `rank` for operation `index`: a pure function, so the twin sees it too.
std::pair<at::Tensor, at::Tensor> batch_of(const Scenario& s, int64_t index, int rank) {
  at::Generator g = at::detail::createCPUGenerator(s.seed * 7919ULL + static_cast<uint64_t>(index) * 104729ULL +
                                                   static_cast<uint64_t>(rank) * 31ULL + 3);
  at::Tensor x = at::empty({s.batch, s.features}).uniform_(-1, 1, g);
  at::Tensor y = at::empty({s.batch, s.features}).uniform_(-1, 1, g);
  return {x, y};
}

// The first difference between two attribute dictionaries, or nothing.
struct AttrDiff {
  std::string name, expected, actual;
};
std::optional<AttrDiff> first_difference(const AttrDict& expected, const AttrDict& actual) {
  for (const auto& e : expected.entries()) {
    if (!actual.has(e.name)) return AttrDiff{e.name, e.value.repr(), "<missing>"};
    if (actual.get(e.name) != e.value || actual.owner(e.name) != e.owner)
      return AttrDiff{e.name, e.value.repr() + " (by " + e.owner + ")",
                      actual.get(e.name).repr() + " (by " + actual.owner(e.name) + ")"};
  }
  for (const auto& a : actual.entries())
    if (!expected.has(a.name)) return AttrDiff{a.name, "<absent>", a.value.repr() + " (added by " + a.owner + ")"};
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected.entries()[i].name != actual.entries()[i].name)
      return AttrDiff{expected.entries()[i].name, "at position " + std::to_string(i), "moved"};
  return std::nullopt;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0;
  return (a.detach().cpu() - b.detach().cpu()).abs().max().item<double>();
}

// Serialises an optimizer's state to bytes (the twin's save/load).
std::string optimizer_bytes(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void restore_optimizer(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  optimizer.state().clear();  // load only adds state; what was saved is all there should be
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  optimizer.load(archive);
}

}  // namespace

// ---- the dense twin ---------------------------------------------------------------------------

// A single-copy model trained exactly as the engine should train its copy: every rank's
// micro-batch, gradients summed in rank order and divided by the world size once per backward.
struct DenseTwin {
  std::shared_ptr<Module> root;    // the whole twin tree
  std::shared_ptr<Module> target;  // what the current engine wraps
  std::vector<std::pair<std::string, at::Tensor>> params;  // target's, by relative path
  std::vector<at::Tensor> accum;   // averaged gradients, aligned with params
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<at::Tensor> pending;  // per-rank losses of the last forward
  int64_t micro_steps = 0;
  // save/load
  std::vector<at::Tensor> saved_params;
  std::string saved_optimizer;
  int64_t saved_micro_steps = 0;

  void retarget(const Scenario& s, const std::string& path) {
    target = modules_by_path(root).at(path);
    params = unique_named_parameters(target);
    accum.assign(params.size(), at::Tensor());
    std::vector<at::Tensor> train;
    for (auto& [name, p] : params)
      if (p.requires_grad()) train.push_back(p);
    optimizer = make_optimizer(s, train);
    pending.clear();
    micro_steps = 0;
  }

  at::Tensor param(const std::string& path) const {
    for (const auto& [name, p] : params)
      if (name == path) return p;
    return at::Tensor();
  }
};

// ---- the per-rank interpreter -----------------------------------------------------------------

class ScenarioRunner {
 public:
  ScenarioRunner(const Scenario& s, zero3::Comm& comm, const RunOptions& options, std::string dir)
      : s_(s), comm_(comm), options_(options), dir_(std::move(dir)) {
    model_ = build_tree(s);
    twin_.root = build_tree(s);
    for (auto& [path, module] : modules_by_path(model_)) {
      ledger_modules_.push_back({path, module.get(), module->attrs()});
      for (const auto& item : module->named_parameters(false)) {
        const AttrDict* attrs = module->find_param_attrs(item.key());
        ledger_params_.push_back({path, item.key(), module.get(), attrs ? *attrs : AttrDict()});
      }
    }
  }

  std::string apply(int64_t index, const Op& op) {
    index_ = index;
    std::string line = fmt::format("#{} {}", index, to_string(op.kind));
    switch (op.kind) {
      case OpKind::initialize: line += initialize(op); break;
      case OpKind::forward: line += forward(op); break;
      case OpKind::backward: line += backward(); break;
      case OpKind::step: line += step(); break;
      case OpKind::zero_grad: line += zero_grad(); break;
      case OpKind::set_attr:
      case OpKind::del_attr: line += write_attr(op); break;
      case OpKind::release:
      case OpKind::destroy: line += release(op.kind == OpKind::destroy); break;
      case OpKind::save: line += save(); break;
      case OpKind::load: line += load(); break;
    }
    if (!options_.checks_after_every_op) return line;
    check_attributes();  // I1
    if (engine_) {
      check_memory();     // I4
      check_placement();  // I2
      check_parity();     // I3
    }
    return line;
  }

 private:
  struct LedgerModule {
    std::string path;
    Module* module;
    AttrDict attrs;
  };
  struct LedgerParam {
    std::string path, name;
    Module* module;
    AttrDict attrs;
  };

  [[noreturn]] void violate(const std::string& invariant, const std::string& path, const std::string& attribute,
                            const std::string& expected, const std::string& actual, const std::string& message) {
    throw ViolationFound(Violation{invariant, index_, comm_.rank(), path, attribute, expected, actual, message});
  }

  // ---- operations -----------------------------------------------------------------------------

  std::string initialize(const Op& op) {
    auto modules = modules_by_path(model_);
    auto it = modules.find(op.target);
    if (it == modules.end()) return fmt::format(": skipped (no module '{}')", op.target);
    std::shared_ptr<Module> target = it->second;

    // What the reference engine must do, predicted from the model's own view of the world.
    std::unordered_set<const Module*> new_tree;
    for (auto& entry : zero3::unique_modules(target)) new_tree.insert(entry.module.get());
    bool overlaps = false;
    for (const Module* m : engine_tree_) overlaps |= new_tree.count(m) > 0;
    const bool same_optimizer = op.optimizer == "same" && user_optimizer_ != nullptr;
    const bool expect_refusal = engine_ && (overlaps || (same_optimizer && engine_optimizer_ == user_optimizer_.get()));

    std::unique_ptr<torch::optim::Optimizer> fresh;
    torch::optim::Optimizer* optimizer = nullptr;
    if (same_optimizer) optimizer = user_optimizer_.get();
    else optimizer = (fresh = make_optimizer(s_, trainable(*target))).get();

    const std::optional<Owners> owners = owners_before_initialize(target);
    std::optional<std::string> predicted;  // the error the reference must raise, by kind
    if (expect_refusal) predicted = "AlreadyInitialized";
    else if (s_.config.train_batch_size != 0 &&
             s_.config.train_batch_size != s_.config.train_micro_batch_size_per_gpu *
                                               s_.config.gradient_accumulation_steps * s_.world_size)
      predicted = "ConfigError";
    else if (!owners) predicted = "PlacementError";
    else if (!covers_exactly(*optimizer, *target)) predicted = "OptimizerMismatch";

    std::vector<at::Tensor> masters_before;
    if (engine_)
      for (const auto& p : engine_->params()) masters_before.push_back(p.master.detach().clone());

    zero3::EngineOptions engine_options;
    engine_options.fault = options_.fault;
    std::unique_ptr<zero3::Engine> created;
    std::string raised;
    try {
      zero3::Config config = s_.config;
      config.placement = s_.placement;  // the scenario's policy, handed over as the user would
      created = zero3::initialize(target, *optimizer, config, comm_, engine_options);
    } catch (const zero3::AlreadyInitialized& e) {
      raised = "AlreadyInitialized";
    } catch (const zero3::ConfigError& e) {
      raised = "ConfigError";
    } catch (const zero3::PlacementError& e) {
      raised = "PlacementError";
    } catch (const zero3::OptimizerMismatch& e) {
      raised = "OptimizerMismatch";
    }

    if (expect_refusal) {
      if (created)
        violate("I5", op.target, "", "AlreadyInitialized", "accepted",
                "a repeated initialize of a managed model or optimizer was accepted");
      if (raised != "AlreadyInitialized")
        violate("I5", op.target, "", "AlreadyInitialized", raised, "a repeated initialize was refused with the wrong error");
      check_attributes("I5");  // nothing changed: the user's attributes ...
      const auto after = engine_->params();
      for (size_t i = 0; i < after.size(); ++i)  // ... and the first engine's shards
        if (!at::equal(after[i].master.detach(), masters_before[i]))
          violate("I5", after[i].path, "", "unchanged shard", "changed", "a refused initialize changed the live engine's shard");
      return ": refused (AlreadyInitialized), as it must be";
    }
    if (predicted) {
      // A policy that cannot be evaluated on the user's attributes is a placement promise.
      const char* invariant = *predicted == "PlacementError" ? "I2" : "I7";
      if (created)
        violate(invariant, op.target, "", *predicted, "accepted", "initialize accepted input it must refuse");
      if (raised != *predicted)
        violate(invariant, op.target, "", *predicted, raised, "initialize refused with an unexpected error");
      return fmt::format(": refused ({}), as predicted", raised);
    }
    if (!created)
      violate(raised == "PlacementError" ? "I2" : "I7", op.target, "", "an engine", raised,
              "initialize refused valid input");

    // A second engine over the same tree (a fault accepted the repeat) is dropped at once: the
    // violation, if any, has been reported above.
    engine_ = std::move(created);
    engine_target_ = op.target;
    engine_tree_ = std::move(new_tree);
    engine_optimizer_ = optimizer;
    if (fresh) user_optimizer_ = std::move(fresh);  // the user holds the new optimizer now
    expected_owners_ = owners.value();  // accepted, so the policy evaluated (predicted is empty)
    twin_.retarget(s_, op.target);
    pending_ = at::Tensor();
    return fmt::format(": engine over '{}' ({} parameters)", op.target, engine_->params().size());
  }

  // Where the policy puts each module, from the user's attributes as they are before initialize
  // (an engine that writes attributes must not move the goalposts); nothing when the reference
  // must refuse the policy.
  std::optional<Owners> owners_before_initialize(const std::shared_ptr<Module>& target) const {
    try {
      auto owners = placement_owners(target, s_.placement, comm_.world_size());
      // A placed module must not contain an MoE (routes do not travel with inputs).
      for (auto& entry : zero3::unique_modules(target)) {
        auto it = owners.find(entry.module.get());
        if (entry.module->kind() == "MoE" && it != owners.end() && it->second >= 0) return std::nullopt;
      }
      return owners;
    } catch (const zero3::PlacementError&) {
      return std::nullopt;
    }
  }

  static bool covers_exactly(torch::optim::Optimizer& optimizer, const Module& target) {
    std::vector<const c10::TensorImpl*> have, want;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params()) have.push_back(p.unsafeGetTensorImpl());
    for (auto& p : trainable(target)) want.push_back(p.unsafeGetTensorImpl());
    std::sort(have.begin(), have.end());
    std::sort(want.begin(), want.end());
    return have == want;
  }

  std::string forward(const Op& op) {
    if (!engine_) return ": skipped (no live engine)";
    const auto [x, y] = batch_of(s_, index_, comm_.rank());
    at::Tensor out = engine_->forward(x, route_of(op));
    pending_ = training_loss(out, y);
    twin_.pending.clear();
    for (int r = 0; r < comm_.world_size(); ++r) {
      const auto [tx, ty] = batch_of(s_, index_, r);
      zero3::Route route = route_of(op);
      twin_.pending.push_back(training_loss((*twin_.target)(tx, route), ty));
    }
    const double mine = pending_.item<double>();
    const double dense = twin_.pending[static_cast<size_t>(comm_.rank())].item<double>();
    if (mine != dense)
      violate("I3", engine_target_, "loss", fmt::format("{:.17g}", dense), fmt::format("{:.17g}", mine),
              "the loss differs from the dense twin's");
    return fmt::format(": loss {:.6g}", mine);
  }

  std::string backward() {
    if (!engine_ || !pending_.defined()) return ": skipped (no forward to back-propagate)";
    if (!pending_.requires_grad()) {
      pending_ = at::Tensor();
      return ": skipped (nothing trainable)";
    }
    engine_->backward(pending_);
    pending_ = at::Tensor();
    at::NoGradGuard no_grad;
    for (auto& [name, p] : twin_.params)
      if (p.requires_grad()) p.mutable_grad() = at::Tensor();
    {
      at::AutoGradMode grad(true);
      for (auto& loss : twin_.pending)
        if (loss.requires_grad()) loss.backward();
    }
    twin_.pending.clear();
    for (size_t i = 0; i < twin_.params.size(); ++i) {
      at::Tensor g = twin_.params[i].second.grad();
      if (!g.defined()) continue;
      at::Tensor averaged = g.div(comm_.world_size());
      twin_.accum[i] = twin_.accum[i].defined() ? twin_.accum[i].add_(averaged) : averaged;
      twin_.params[i].second.mutable_grad() = at::Tensor();
    }
    return ": ok";
  }

  std::string step() {
    if (!engine_) return ": skipped (no live engine)";
    // A step changes parameters in place, so a pending forward's graph is stale: PyTorch would
    // refuse to back-propagate it. The step consumes it.
    pending_ = at::Tensor();
    twin_.pending.clear();
    engine_->step();
    if (++twin_.micro_steps % s_.config.gradient_accumulation_steps == 0) {
      for (size_t i = 0; i < twin_.params.size(); ++i)
        if (twin_.params[i].second.requires_grad()) twin_.params[i].second.mutable_grad() = twin_.accum[i];
      twin_.optimizer->step();
      for (auto& [name, p] : twin_.params) p.mutable_grad() = at::Tensor();
    }
    return ": ok";
  }

  std::string zero_grad() {
    if (!engine_) return ": skipped (no live engine)";
    engine_->zero_grad();
    at::NoGradGuard no_grad;
    for (auto& a : twin_.accum)
      if (a.defined()) a.zero_();
    return ": ok";
  }

  std::string write_attr(const Op& op) {
    for (auto& entry : ledger_modules_) {
      if (entry.path != op.module) continue;
      AttrDict* actual = &entry.module->attrs();
      AttrDict* expected = &entry.attrs;
      if (!op.param.empty()) {
        auto found = std::find_if(ledger_params_.begin(), ledger_params_.end(), [&](const LedgerParam& p) {
          return p.path == op.module && p.name == op.param;
        });
        if (found == ledger_params_.end()) return fmt::format(": skipped (no parameter '{}')", op.param);
        actual = &entry.module->param_attrs(op.param);
        expected = &found->attrs;
      }
      if (op.kind == OpKind::set_attr) {
        actual->set(op.name, op.value);
        expected->set(op.name, op.value);
        return ": ok";
      }
      if (!expected->has(op.name)) return ": skipped (no such attribute)";
      expected->del(op.name);
      if (actual->has(op.name)) actual->del(op.name);
      return ": ok";
    }
    return fmt::format(": skipped (no module '{}')", op.module);
  }

  std::string release(bool destroy) {
    if (!engine_) return ": skipped (no live engine)";
    if (destroy) engine_.reset();
    else {
      engine_->release();
      engine_.reset();
    }
    engine_tree_.clear();
    engine_optimizer_ = nullptr;
    pending_ = at::Tensor();
    // The model is the user's again: every parameter whole and equal to the twin's.
    for (const auto& [path, p] : unique_named_parameters(modules_by_path(model_).at(engine_target_))) {
      at::Tensor twin = twin_.param(path);
      if (twin.defined() && (p.sizes() != twin.sizes() || !at::equal(p.detach(), twin.detach())))
        violate("I3", engine_target_, path, "the dense twin's values", "different values",
                "after release the model's parameter differs from the dense twin");
    }
    return ": ok";
  }

  std::string save() {
    if (!engine_) return ": skipped (no live engine)";
    engine_->save_checkpoint(dir_);
    saved_target_ = engine_target_;
    saved_masters_.clear();
    for (const auto& p : engine_->params()) saved_masters_.push_back(p.master.detach().clone());
    saved_optimizer_state_ = optimizer_state_fingerprint();
    twin_.saved_params.clear();
    for (auto& [name, p] : twin_.params) twin_.saved_params.push_back(p.detach().clone());
    twin_.saved_optimizer = optimizer_bytes(*twin_.optimizer);
    twin_.saved_micro_steps = twin_.micro_steps;
    // I6: a consolidated state dict equals the gathered parameters.
    auto consolidated = engine_->consolidated_state_dict();
    zero3::GatheredParameters gathered(*engine_, *modules_by_path(model_).at(engine_target_));
    if (comm_.rank() == 0) {
      const auto views = engine_->params();
      for (const auto& [path, p] : unique_named_parameters(modules_by_path(model_).at(engine_target_))) {
        const std::string& name = path;  // C++17 lambdas cannot capture structured bindings
        const auto placed = std::find_if(views.begin(), views.end(), [&](const auto& v) { return v.path == name; });
        if (placed != views.end() && placed->owner > 0) continue;  // whole only on its owner
        auto it = consolidated.find(path);
        if (it == consolidated.end() || it->second.sizes() != p.sizes() || !at::equal(it->second, p.detach().cpu()))
          violate("I6", engine_target_, path, "the gathered parameter",
                  it == consolidated.end() ? "<missing>" : fmt::format("max diff {:g}", max_abs_diff(it->second, p)),
                  "the consolidated state dict differs from the gathered parameter");
      }
    }
    return ": ok";
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

  std::string load() {
    if (!engine_) return ": skipped (no live engine)";
    if (!saved_target_ || *saved_target_ != engine_target_)
      return ": skipped (no checkpoint of this engine's model)";
    pending_ = at::Tensor();  // as with step: the graph would be stale
    twin_.pending.clear();
    engine_->load_checkpoint(dir_);
    const auto after = engine_->params();
    for (size_t i = 0; i < after.size(); ++i)
      if (!at::equal(after[i].master.detach(), saved_masters_[i]))
        violate("I6", after[i].path, "", "the saved shard", "different", "load did not restore the shard bit-exactly");
    const at::Tensor state = optimizer_state_fingerprint();
    if (state.sizes() != saved_optimizer_state_.sizes() || !at::equal(state, saved_optimizer_state_))
      violate("I6", engine_target_, "optimizer", fmt::format("{} state elements", saved_optimizer_state_.numel()),
              fmt::format("{} state elements", state.numel()), "load did not restore the optimizer state bit-exactly");
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < twin_.params.size(); ++i) twin_.params[i].second.copy_(twin_.saved_params[i]);
    restore_optimizer(*twin_.optimizer, twin_.saved_optimizer);
    twin_.micro_steps = twin_.saved_micro_steps;
    return ": ok";
  }

  // ---- invariants -----------------------------------------------------------------------------

  void check_attributes(const char* invariant = "I1") {
    for (const auto& entry : ledger_modules_)
      if (auto diff = first_difference(entry.attrs, entry.module->attrs()))
        violate(invariant, entry.path, diff->name, diff->expected, diff->actual,
                "a user attribute of the module was changed");
    for (const auto& entry : ledger_params_) {
      const AttrDict* actual = entry.module->find_param_attrs(entry.name);
      if (auto diff = first_difference(entry.attrs, actual ? *actual : AttrDict()))
        violate(invariant, entry.path, entry.name + "." + diff->name, diff->expected, diff->actual,
                "a user attribute of the parameter was changed");
    }
  }

  void check_memory() {
    for (const auto& p : engine_->params()) {
      if (p.persistent || p.owner >= 0) continue;
      if (p.param.numel() != 0)
        violate("I4", engine_target_, p.path, "no full data", fmt::format("{} elements", p.param.numel()),
                "a partitioned parameter holds full data outside forward/backward");
      if (p.param.grad().defined())
        violate("I4", engine_target_, p.path, "no full gradient", "a full gradient",
                "a partitioned parameter keeps its full gradient");
    }
  }

  void check_placement() {
    if (s_.placement.kind == zero3::PlacementSpec::Kind::none) return;
    auto modules = modules_by_path(modules_by_path(model_).at(engine_target_));
    const auto views = engine_->params();
    const auto residency = engine_->residency();
    for (size_t i = 0; i < views.size(); ++i) {
      const std::string& path = views[i].path;
      const std::string module_path = path.find('.') == std::string::npos ? "" : path.substr(0, path.rfind('.'));
      auto owner_it = expected_owners_.find(modules.at(module_path).get());
      const int expected = owner_it == expected_owners_.end() ? -1 : owner_it->second;
      const auto& here = residency[i];
      const int64_t held = here.param_elements + here.master_elements + here.grad_elements + here.optimizer_elements;
      if (expected < 0) {
        if (views[i].owner >= 0)
          violate("I2", module_path, path, "not placed", fmt::format("placed on rank {}", views[i].owner),
                  "a module the policy does not place was placed");
        continue;
      }
      if (comm_.rank() == expected && here.param_elements != views[i].layout.numel)
        violate("I2", module_path, path, fmt::format("{} elements here (the owner)", views[i].layout.numel),
                fmt::format("{} elements", here.param_elements), "a placed parameter is not whole on its owner");
      if (comm_.rank() != expected && held != 0)
        violate("I2", module_path, path, fmt::format("nothing here (owner is rank {})", expected),
                fmt::format("{} elements", held), "a placed parameter has storage off its owner");
    }
  }

  void check_parity() {
    const int rank = comm_.rank();
    for (const auto& p : engine_->params()) {
      at::Tensor dense = twin_.param(p.path);
      if (!dense.defined()) continue;
      at::Tensor expected;
      if (p.persistent || p.owner == rank) expected = dense.detach();
      else if (p.owner >= 0) continue;
      else expected = p.layout.shard_of(dense.detach(), rank);
      at::Tensor actual = p.persistent || p.owner == rank ? p.master.detach().view(p.shape) : p.master.detach();
      if (actual.sizes() != expected.sizes() || !at::equal(actual.cpu(), expected))
        violate("I3", engine_target_, p.path, "the dense twin's values (padding zero)",
                actual.sizes() != expected.sizes() ? "shape " + c10::str(actual.sizes())
                                                   : fmt::format("max diff {:g}", max_abs_diff(actual, expected)),
                "this rank's shard differs from the dense twin");
    }
  }

  const Scenario& s_;
  zero3::Comm& comm_;
  RunOptions options_;
  std::string dir_;
  int64_t index_ = -1;
  std::shared_ptr<Module> model_;
  std::vector<LedgerModule> ledger_modules_;
  std::vector<LedgerParam> ledger_params_;
  std::unique_ptr<torch::optim::Optimizer> user_optimizer_;
  const torch::optim::Optimizer* engine_optimizer_ = nullptr;
  std::unique_ptr<zero3::Engine> engine_;
  std::string engine_target_;
  std::unordered_set<const Module*> engine_tree_;
  Owners expected_owners_;
  at::Tensor pending_;
  DenseTwin twin_;
  std::optional<std::string> saved_target_;
  std::vector<at::Tensor> saved_masters_;
  at::Tensor saved_optimizer_state_;
};

RankInterpreter::RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                                 const std::string& checkpoint_dir)
    : impl_(std::make_unique<ScenarioRunner>(scenario, comm, options, checkpoint_dir)) {}
RankInterpreter::~RankInterpreter() = default;
std::string RankInterpreter::apply(int64_t index, const Op& op) { return impl_->apply(index, op); }

// ---- the world --------------------------------------------------------------------------------

Verdict run_scenario(const Scenario& scenario, const RunOptions& options) {
  validate(scenario);
  // A fresh process for each scenario, as far as the legacy modes are concerned.
  zero3::reset_legacy_counters();
  static std::atomic<int> counter{0};
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("zerocheck_{}_{}", ::getpid(), counter++)).string();
  Verdict verdict;
  std::mutex mutex;
  std::vector<std::optional<Violation>> found(scenario.world_size);
  WorldOptions world;
  world.world_size = scenario.world_size;
  world.comm = options.comm;
  world.timeout = options.timeout;
  try {
    run_world(world, [&](zero3::Comm& comm) {
      RankInterpreter rank(scenario, comm, options, dir);
      for (size_t i = 0; i < scenario.ops.size(); ++i) {
        std::string line;
        std::optional<Violation> mine;
        try {
          line = rank.apply(static_cast<int64_t>(i), scenario.ops[i]);
        } catch (ViolationFound& v) {
          mine = v.violation;
          line = fmt::format("#{} {}: VIOLATION {}", i, to_string(scenario.ops[i].kind), v.violation.invariant);
        }
        // Every rank learns which ranks found a violation; the lowest one is reported. One
        // all_gather of a flag: this runs after every operation, so it is kept to one collective.
        const at::Tensor my_flag = at::full({1}, mine ? 1 : 0, at::kLong);
        at::Tensor flags = at::empty({scenario.world_size}, at::kLong);
        comm.all_gather(my_flag, flags);
        if (comm.rank() == 0) {
          std::lock_guard<std::mutex> lock(mutex);
          verdict.history.push_back(line);
        }
        const int64_t* flag = flags.data_ptr<int64_t>();
        if (std::any_of(flag, flag + scenario.world_size, [](int64_t f) { return f != 0; })) {
          std::lock_guard<std::mutex> lock(mutex);
          found[comm.rank()] = mine;
          return;
        }
      }
    });
  } catch (const RankFailure& failure) {
    bool any = false;
    for (auto& f : found) any |= f.has_value();
    if (!any)
      verdict.violation = Violation{"I7", static_cast<int64_t>(verdict.history.size()), failure.rank(), "", "", "", "",
                                    std::string("unexpected error: ") + failure.what()};
  }
  for (auto& f : found)
    if (f && !verdict.violation) verdict.violation = f;
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return verdict;
}

}  // namespace zerocheck
