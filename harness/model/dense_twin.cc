// The dense twin: one copy of the model, every rank's micro-batch through it, gradients summed
// in rank order and divided by N once per backward; the engine must match it bit for bit.
#include "harness/model/model.h"

#include "engine/optimizer_rebuild.h"
#include "engine/seeded_values.h"
#include "engine/testing/training.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

namespace zerocheck::model {
namespace {

at::Tensor clone_of(const at::Tensor& t) { return t.defined() ? t.detach().clone() : at::Tensor(); }

// A copy of one parameter's optimizer state that shares no storage with it: steps update the
// live state in place.
std::unique_ptr<torch::optim::OptimizerParamState> deep_copy(const torch::optim::OptimizerParamState& state) {
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    auto copy = std::make_unique<torch::optim::AdamParamState>(*s);
    copy->exp_avg(clone_of(s->exp_avg())).exp_avg_sq(clone_of(s->exp_avg_sq()));
    copy->max_exp_avg_sq(clone_of(s->max_exp_avg_sq()));
    return copy;
  }
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    auto copy = std::make_unique<torch::optim::AdamWParamState>(*s);
    copy->exp_avg(clone_of(s->exp_avg())).exp_avg_sq(clone_of(s->exp_avg_sq()));
    copy->max_exp_avg_sq(clone_of(s->max_exp_avg_sq()));
    return copy;
  }
  if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    auto copy = std::make_unique<torch::optim::SGDParamState>(*s);
    copy->momentum_buffer(clone_of(s->momentum_buffer()));
    return copy;
  }
  throw std::logic_error("the dense twin copies Adam, AdamW and SGD state only");
}

// The twin's parameters are the same tensors from save to load (its tree lives as long as it
// does), so the state map copies over key for key.
void copy_state(const DenseTwin::OptimizerState& from, DenseTwin::OptimizerState& to) {
  to.clear();
  for (const auto& [key, state] : from) to[key] = deep_copy(*state);
}

}  // namespace

Batch batch_of(const Scenario& s, int64_t index, int rank) {
  const uint64_t key = zero3::data_key(index, rank);
  at::Tensor x = at::empty({s.batch, s.features});
  at::Tensor y = at::empty({s.batch, s.features});
  zero3::fill_seeded(x, zero3::stream_base(s.seed, zero3::ValueStream::input, key), 1.0F);
  zero3::fill_seeded(y, zero3::stream_base(s.seed, zero3::ValueStream::target, key), 1.0F);
  // With bf16 the user feeds the input in bf16, as a DeepSpeed user must (the model's weights
  // are bf16); the target stays as seeded and the loss is taken in fp32 (training_loss), as the
  // upstream replay computes it (SCENARIO_FORMAT.md, "Numbers").
  const c10::ScalarType dtype = zero3::precision_in_effect(zero3::PrecisionOptions(), s.config.precision).param_dtype;
  if (dtype != at::kFloat) return {x.to(dtype), y};
  return {x, y};
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Scenario& s, std::vector<at::Tensor> params) {
  return s.optimizer == "sgd" ? sgd_factory(s.lr, 0.9)(std::move(params)) : adam_factory(s.lr)(std::move(params));
}

DenseTwin::DenseTwin(const Workload& workload)
    : w_(workload),
      precision_(zero3::precision_in_effect(workload.precision, workload.config.precision)),
      root_(workload.build_twin ? workload.build_twin() : workload.build()) {
  scaler_ = fresh_scaler();
  if (w_.history) w_.history(*this);
}

void DenseTwin::retarget(const std::string& path) {
  target_.reset();
  for (auto& entry : zero3::unique_modules(root_))
    if (entry.path == path) target_ = entry.module;
  params_ = unique_named_parameters(target_);
  model_params_.clear();
  for (auto& [name, p] : params_) {
    model_params_.push_back(p);
    if (!precision_.mixed()) continue;
    at::NoGradGuard no_grad;
    p.set_data(zero3::round_to(p.detach(), precision_.param_dtype));  // R1, as initialize does
    at::Tensor& master = master_of_[p.unsafeGetTensorImpl()];
    if (!master.defined()) master = at::empty(p.sizes(), p.options().dtype(at::kFloat));
    master.copy_(p.detach());  // widened, exactly
    p = master;
  }
  accum_.assign(params_.size(), at::Tensor());
  std::vector<at::Tensor> train;
  for (size_t i = 0; i < params_.size(); ++i)
    if (model_params_[i].requires_grad()) train.push_back(params_[i].second);
  optimizer_ = w_.optimizer(train);
  pending_.clear();
  micro_steps_ = 0;
  scaler_ = fresh_scaler();
  applied_steps_ = skipped_steps_ = 0;
  reported_norm_ = 0;
}

