#include "engine/fetch_coordinator.h"

#include <algorithm>
#include <limits>

namespace zero3 {
namespace {

bool managed_here(const ManagedParam* p) { return !p->placed(); }

// A module's parameters as the trace lists them: each once, sorted by id (record_parameters,
// :186-189 (v0.14.5)); placed ones are not this coordinator's.
std::vector<ManagedParam*> trace_params(const std::vector<ManagedParam*>& own) {
  std::vector<ManagedParam*> out;
  for (ManagedParam* p : own)
    if (managed_here(p) && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  std::sort(out.begin(), out.end(), [](const ManagedParam* a, const ManagedParam* b) { return a->id < b->id; });
  return out;
}

bool not_available(const ManagedParam* p) {
  return !p->persistent && !p->placed() && p->status == ParamStatus::NotAvailable;
}

}  // namespace

int64_t FetchCoordinator::most_recent(const ManagedParam* p) const {
  auto it = most_recent_step_.find(p);
  return it == most_recent_step_.end() ? std::numeric_limits<int64_t>::min() : it->second;
}

void FetchCoordinator::begin_forward() {
  recording_.clear();
  recording_params_.clear();
  invalidated_ = false;
  queue_.clear();
  if (mode_ == TraceMode::complete)
    for (size_t s = 0; s < params_of_step_.size(); ++s)
      for (ManagedParam* p : params_of_step_[s]) queue_.push_back({p, static_cast<int64_t>(s)});
  most_recent_step_.clear();
  step_ = 0;
  available_ = 0;
}

void FetchCoordinator::gather(const std::vector<ManagedParam*>& params) {
  std::vector<ManagedParam*> wanted;
  for (ManagedParam* p : params)
    if (not_available(p) && std::find(wanted.begin(), wanted.end(), p) == wanted.end()) {
      wanted.push_back(p);
      available_ += p->layout.numel;
    }
  partitioner_.fetch(wanted);
}

void FetchCoordinator::drop(ManagedParam& p) {
  if (p.persistent || p.placed() || p.status != ParamStatus::Available) return;
  partitioner_.release(p);
  available_ -= p.layout.numel;
}

void FetchCoordinator::fetch(const void* module, const std::vector<ManagedParam*>& own) {
  const std::vector<ManagedParam*> mine = trace_params(own);
  // trace_prologue (:162-178): a module other than the trace's at this step invalidates it.
  const bool tracing = mode_ == TraceMode::complete && !invalidated_;
  if (tracing && (step_ >= static_cast<int64_t>(module_order_.size()) || module_order_[static_cast<size_t>(step_)] != module))
    invalidated_ = true;
  if (mode_ == TraceMode::record) {
    recording_.push_back(module);
    recording_params_.push_back(mine);
  }
  gather(mine);
  if (mode_ == TraceMode::complete && !invalidated_) {
    pop_own(mine);
    prefetch();
  }
  ++step_;
}

void FetchCoordinator::pop_own(const std::vector<ManagedParam*>& own) {
  size_t not_yet = 0;
  for (const ManagedParam* p : own)
    if (most_recent(p) < step_) ++not_yet;
  for (size_t popped = 0; popped < not_yet && !queue_.empty(); ++popped) {
    const ParamInTrace entry = queue_.front();
    queue_.pop_front();
    most_recent_step_[entry.param] = entry.step;
  }
}

void FetchCoordinator::prefetch() {
  if (knobs_.prefetch_bucket_size <= 0) return;
  int64_t max_live = knobs_.max_live_parameters;
  faults_.live_limit(max_live);
  const int64_t budget = std::min(max_live - available_, knobs_.prefetch_bucket_size);
  std::vector<ManagedParam*> chosen;
  int64_t taking = 0;
  while (!queue_.empty() && taking < budget) {
    const ParamInTrace entry = queue_.front();
    queue_.pop_front();
    const bool take = not_available(entry.param) &&
                      std::find(chosen.begin(), chosen.end(), entry.param) == chosen.end();
    most_recent_step_[entry.param] = std::max(most_recent(entry.param), entry.step);
    if (take) {
      chosen.push_back(entry.param);
      taking += entry.param->layout.numel;
    }
  }
  if (chosen.empty()) return;
  gather(chosen);
  faults_.after_prefetch(chosen);
}

bool FetchCoordinator::keeps(const ManagedParam& p) const {
  // Fetched by a prefetch for a later step (:489-491).
  if (most_recent(&p) > step_) return true;
  // Used again within max_reuse_distance elements (:496-503): the walk counts every parameter
  // of the modules after the current step and stops once the count reaches the distance.
  int64_t traversed = 0;
  for (size_t s = static_cast<size_t>(step_); s < params_of_step_.size(); ++s) {
    if (traversed >= knobs_.max_reuse_distance) break;
    for (const ManagedParam* q : params_of_step_[s]) {
      if (q == &p) return true;
      traversed += q->layout.numel;
    }
  }
  return false;
}

void FetchCoordinator::release(const std::vector<ManagedParam*>& own) {
  const std::vector<ManagedParam*> mine = trace_params(own);
  const bool tracing = mode_ == TraceMode::complete && !invalidated_;
  for (ManagedParam* p : mine)
    if (!tracing || !keeps(*p)) drop(*p);
}

void FetchCoordinator::end_forward(bool ok, const std::vector<ManagedParam*>& all_params) {
  if (ok) {
    if (mode_ == TraceMode::record) {  // reset_step (:211-232): the recorded trace is frozen
      module_order_ = std::move(recording_);
      params_of_step_ = std::move(recording_params_);
      mode_ = TraceMode::complete;
    } else if (invalidated_) {  // an invalid trace records again at the next forward (:233-235)
      mode_ = TraceMode::record;
      module_order_.clear();
      params_of_step_.clear();
    }
  }
  for (ManagedParam* p : all_params) drop(*p);
  begin_forward();  // nothing of this forward's queue outlives it
}

}  // namespace zero3
