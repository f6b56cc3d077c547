// The dense twin as the ranks of one run see it. Internal to harness/interpreter.
//
// The twin's state is a function of the calls made on it, so two ranks whose calls are equal see
// the same twin. SharedTwin holds one twin for a world: the first rank to make a call computes,
// the others read what it gave. A rank whose calls differ from the shared ones (a fault that
// makes ranks disagree) goes on with its own twin, rebuilt from its own calls (TwinView), so
// every rank always sees the twin its own operations imply.
//
// Requires: every rank sharing it finishes reading the twin after operation i before any rank
// starts operation i + 1 (run_ops's agreement after every operation does this).
// Thread-safety: shared by the rank threads (or fibers) of one world. Everything here is the
// harness's own work, not the rank's: it allocates outside the rank's memory account.
#pragma once

#include "harness/interpreter/interpreter.h"
#include "harness/model/model.h"

#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace zerocheck {

// One call the interpreter makes on the dense twin.
struct TwinCall {
  enum class Kind { retarget, forward, backward, drop_pending, step, zero_grad, save, load, scale };
  explicit TwinCall(Kind k) : kind(k) {}
  static TwinCall retarget_to(std::string path);
  // Operation `index`'s forward on every rank of a world of `world` (each rank's route from the
  // workload), traced against `expectation`.
  // `memory`: what the engine's earlier forwards left of its module trace (the traces' prefetch).
  static TwinCall forward_of(const model::Workload& workload, int64_t index, const Op& op, int world,
                             std::shared_ptr<const model::Expectation> expectation, model::FetchMemory memory);

  Kind kind;
  std::string target;                 // retarget
  int64_t index = -1;                 // forward: the operation (its batches)
  std::vector<zero3::Route> routes;   // forward: each rank's route, fresh
  std::shared_ptr<const model::Expectation> expectation;  // forward: what its traffic traces follow
  model::FetchMemory memory;           // forward: the engine's module trace before it
  std::string tag;                    // save, load: the checkpoint's
  model::LoadEffect effect;           // load: what it restores
  std::vector<std::string> paths;     // scale: the parameters the gather reached
  double scale = 1;                   // scale: the edit
  // forward: by rank, the value an inject puts into element 0 of that rank's input (none: clean)
  std::vector<std::optional<float>> input_poison;
  // backward: by rank, what an inject poisons in that rank's backward (SCENARIO_FORMAT.md)
  std::vector<model::BackwardInjection> injections;

  friend bool operator==(const TwinCall& a, const TwinCall& b);
};

// What a call gave.
struct TwinOutcome {
  std::vector<double> losses;                               // forward: by rank
  std::vector<std::shared_ptr<model::TrafficTrace>> traces;  // forward: each rank's schedule
  std::set<std::string> with_gradient;                      // backward
  std::vector<std::vector<std::string>> ready_order;        // backward: by rank (DenseTwin::ready_order)
};

class SharedTwin {
 public:
  SharedTwin(const model::Workload& workload) : twin(workload) {}
  std::shared_mutex mutex;
  model::DenseTwin twin;
  std::vector<TwinCall> calls;        // every call made on `twin`, in order
  std::vector<TwinOutcome> outcomes;  // what each gave
};

// One rank's dense twin: the world's shared one while this rank's calls are the shared calls,
// else its own.
class TwinView {
 public:
  TwinView(const model::Workload& workload, std::shared_ptr<SharedTwin> shared);

  TwinOutcome call(TwinCall call);

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
  // Takes `lock`, waiting awake first (engine/awake_wait.h): a rank holding it is computing what
  // this one needs next, mostly for less than a futex wake-up costs on a virtual machine.
  static void take(std::shared_lock<std::shared_mutex>& lock);
  static void take(std::unique_lock<std::shared_mutex>& lock);
  // From here on this rank trains its own twin, brought to where its calls so far put it.
  void go_own();

  const model::Workload& workload_;
  std::shared_ptr<SharedTwin> shared_;      // null once this rank has its own
  std::unique_ptr<model::DenseTwin> own_;
  std::vector<TwinCall> history_;           // the calls this rank made
};

}  // namespace zerocheck
