// Calls to placed modules: the input travels to the owner, is computed there, and the output
// comes back; in backward the output gradient travels to the owner, which back-propagates
// through the module (its parameters collect their gradients there) and returns the input
// gradient. Every exchange is one all-to-all for the whole world, so several ranks routing to
// one owner in the same call are served by the same collectives.
#include "engine/errors.h"
#include "engine/internal/engine_state.h"
#include "engine/layers.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zero3 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RoutedCallHandle : torch::CustomClassHolder {
  std::weak_ptr<EngineState> state;
  const ModuleRecord* record = nullptr;
  std::vector<ServedCall> served;
  int64_t max_rows = 0;
};

// `anchor` requires grad so that every rank's graph holds this node: backward is collective,
// and a rank whose input needs no gradient must still serve the others.
class RoutedCall : public torch::autograd::Function<RoutedCall> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& anchor,
                            c10::IValue handle_value) {
    auto holder = handle_value.toCapsule();
    auto* handle = static_cast<RoutedCallHandle*>(holder.get());
    auto state = handle->state.lock();
    at::Tensor output = state->route_forward(*handle->record, input, &handle->served, &handle->max_rows);
    ctx->saved_data["handle"] = std::move(handle_value);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = ctx->saved_data["handle"].toCapsule();
    auto* handle = static_cast<RoutedCallHandle*>(holder.get());
    auto state = handle->state.lock();
    if (!state) return {at::Tensor(), at::Tensor(), at::Tensor()};
    at::Tensor grad_input =
        state->route_backward(*handle->record, grads.at(0), handle->served, handle->max_rows);
    handle->served.clear();  // the owner's graphs are spent
    return {grad_input, at::Tensor(), at::Tensor()};
  }
};

// Chunk j of an all-to-all buffer of `world` chunks of `chunk` elements.
at::Tensor chunk_of(at::Tensor& buffer, int64_t j, int64_t chunk) {
  return buffer.narrow(0, j * chunk, chunk);
}

}  // namespace

void EngineState::check_moe_choices(MoE& moe, const ModuleRecord& record, const Route& route) {
  const int world = comm.world_size();
  if (world == 1) return;
  const int64_t choice = moe.peek_choice(route);
  const ModuleRecord& expert = modules.at(moe.experts->at(static_cast<size_t>(choice)).get());
  const int64_t placed = expert.owner >= 0 ? 1 : 0;
  at::Tensor mine = at::tensor({choice, placed}, at::kLong).repeat({world});
  at::Tensor all = at::empty_like(mine);
  comm.all_to_all(mine, all);
  // Read on the host, element by element: indexing the tensor would cost two operator calls a number.
  const int64_t* got = all.data_ptr<int64_t>();
  bool all_placed = true, all_same = true;
  for (int r = 0; r < world; ++r) {
    all_placed &= got[2 * r + 1] == 1;
    all_same &= got[2 * r] == got[0];
  }
  // Unplaced experts are partitioned: every rank must gather the same one, or shards of
  // different experts would be stitched together.
  if (!all_placed && !all_same) {
    std::string choices;
    for (int r = 0; r < world; ++r) choices += (r ? ", " : "") + std::to_string(got[2 * r]);
    throw UsageError("MoE '" + record.path + "': ranks chose experts [" + choices +
                     "]; an expert that is not placed must be chosen by every rank alike");
  }
}

at::Tensor EngineState::call_placed(Module& module, const ModuleRecord& record,
                                    const at::Tensor& input,
                                    const std::function<at::Tensor(const at::Tensor&)>& body) {
  if (comm.world_size() == 1) {
    computing_placed = true;
    try {
      // As route_forward does: the expert computes on the device it lives on and answers on the
      // caller's (a CUDA build places it on cuda:0; the H200 run failed here on a CPU input).
      at::Tensor out = body(input.to(partitioner.device())).to(input.device());
      computing_placed = false;
      return out;
    } catch (...) {
      computing_placed = false;
      throw;
    }
  }
  auto handle = c10::make_intrusive<RoutedCallHandle>();
  handle->state = weak_from_this();
  handle->record = &record;
  if (!at::GradMode::is_enabled()) {
    return route_forward(record, input, nullptr, &handle->max_rows);
  }
  // at:: factories ignore requires_grad in their options; set it on the tensor.
  at::Tensor anchor = at::zeros({}).requires_grad_(true);
  return RoutedCall::apply(input, anchor, c10::IValue::make_capsule(handle));
}

