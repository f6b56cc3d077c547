// The forward's fetch schedule under DeepSpeed's ZeRO-3 knobs, replayed on the expectation while
// the dense twin runs: written from DeepSpeed v0.14.5's runtime/zero/partitioned_param_coordinator.py,
// not from the engine's code.
//
//   trace: a forward with no trace in force records the module of every fetch; at its end the
//   record is in force (FetchMemory). A forward whose module at step s is not the trace's (or that
//   runs past it) departs from it: from there no prefetch and plain releases; the next forward
//   records again (:162-178, :211-235).
//   fetch, per module call: its own parameters (each once, by id) that are partitioned and not
//   whole are all-gathered together (one collective). With a trace in force, the entries of the
//   parameter queue (each step's parameters, by id, step by step) that this module uses and no
//   earlier prefetch took are popped; then, with stage3_prefetch_bucket_size > 0, entries are
//   popped while the numel taken stays below min(stage3_max_live_parameters - available,
//   stage3_prefetch_bucket_size), each partitioned, not whole, not yet taken one joining one more
//   all-gather; every popped entry records the latest step its parameter was fetched for
//   (:331-391). `available` is the numel gathered and not released (:447, :472).
//   release, after the module's forward: without a trace every own parameter; with one, not
//   those fetched for a later step, nor those used by a module within stage3_max_reuse_distance
//   numel ahead (the walk over the steps after this one adds each parameter's numel and stops
//   once the sum reaches the distance) (:476-503).
//   end of the forward: whatever is still gathered is released (the engine's forward-only trace,
//   engine/fetch_coordinator.h).
#include "harness/model/model.h"

#include <algorithm>
#include <limits>

namespace zerocheck::model {

FetchKnobs FetchKnobs::of(const zero3::Config& config) {
  const auto& z = config.zero_optimization;
  return FetchKnobs{z.stage3_prefetch_bucket_size, z.stage3_max_live_parameters, z.stage3_max_reuse_distance};
}

std::vector<const ExpectedParam*> TrafficTrace::step_params(const std::string& module_path) const {
  std::vector<const ExpectedParam*> out;
  for (const ExpectedParam* p : expectation_.own_params(module_path))
    if (p->owner < 0 && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  std::sort(out.begin(), out.end(),
            [&](const ExpectedParam* a, const ExpectedParam* b) { return index_of_.at(a) < index_of_.at(b); });
  return out;
}

int64_t TrafficTrace::last_fetched_for(const ExpectedParam* p) const {
  auto it = last_fetched_for_.find(p);
  return it == last_fetched_for_.end() ? std::numeric_limits<int64_t>::min() : it->second;
}

void TrafficTrace::gather(const std::vector<const ExpectedParam*>& params, bool prefetch) {
  int64_t elements = 0;
  for (const ExpectedParam* p : params) {
    if (!p->partitioned() || !whole_.insert(p).second) continue;
    elements += p->chunk * world_;  // a partitioned parameter has numel > threshold >= 0: chunk >= 1
    available_ += p->numel;
  }
  if (elements == 0) return;
  forward_.all_gather += elements;
  ++forward_.all_gathers;
  peak_ = std::max(peak_, held_ + elements);
  held_ += elements;
  if (prefetch) prefetched_ += elements;
}

void TrafficTrace::drop(const ExpectedParam* p) {
  if (!p->partitioned() || whole_.erase(p) == 0) return;
  held_ -= p->chunk * world_;
  available_ -= p->numel;
}

void TrafficTrace::fetch_for(const std::string& module_path, const std::vector<const ExpectedParam*>& mine) {
  if (tracing() && (step_ >= static_cast<int64_t>(memory_.module_order.size()) ||
                    memory_.module_order[static_cast<size_t>(step_)] != module_path))
    departed_ = true;
  if (!memory_.complete) recording_.push_back(module_path);
  std::vector<const ExpectedParam*> fetched;
  int64_t numel = 0;
  for (const ExpectedParam* p : mine)
    if (p->partitioned() && !whole_.count(p)) {
      fetched.push_back(p);
      numel += p->numel;
    }
  largest_module_fetch_ = std::max(largest_module_fetch_, numel);
  gather(fetched, /*prefetch=*/false);
  if (tracing()) {
    size_t not_yet = 0;
    for (const ExpectedParam* p : mine)
      if (last_fetched_for(p) < step_) ++not_yet;
    for (size_t i = 0; i < not_yet && !queue_.empty(); ++i) {
      last_fetched_for_[queue_.front().param] = queue_.front().step;
      queue_.pop_front();
    }
    if (knobs_.prefetch_bucket_size > 0) {
      const int64_t budget = std::min(knobs_.max_live_parameters - available_, knobs_.prefetch_bucket_size);
      std::vector<const ExpectedParam*> taken;
      int64_t taking = 0;
      while (!queue_.empty() && taking < budget) {
        const Entry e = queue_.front();
        queue_.pop_front();
        if (e.param->partitioned() && !whole_.count(e.param) &&
            std::find(taken.begin(), taken.end(), e.param) == taken.end()) {
          taken.push_back(e.param);
          taking += e.param->numel;
        }
        last_fetched_for_[e.param] = std::max(last_fetched_for(e.param), e.step);
      }
      if (!taken.empty()) gather(taken, /*prefetch=*/true);
    }
  }
  ++step_;
}

bool TrafficTrace::kept(const ExpectedParam* p) const {
  if (last_fetched_for(p) > step_) return true;
  int64_t walked = 0;
  for (size_t s = static_cast<size_t>(step_); s < trace_steps_.size(); ++s) {
    if (walked >= knobs_.max_reuse_distance) break;
    for (const ExpectedParam* q : trace_steps_[s]) {
      if (q == p) return true;
      walked += q->numel;
    }
  }
  return false;
}

void TrafficTrace::release_after(const std::vector<const ExpectedParam*>& mine) {
  for (const ExpectedParam* p : mine)
    if (!tracing() || !kept(p)) drop(p);
}

}  // namespace zerocheck::model
