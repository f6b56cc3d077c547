// The planted faults that DeepSpeed's memory knobs let in: the forward's prefetch and
// live-parameter limit (engine/fetch_coordinator.h) and the optimizer's sub-groups
// (engine/sub_groups.h). Each keeps every collective's size, so only its own invariant sees it.
#include "engine/faults/planted.h"

#include "engine/partitioner.h"

#include <ATen/ATen.h>

#include <limits>

namespace zero3 {
namespace {

// The buffer a prefetch gathered into is handed back before its module runs (zeroed, as a
// recycled buffer may be), while the parameter still reads as available: the module computes
// with zeros instead of its weights. Nothing moves differently; the numbers do (I3).
class PrefetchReleasedEarly final : public PlantedFault {
  void after_prefetch(const std::vector<ManagedParam*>& prefetched) const override {
    at::NoGradGuard no_grad;
    for (ManagedParam* p : prefetched) p->param.detach().zero_();
  }
};

// The prefetch reads no live-parameter limit: it gathers up to stage3_prefetch_bucket_size
// whatever is gathered already, so a rank holds more at once than stage3_max_live_parameters
// allows (I4's peak).
class LiveLimitIgnored final : public PlantedFault {
  void live_limit(int64_t& max_live) const override { max_live = std::numeric_limits<int64_t>::max() / 2; }
};

// The last of two or more sub-groups is stepped twice (an Adam step counts twice; SGD moves
// twice): those parameters leave the twin's (I3).
class SubGroupSteppedTwice final : public PlantedFault {
  void sub_group_steps(size_t group, size_t groups, int& times) const override {
    if (groups > 1 && group + 1 == groups) times = 2;
  }
};

// The first of two or more sub-groups is not stepped: those parameters stay where they were (I3).
class SubGroupSkipped final : public PlantedFault {
  void sub_group_steps(size_t group, size_t groups, int& times) const override {
    if (groups > 1 && group == 0) times = 0;
  }
};

}  // namespace

namespace planted {

const PlantedFault& prefetch_released_early() {
  static const PrefetchReleasedEarly fault;
  return fault;
}
const PlantedFault& live_limit_ignored() {
  static const LiveLimitIgnored fault;
  return fault;
}
const PlantedFault& sub_group_stepped_twice() {
  static const SubGroupSteppedTwice fault;
  return fault;
}
const PlantedFault& sub_group_skipped() {
  static const SubGroupSkipped fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