std::vector<double> DenseTwin::forward(const std::vector<Batch>& batches, const std::vector<zero3::Route>& routes,
                                       const std::vector<zero3::ForwardInterceptor*>& traces) {
  pending_.clear();
  std::vector<double> losses;
  for (size_t r = 0; r < batches.size(); ++r) {
    zero3::Route cursor = routes.at(r);
    zero3::ForwardInterceptor* trace = r < traces.size() ? traces[r] : nullptr;
    at::Tensor out;
    if (trace != nullptr) {
      zero3::InterceptorScope scope(trace);
      out = (*target_)(batches[r].input, cursor);
    } else {
      out = (*target_)(batches[r].input, cursor);
    }
    pending_.push_back(training_loss(out, batches[r].target));
    losses.push_back(pending_.back().item<double>());
  }
  return losses;
}

std::set<std::string> DenseTwin::backward(const std::vector<BackwardInjection>& injections) {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> by_path;  // the whole tree's, where an injection names them
  for (const auto& injection : injections)
    if (!injection.param.empty() && by_path.empty())
      for (auto& [path, p] : unique_named_parameters(root_)) by_path.emplace(path, p);
  for (auto& p : model_params_)
    if (p.requires_grad()) p.mutable_grad() = at::Tensor();
  // A hook on each parameter notes when autograd has its whole gradient, rank by rank.
  ready_order_.assign(pending_.size(), {});
  std::vector<std::string>* ready = nullptr;
  struct Hooks {
    std::vector<std::pair<at::Tensor, unsigned>> on;
    ~Hooks() {
      for (auto& [p, hook] : on) p.remove_hook(hook);
    }
  } hooks;
  for (size_t i = 0; i < params_.size(); ++i)
    if (model_params_[i].requires_grad())
      hooks.on.emplace_back(model_params_[i], model_params_[i].register_hook([&ready, path = params_[i].first](const at::Tensor&) {
        ready->push_back(path);
      }));
  const auto world = static_cast<int>(pending_.size());
  // fp32: the ranks' gradients accumulate in autograd, in rank order, and are divided once.
  // Mixed: each rank's gradient on its own, divided in the comm dtype and added in fp32 (R3).
  std::vector<at::Tensor> summed(params_.size());
  {
    at::AutoGradMode grad(true);
    for (size_t r = 0; r < pending_.size(); ++r) {
      ready = &ready_order_[r];
      const BackwardInjection none;
      const BackwardInjection& injection = r < injections.size() ? injections[r] : none;
      // Rank r's gradient of the named parameter, poisoned before it joins the others' (a hook
      // on the leaf sees the whole gradient of this rank's backward, before accumulation).
      std::optional<std::pair<at::Tensor, unsigned>> poison;
      if (!injection.param.empty()) {
        at::Tensor& p = by_path.at(injection.param);
        if (p.requires_grad())
          poison.emplace(p, p.register_hook([value = injection.gradient](const at::Tensor& g) {
            return poison_gradient(g, value);
          }));
      }
      at::Tensor loss = pending_[r];
      if (injection.loss) loss = loss * *injection.loss;
      // DeepSpeed multiplies loss.float() by the scale (runtime/fp16/loss_scaler.py:61-63 (v0.14.5)).
      if (scaler_.scale != 1.0) loss = loss.to(at::kFloat) * scaler_.scale;
      if (loss.requires_grad()) loss.backward();
      if (poison) poison->first.remove_hook(poison->second);
      if (!precision_.mixed()) continue;
      at::NoGradGuard no_grad_here;
      for (size_t i = 0; i < params_.size(); ++i) {
        at::Tensor g = model_params_[i].grad();
        if (!g.defined()) continue;
        at::Tensor share = zero3::gradient_for_sum(g, precision_, world);
        summed[i] = summed[i].defined() ? summed[i].add_(share) : share;
        model_params_[i].mutable_grad() = at::Tensor();
      }
    }
  }
  pending_.clear();
  std::set<std::string> with_gradient;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!precision_.mixed()) {
      at::Tensor g = model_params_[i].grad();
      if (g.defined()) summed[i] = g.div(world);
      model_params_[i].mutable_grad() = at::Tensor();
    } else if (summed[i].defined()) {
      summed[i] = zero3::summed_gradient_in_accum(summed[i], precision_);
    }
    if (summed[i].defined()) with_gradient.insert(params_[i].first);
  }
  accumulate(summed);
  return with_gradient;
}

