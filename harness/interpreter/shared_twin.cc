// The dense twin shared by the ranks of a world (internal/shared_twin.h).
#include "harness/interpreter/internal/shared_twin.h"

#include "engine/awake_wait.h"
#include "harness/world/world.h"

#include <chrono>
#include <cmath>
#include <mutex>

namespace zerocheck {
namespace {

// A trace together with the expectation it reads.
struct OwnedTrace {
  OwnedTrace(std::shared_ptr<const model::Expectation> e, const std::shared_ptr<zero3::Module>& target, int world,
             model::FetchKnobs knobs, model::FetchMemory memory)
      : expectation(std::move(e)), trace(*expectation, target, world, knobs, std::move(memory)) {}
  std::shared_ptr<const model::Expectation> expectation;
  model::TrafficTrace trace;
};

bool same_route(const zero3::Route& a, const zero3::Route& b) { return a.choices() == b.choices(); }

TwinOutcome apply_call(model::DenseTwin& twin, const TwinCall& call, const model::Workload& workload) {
  TwinOutcome out;
  switch (call.kind) {
    case TwinCall::Kind::retarget: twin.retarget(call.target); break;
    case TwinCall::Kind::forward: {
      const int world = static_cast<int>(call.routes.size());
      std::vector<Batch> batches;
      std::vector<zero3::ForwardInterceptor*> traces;
      for (int r = 0; r < world; ++r) {
        batches.push_back(workload.batch(call.index, r));
        if (static_cast<size_t>(r) < call.input_poison.size() && call.input_poison[static_cast<size_t>(r)])
          model::poison_input(batches.back(), *call.input_poison[static_cast<size_t>(r)]);
        // A rank on rank 0's route shares its schedule (the common case: a scenario's forward
        // names one route for every rank); another route is a schedule of its own.
        if (r > 0 && same_route(call.routes[static_cast<size_t>(r)], call.routes[0])) {
          out.traces.push_back(out.traces[0]);
        } else {
          auto owned = std::make_shared<OwnedTrace>(call.expectation, twin.target(), world,
                                                    model::FetchKnobs::of(workload.config), call.memory);
          out.traces.push_back(std::shared_ptr<model::TrafficTrace>(owned, &owned->trace));
          traces.resize(static_cast<size_t>(r) + 1, nullptr);
          traces[static_cast<size_t>(r)] = out.traces.back().get();
        }
      }
      out.losses = twin.forward(batches, call.routes, traces);
      break;
    }
    case TwinCall::Kind::backward:
      out.with_gradient = twin.backward(call.injections);
      out.ready_order = twin.ready_order();
      break;
    case TwinCall::Kind::drop_pending: twin.drop_pending(); break;
    case TwinCall::Kind::step: twin.step(); break;
    case TwinCall::Kind::zero_grad: twin.zero_grad(); break;
    case TwinCall::Kind::save: twin.save(call.tag); break;
    case TwinCall::Kind::load: twin.load(call.tag, call.effect); break;
    case TwinCall::Kind::scale: twin.scale_parameters(call.paths, call.scale); break;
  }
  return out;
}

template <class Lock>
ZERO3_TIMING_DEPENDENT void take_lock(Lock& lock) {
  if (!zero3::wait_awake([&] { return lock.try_lock(); }, std::chrono::microseconds(500))) lock.lock();
}

}  // namespace

TwinCall TwinCall::retarget_to(std::string path) {
  TwinCall call(Kind::retarget);
  call.target = std::move(path);
  return call;
}

TwinCall TwinCall::forward_of(const model::Workload& workload, int64_t index, const Op& op, int world,
                              std::shared_ptr<const model::Expectation> expectation, model::FetchMemory memory) {
  TwinCall call(Kind::forward);
  call.memory = std::move(memory);
  call.index = index;
  for (int r = 0; r < world; ++r) call.routes.push_back(workload.route(index, r, op));
  call.expectation = std::move(expectation);
  return call;
}

bool operator==(const TwinCall& a, const TwinCall& b) {
  if (a.kind != b.kind || a.target != b.target || a.index != b.index || a.routes.size() != b.routes.size() ||
      a.tag != b.tag || a.effect.optimizer_state != b.effect.optimizer_state ||
      a.effect.step_counters != b.effect.step_counters || a.paths != b.paths || a.scale != b.scale ||
      a.injections != b.injections || a.input_poison.size() != b.input_poison.size() || !(a.memory == b.memory))
    return false;
  for (size_t r = 0; r < a.input_poison.size(); ++r) {  // NaN is NaN here: the same poison
    const auto& x = a.input_poison[r];
    const auto& y = b.input_poison[r];
    if (x.has_value() != y.has_value() || (x && !(*x == *y || (std::isnan(*x) && std::isnan(*y))))) return false;
  }
  for (size_t r = 0; r < a.routes.size(); ++r)
    if (!same_route(a.routes[r], b.routes[r])) return false;
  return a.expectation == b.expectation || (a.expectation && b.expectation && *a.expectation == *b.expectation);
}

std::shared_ptr<SharedTwin> make_shared_twin(const model::Workload& workload) {
  use_sequential_kernels();  // the twin is built here, not on a rank thread: see world.h
  return std::make_shared<SharedTwin>(workload);
}

TwinView::TwinView(const model::Workload& workload, std::shared_ptr<SharedTwin> shared)
    : workload_(workload), shared_(std::move(shared)) {
  if (!shared_) own_ = std::make_unique<model::DenseTwin>(workload_);
}

void TwinView::take(std::shared_lock<std::shared_mutex>& lock) { take_lock(lock); }
void TwinView::take(std::unique_lock<std::shared_mutex>& lock) { take_lock(lock); }

TwinOutcome TwinView::call(TwinCall call) {
  if (shared_) {
    std::unique_lock<std::shared_mutex> lock(shared_->mutex, std::defer_lock);
    take(lock);
    const size_t position = history_.size();
    if (shared_->calls.size() == position) {  // the first rank here computes
      TwinOutcome outcome = apply_call(shared_->twin, call, workload_);
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
  TwinOutcome outcome = apply_call(*own_, call, workload_);
  history_.push_back(std::move(call));
  return outcome;
}

void TwinView::go_own() {
  own_ = std::make_unique<model::DenseTwin>(workload_);
  for (const TwinCall& call : history_) apply_call(*own_, call, workload_);
  shared_.reset();
}

}  // namespace zerocheck