at::Tensor EngineState::route_forward(const ModuleRecord& record, const at::Tensor& input,
                                      std::vector<ServedCall>* served, int64_t* max_rows) {
  const int world = comm.world_size();
  const int me = comm.rank();
  if (input.dim() != 2)
    throw UsageError("placed module '" + record.path + "' takes [rows, features] inputs, got " +
                     c10::str(input.sizes()));
  const int64_t rows = input.size(0), features = input.size(1);
  at::Tensor meta = at::tensor({record.id, rows, features}, at::kLong).repeat({world});
  at::Tensor metas = at::empty_like(meta);
  comm.all_to_all(meta, metas);
  const int64_t* got = metas.data_ptr<int64_t>();  // on the host: see check_moe_choices
  std::vector<int64_t> sender_module(world), sender_rows(world);
  int64_t widest = 0;
  for (int r = 0; r < world; ++r) {
    sender_module[r] = got[3 * r];
    sender_rows[r] = got[3 * r + 1];
    if (got[3 * r + 2] != features)
      throw UsageError("placed module '" + record.path + "': rank " + std::to_string(r) +
                       " sends " + std::to_string(got[3 * r + 2]) +
                       " features, this rank " + std::to_string(features));
    widest = std::max(widest, sender_rows[r]);
  }
  *max_rows = widest;
  const int64_t chunk = widest * features;

  at::Tensor send = at::zeros({world * chunk}, input.options().requires_grad(false));
  chunk_of(send, record.owner, chunk).narrow(0, 0, rows * features).copy_(input.detach().reshape({-1}));
  at::Tensor received = at::empty_like(send);
  comm.all_to_all(send, received);

  at::Tensor replies = at::zeros_like(send);
  for (int r = 0; r < world; ++r) {
    const ModuleRecord& target = *module_by_id.at(static_cast<size_t>(sender_module[r]));
    if (target.owner != me) continue;
    // Inputs travel on the CPU; the owner computes on the device its experts live on.
    at::Tensor x = chunk_of(received, r, chunk).narrow(0, 0, sender_rows[r] * features)
                       .view({sender_rows[r], features}).to(partitioner.device(), /*non_blocking=*/false, /*copy=*/true);
    at::Tensor y;
    {
      at::AutoGradMode grad(served != nullptr);
      if (served) x.requires_grad_(true);
      computing_placed = true;
      try {
        y = (*target.module)(x);
      } catch (...) {
        computing_placed = false;
        throw;
      }
      computing_placed = false;
    }
    if (y.sizes() != x.sizes())
      throw UsageError("placed module '" + target.path + "' must map its input shape to itself, got " +
                       c10::str(x.sizes()) + " -> " + c10::str(y.sizes()));
    chunk_of(replies, r, chunk).narrow(0, 0, y.numel()).copy_(y.detach().reshape({-1}).cpu());
    if (served) served->push_back(ServedCall{r, sender_module[static_cast<size_t>(r)], x, y});
  }
  at::Tensor answers = at::empty_like(replies);
  comm.all_to_all(replies, answers);
  return chunk_of(answers, record.owner, chunk).narrow(0, 0, rows * features).view({rows, features}).clone();
}

at::Tensor EngineState::route_backward(const ModuleRecord& record, const at::Tensor& grad_output,
                                       const std::vector<ServedCall>& served, int64_t max_rows) {
  const int world = comm.world_size();
  const int64_t rows = grad_output.size(0), features = grad_output.size(1);
  const int64_t chunk = max_rows * features;
  at::Tensor send = at::zeros({world * chunk}, grad_output.options());
  chunk_of(send, record.owner, chunk).narrow(0, 0, rows * features).copy_(grad_output.reshape({-1}));
  at::Tensor received = at::empty_like(send);
  comm.all_to_all(send, received);

  at::Tensor replies = at::zeros_like(send);
  // Senders in rank order: the expert's parameters then accumulate ((g0 + g1) + ...), exactly
  // the order dense training over the micro-batches uses.
  for (const ServedCall& call : served) {
    at::Tensor grad = chunk_of(received, call.sender, chunk).narrow(0, 0, call.output.numel())
                          .view(call.output.sizes()).to(call.output.device());
    const ModuleRecord& target = *module_by_id.at(static_cast<size_t>(call.module_id));
    std::vector<ManagedParam*> trained;
    std::vector<at::Tensor> inputs{call.input};
    for (const auto& t : target.module->parameters(/*recurse=*/true)) {
      ManagedParam* p = param_by_impl.at(t.unsafeGetTensorImpl());
      if (!p->trainable || std::find(trained.begin(), trained.end(), p) != trained.end()) continue;
      trained.push_back(p);
      inputs.push_back(p->param);
    }
    at::Tensor grad_input;
    if (call.output.requires_grad()) {
      const auto grads = torch::autograd::grad({call.output}, inputs, {grad}, /*retain_graph=*/false,
                                               /*create_graph=*/false, /*allow_unused=*/true);
      grad_input = grads[0];
      for (size_t i = 0; i < trained.size(); ++i) {
        if (!grads[i + 1].defined()) continue;
        auto& slots = placed_grads[trained[i]];
        slots.resize(static_cast<size_t>(world));
        at::Tensor& slot = slots[static_cast<size_t>(call.sender)];
        slot = slot.defined() ? slot + grads[i + 1] : grads[i + 1];  // arrival order, as autograd sums
      }
    }
    if (grad_input.defined())
      chunk_of(replies, call.sender, chunk).narrow(0, 0, grad_input.numel())
          .copy_(grad_input.reshape({-1}).cpu());
  }
  at::Tensor answers = at::empty_like(replies);
  comm.all_to_all(replies, answers);
  return chunk_of(answers, record.owner, chunk).narrow(0, 0, rows * features).view({rows, features}).clone();
}

}  // namespace zero3