void DenseTwin::accumulate(const std::vector<at::Tensor>& averaged) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (averaged[i].defined()) accum_[i] = accum_[i].defined() ? accum_[i].add_(averaged[i]) : averaged[i];
}

// DeepSpeed's step before the optimizer at an accumulation boundary (docs/deepspeed-precision.md
// section 2, items 5-7, read from DeepSpeed): N = the global norm of the accumulated, scaled
// gradients (double); with overflow protection, a non-finite N skips the step; the scale is
// updated first, and S below is the updated one; then combined = S, or max(1, ((N / S) + 1e-6) / C)
// * S with a clip C, and every gradient is multiplied by 1 / combined rounded to fp32
// (runtime/zero/stage3.py:2109-2118 (v0.14.5)). The twin sums whole tensors, the engine its
// ranks' slices: the double norms differ in the last bits, so the fp32 multiplier is the same
// unless it lies within ~1e-15 relative of an fp32 rounding boundary (about 1e-8 of the steps
// that clip; tolerance stays 0, docs/invariants.md).
bool DenseTwin::unscale_and_clip(std::vector<at::Tensor>& gradients) {
  const double clip = precision_.gradient_clipping;
  const bool scaled = precision_.scaler.dynamic() || precision_.scaler.loss_scale != 1.0;
  if (!(clip > 0) && !precision_.check_overflow && !scaled) return true;
  at::NoGradGuard no_grad;
  double sum_sq = 0;
  for (const at::Tensor& g : gradients)
    if (g.defined()) {
      const double norm = g.to(at::kDouble).norm(2).item<double>();
      sum_sq += norm * norm;
    }
  const double norm = std::sqrt(sum_sq);
  const bool overflow = precision_.check_overflow && !std::isfinite(norm);
  update_scale(overflow);
  const double scale = scaler_.scale;
  reported_norm_ = norm / scale;
  if (overflow) return false;
  double combined = scale;
  if (clip > 0) {
    const double factor = ((norm / scale) + 1e-6) / clip;  // torch.clamp(min=1): a NaN passes, and poisons
    combined = (std::isnan(factor) ? factor : std::max(factor, 1.0)) * scale;
  }
  if (combined != 1.0)
    for (at::Tensor& g : gradients)
      if (g.defined()) g.mul_(1.0 / combined);
  return true;
}

DenseTwin::Scaler DenseTwin::fresh_scaler() const {
  const zero3::LossScalerOptions& o = precision_.scaler;
  Scaler out;
  out.scale = o.dynamic() ? std::ldexp(1.0, o.initial_scale_power) : o.loss_scale;
  out.hysteresis_left = o.hysteresis;
  return out;
}

// DynamicLossScaler.update_scale (runtime/fp16/loss_scaler.py:170-203 (v0.14.5)), with
// raise_error_at_min_scale off (precision_of; workload_of for fp16 scenarios); a static scale
// never moves. consecutive_hysteresis (fp16.consecutive_hysteresis): every clean step refills
// the hysteresis, and a doubling then leaves it as it is (:193-202).
void DenseTwin::update_scale(bool overflow) {
  const zero3::LossScalerOptions& o = precision_.scaler;
  if (!o.dynamic()) return;
  Scaler& s = scaler_;
  if (overflow) {
    if (o.hysteresis == 1 || s.hysteresis_left == 1) s.scale = std::max(s.scale / 2, o.min_loss_scale);
    else s.hysteresis_left -= 1;
    s.last_overflow_iter = s.iter;
  } else {
    if (o.consecutive_hysteresis) s.hysteresis_left = o.hysteresis;
    if ((s.iter - s.last_overflow_iter) % o.loss_scale_window == 0) {
      if (!o.consecutive_hysteresis) s.hysteresis_left = o.hysteresis;
      s.scale *= 2;
    }
  }
  s.iter += 1;
}

