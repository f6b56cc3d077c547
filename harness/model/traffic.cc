// The collectives a forward and its backward must issue, replayed on the expectation while the
// dense twin runs: the ZeRO-3 schedule of docs/DESIGN.md, not the engine's code.
//
//   forward, per module call: an unplaced module all-gathers each partitioned parameter it
//   registers unless already whole (c*N elements), all of them in one collective (DeepSpeed's
//   fetch_sub_module: one all_gather_coalesced per fetch, engine/coalesced_gather.h), and
//   releases them after its forward; an MoE first agrees on the expert choice (all-to-all of 2
//   per rank when N > 1); a placed module's call (N > 1) is three all-to-alls: metadata (3 per
//   rank), the input and the reply (rows*features per rank each); modules inside it run whole on
//   the owner, with no collectives.
//   backward: each partitioned parameter of a module whose output needs a gradient is gathered
//   again, once, by the first of its modules whose backward the twin's autograd runs, one
//   collective per module backward that gathers anything; a trainable partitioned parameter
//   that got a gradient is reduce-scattered (c*N), a persistent one all-reduced (2*c*N: a
//   padded reduce-scatter plus all-gather); the reduce-scatters go by gradient bucket, one
//   collective per bucket: DeepSpeed ZeRO-3's rule (stage3.py
//   reduce_independent_p_g_buckets_and_remove_grads) over the partitioned gradients in the order
//   the twin's autograd made them ready, a gradient of n elements flushing a bucket that holds
//   e > 0 elements when e + n > reduce_bucket_size, and what is left flushed at the end
//   (persistent gradients, all-reduced, join no bucket); each placed call sends the output
//   gradient and the input gradient back (two all-to-alls of rows*features).
//   step: at an accumulation boundary with gradient_clipping set, the squared gradient norm is
//   all-reduced (one double, 2*N counted; step_traffic).
//   Nothing else moves: a model without placed modules or MoE layers all-to-alls nothing, and no
//   training operation broadcasts.
#include "harness/model/model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include <torch/csrc/autograd/custom_function.h>

namespace zerocheck::model {
namespace {

// Identity whose output needs a gradient because `anchor` does: the engine's placed calls hang
// on such an anchor, so everything after them needs a gradient on the engine's side too.
class AnchoredIdentity : public torch::autograd::Function<AnchoredIdentity> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, const at::Tensor&) {
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads.at(0), at::Tensor()};
  }
};

// What the identity below needs to note its module's backward: the log, shared with the trace
// (a graph may outlive it), and the module.
struct BackwardFetchNote : torch::CustomClassHolder {
  std::shared_ptr<std::vector<const zero3::Module*>> log;
  const zero3::Module* module = nullptr;
};

// Identity on a module's output, where the engine hangs its re-gather (engine/schedule.cc's
// GatherBeforeBackward): its backward notes that the module's backward is next.
class NoteBackwardFetch : public torch::autograd::Function<NoteBackwardFetch> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, c10::IValue note) {
    ctx->saved_data["note"] = std::move(note);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = ctx->saved_data["note"].toCapsule();
    auto* note = static_cast<BackwardFetchNote*>(holder.get());
    note->log->push_back(note->module);
    return {grads.at(0), at::Tensor()};
  }
};

}  // namespace

std::string Traffic::to_text() const {
  return fmt::format(
      "all-gather {} in {} collectives, reduce-scatter {} in {} collectives, all-reduce {}, broadcast {}, all-to-all {}",
      all_gather, all_gathers, reduce_scatter, reduce_scatters, all_reduce, broadcast, all_to_all);
}

Traffic traffic_between(const zero3::CommStats& before, const zero3::CommStats& after) {
  return Traffic{after.all_gather_elements - before.all_gather_elements,
                 after.reduce_scatter_elements - before.reduce_scatter_elements,
                 after.all_reduce_elements - before.all_reduce_elements,
                 after.broadcast_elements - before.broadcast_elements,
                 after.all_to_all_elements - before.all_to_all_elements,
                 after.reduce_scatters - before.reduce_scatters,
                 after.all_gathers - before.all_gathers};
}

TrafficTrace::TrafficTrace(const Expectation& expectation, const std::shared_ptr<zero3::Module>& twin_target,
                           int world_size, FetchKnobs knobs, FetchMemory memory)
    : expectation_(expectation), world_(world_size), knobs_(knobs), memory_(std::move(memory)) {
  for (const auto& [path, module] : zero3::unique_modules(twin_target)) {
    own_[module.get()] = expectation.own_params(path);
    path_of_[module.get()] = path;
    auto it = expectation.module_owner.find(path);
    owner_[module.get()] = it == expectation.module_owner.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < expectation.params.size(); ++i) index_of_[&expectation.params[i]] = i;
  if (memory_.complete) {
    for (const std::string& path : memory_.module_order) trace_steps_.push_back(step_params(path));
    for (size_t s = 0; s < trace_steps_.size(); ++s)
      for (const ExpectedParam* p : trace_steps_[s]) queue_.push_back({p, static_cast<int64_t>(s)});
  }
  memory_after_ = memory_;
}

at::Tensor TrafficTrace::around_forward(zero3::Module& module, const at::Tensor& input, const zero3::Route&,
                                        const std::function<at::Tensor(const at::Tensor&)>& body) {
  if (inside_placed_) return body(input);
  const int owner = owner_.count(&module) ? owner_.at(&module) : -1;
  if (owner >= 0) {
    inside_placed_ = true;
    at::Tensor out;
    try {
      out = body(input);
    } catch (...) {
      inside_placed_ = false;
      throw;
    }
    inside_placed_ = false;
    if (world_ == 1) return out;
    const int64_t payload = world_ * input.size(0) * input.size(1);
    forward_.all_to_all += 3 * world_ + 2 * payload;
    placed_backward_elements_ += 2 * payload;
    at::Tensor anchor = at::zeros({}).requires_grad_(true);
    return AnchoredIdentity::apply(out, anchor);
  }
  if (module.kind() == "MoE" && world_ > 1) forward_.all_to_all += 2 * world_;
  const auto& own = own_[&module];
  const bool has_partitioned = std::any_of(own.begin(), own.end(), [](const ExpectedParam* p) { return p->partitioned(); });
  const auto path = path_of_.find(&module);
  if (path == path_of_.end()) return body(input);  // not the engine's: a plain call
  // The engine's forward is its target's call: the outermost call here ends the forward.
  const bool outermost = depth_++ == 0;
  const std::vector<const ExpectedParam*> mine = step_params(path->second);
  at::Tensor out;
  try {
    fetch_for(path->second, mine);
    out = body(input);
  } catch (...) {
    --depth_;
    throw;
  }
  release_after(mine);
  --depth_;
  if (outermost) {
    if (!memory_.complete) memory_after_ = FetchMemory{true, recording_};
    else if (departed_) memory_after_ = FetchMemory{};
    for (const ExpectedParam& p : expectation_.params) drop(&p);
  }
  if (has_partitioned && at::GradMode::is_enabled() && out.requires_grad()) {
    for (const ExpectedParam* p : own)
      if (p->partitioned()) regathered_.insert(p);
    auto note = c10::make_intrusive<BackwardFetchNote>();
    note->log = backward_fetches_;
    note->module = &module;
    out = NoteBackwardFetch::apply(out, c10::IValue::make_capsule(std::move(note)));
  }
  return out;
}

Traffic TrafficTrace::backward(const std::set<std::string>& with_gradient, const std::vector<std::string>& ready_order,
                               int64_t reduce_bucket_size) const {
  Traffic t;
  t.all_to_all = placed_backward_elements_;
  for (const ExpectedParam* p : regathered_) t.all_gather += p->chunk * world_;
  // One all-gather per module backward that finds a parameter of its own not yet re-gathered, in
  // the order the twin's autograd ran them (a parameter stays gathered until its gradient is
  // reduced, after every backward that uses it).
  std::unordered_set<const ExpectedParam*> fetched;
  for (const zero3::Module* module : *backward_fetches_) {
    const auto own = own_.find(module);
    if (own == own_.end()) continue;
    bool any = false;
    for (const ExpectedParam* p : own->second)
      if (p->partitioned() && fetched.insert(p).second) any = true;
    if (any) ++t.all_gathers;
  }
  for (const auto& p : expectation_.params) {
    if (!p.trainable || p.owner >= 0 || !with_gradient.count(p.path)) continue;
    if (p.persistent) t.all_reduce += 2 * p.chunk * world_;
    else t.reduce_scatter += p.chunk * world_;
  }
  int64_t in_bucket = 0;  // unpadded elements, as DeepSpeed counts ds_numel
  bool holding = false;
  for (const std::string& path : ready_order) {
    const ExpectedParam* p = expectation_.find(path);
    if (p == nullptr || !p->trainable || !p->partitioned()) continue;
    if (in_bucket > 0 && in_bucket + p->numel > reduce_bucket_size) {
      ++t.reduce_scatters;
      in_bucket = 0;
    }
    in_bucket += p->numel;
    holding = true;
  }
  if (holding) ++t.reduce_scatters;
  return t;
}

}  // namespace zerocheck::model

namespace zerocheck::model {

std::vector<const ExpectedParam*> gathered_params(const Expectation& expected, const zero3::Module& module,
                                                  const std::shared_ptr<zero3::Module>& target) {
  std::unordered_set<const c10::TensorImpl*> inside;
  for (const auto& t : module.parameters(/*recurse=*/true)) inside.insert(t.unsafeGetTensorImpl());
  std::vector<const ExpectedParam*> out;
  for (const auto& [path, tensor] : unique_named_parameters(target))
    if (inside.count(tensor.unsafeGetTensorImpl()))
      if (const ExpectedParam* p = expected.find(path); p != nullptr && p->owner < 0) out.push_back(p);
  return out;
}

Traffic gather_traffic(const std::vector<const ExpectedParam*>& reached, bool published, int world_size) {
  Traffic t;
  for (const ExpectedParam* p : reached) {
    if (p->partitioned()) {
      t.all_gather += p->chunk * world_size;
      ++t.all_gathers;
    }
    if (published) t.broadcast += p->numel;
  }
  return t;
}

Traffic step_traffic(const zero3::Config& config, bool overflow_protection, bool boundary, int world_size) {
  Traffic t;
  if (boundary && (config.precision.gradient_clipping.value_or(0.0) > 0 || overflow_protection))
    t.all_reduce = 2 * world_size;
  return t;
}

}  // namespace zerocheck::model