void DenseTwin::step() {
  pending_.clear();  // a step changes parameters in place: a pending graph is stale
  if (++micro_steps_ % w_.config.gradient_accumulation_steps != 0) return;
  // The fp32 gradient of each master: the accumulated one itself in fp32, a widened copy with
  // bf16 (so the clip multiplies the copy, as the engine's does).
  std::vector<at::Tensor> gradients(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (model_params_[i].requires_grad() && accum_[i].defined()) gradients[i] = accum_[i].to(at::kFloat);
  if (!unscale_and_clip(gradients)) {
    ++skipped_steps_;  // nothing changes but the scaler and this count (the overflow contract)
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (model_params_[i].requires_grad()) params_[i].second.mutable_grad() = gradients[i];
  optimizer_->step();
  ++applied_steps_;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].second.mutable_grad() = at::Tensor();
    if (precision_.mixed()) model_params_[i].copy_(zero3::round_to(params_[i].second, precision_.param_dtype));  // R9
  }
}

void DenseTwin::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& a : accum_)
    if (a.defined()) a.zero_();
}

void DenseTwin::save(const std::string& tag) {
  Snapshot& snapshot = saved_[tag];
  snapshot.params.clear();
  for (auto& [name, p] : params_) snapshot.params.push_back(p.detach().clone());
  copy_state(optimizer_->state(), snapshot.optimizer);
  snapshot.micro_steps = micro_steps_;
  snapshot.scaler = scaler_;
  snapshot.skipped_steps = skipped_steps_;
}

void DenseTwin::load(const std::string& tag, LoadEffect effect) {
  const Snapshot& snapshot = saved_.at(tag);
  pending_.clear();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].second.copy_(snapshot.params[i]);
    if (precision_.mixed()) model_params_[i].copy_(zero3::round_to(snapshot.params[i], precision_.param_dtype));
  }
  if (effect.optimizer_state) copy_state(snapshot.optimizer, optimizer_->state());
  if (effect.step_counters) {  // the scaler and the skipped steps travel with the step counters
    micro_steps_ = snapshot.micro_steps;
    scaler_ = snapshot.scaler;
    skipped_steps_ = snapshot.skipped_steps;
    applied_steps_ = micro_steps_ / w_.config.gradient_accumulation_steps - skipped_steps_;
  }
  // A load resumes training as if it had never stopped: a parameter the optimizer has stepped
  // (the checkpoint's, or its own when its state stays) had a gradient, which zero_grad keeps as
  // zeros, so it keeps stepping even where a backward does not reach it. A twin retargeted since
  // (a fresh engine: no gradients yet) gets that zero gradient here, as the engine's load gives
  // one (engine/checkpoint.cc).
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i].second;
    if (model_params_[i].requires_grad() && !accum_[i].defined() && zero3::state_numel_of(*optimizer_, p) > 0)
      accum_[i] = at::zeros_like(p, p.options().dtype(precision_.mixed() ? precision_.accum_dtype : at::kFloat));
  }
}

void DenseTwin::scale_parameters(const std::vector<std::string>& paths, double scale) {
  pending_.clear();  // parameters change in place: a pending graph is stale
  at::NoGradGuard no_grad;
  for (const std::string& path : paths)
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].first == path) {
        model_param(i).mul_(scale);  // in the model's dtype, as the user's edit of the gathered tensor
        if (precision_.mixed()) params_[i].second.copy_(model_param(i));  // published: the master widened
      }
}

void poison_input(Batch& batch, float value) {
  if (batch.input.numel() == 0) return;
  batch.input = batch.input.clone(at::MemoryFormat::Contiguous);  // the workload's tensor stays clean
  batch.input.view({-1})[0].fill_(value);
}

at::Tensor poison_gradient(const at::Tensor& gradient, float value) {
  if (gradient.numel() == 0) return gradient;
  at::Tensor out = gradient.clone(at::MemoryFormat::Contiguous);
  out.view({-1})[0].fill_(value);
  return out;
}

bool operator==(const BackwardInjection& a, const BackwardInjection& b) {
  const auto same = [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.loss.has_value() == b.loss.has_value() && (!a.loss || same(*a.loss, *b.loss)) && a.param == b.param &&
         same(a.gradient, b.gradient);
}

LoadEffect load_effect(bool optimizer_states, bool module_only) {
  return LoadEffect{optimizer_states && !module_only, !module_only};
}

std::string default_tag(int64_t micro_steps, int64_t gradient_accumulation_steps) {
  return "global_step" + std::to_string(micro_steps / gradient_accumulation_steps);
}

at::Tensor DenseTwin::param(const std::string& path) const {
  for (const auto& [name, p] : params_)
    if (name == path) return p;
  return at::Tensor();
}

}  // namespace zerocheck::model
