// The planted faults that the partitioner lets in: how shards are cut and padded, and how
// gradients are reduced into them.
#include "engine/faults/planted.h"

#include "engine/partitioner.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace zero3 {
namespace {

// Ranks other than a placed module's owner keep their full copy (unused, never freed).
class PlacedCopiesKept final : public PlantedFault {
  bool keeps_placed_copy() const override { return true; }
};

// Each rank's shard is cut one element late.
class ShardOffsetOffByOne final : public PlantedFault {
  void shard_cut(ManagedParam& p, int rank) const override {
    if (p.layout.numel <= 1) return;
    at::Tensor flat = p.layout.pad(p.param.detach().to(at::kFloat));
    const int64_t start = std::min(p.layout.begin(rank) + 1, flat.numel() - p.layout.chunk());
    p.master = flat.narrow(0, start, p.layout.chunk()).clone();
  }
};

// Shard padding holds what fresh memory may hold, as upstream allocates shards without zeroing
// them everywhere: planted wherever a shard is written.
class UninitialisedPadding final : public PlantedFault {
  void shard_written(ManagedParam& p, int rank) const override {
    if (p.persistent || p.placed() || p.master.numel() == 0) return;
    at::NoGradGuard no_grad;
    const int64_t real = p.layout.real_in_shard(rank);
    p.master.narrow(0, real, p.layout.chunk() - real).fill_(0.5f);  // what "uninitialised" may hold
  }
};

// The shard gradient is a c-element view of a c*N buffer: the full gradient's storage stays.
class GradShardOverallocated final : public PlantedFault {
  void reduce_buffer(const ManagedParam& p, const at::Tensor& full_grad, at::Tensor& buffer) const override {
    buffer = at::empty({p.layout.padded_numel()}, full_grad.options()).narrow(0, 0, p.layout.chunk());
  }
};

// The reduce-scatter delivers the next rank's shard.
class ReduceScatterWrongShard final : public PlantedFault {
  void before_reduce_scatter(const ManagedParam& p, at::Tensor& padded) const override {
    padded = padded.roll(-p.layout.chunk());
  }
};

// The bucket is flushed before its last gradient joins it, which then goes alone: every sum is
// the same, and only the count of reduce-scatters shows it.
class BucketFlushedOneGradientEarly final : public PlantedFault {
  void bucket_flush_split(size_t held, size_t& first) const override {
    if (held >= 2) first = held - 1;
  }
};

// A module fetch gathers its last parameter alone, after the others: every gathered bit is the
// same, and only the count of all-gathers shows it.
class FetchGathersLastParameterAlone final : public PlantedFault {
  void fetch_split(size_t fetched, size_t& first) const override {
    if (fetched >= 2) first = fetched - 1;
  }
};

class WrongGradientDivisor final : public PlantedFault {
  void gradient_divisor(const ManagedParam&, int world, int& divisor) const override { divisor = world + 1; }
};

}  // namespace

namespace planted {

const PlantedFault& placed_copies_kept() {
  static const PlacedCopiesKept fault;
  return fault;
}
const PlantedFault& shard_offset_off_by_one() {
  static const ShardOffsetOffByOne fault;
  return fault;
}
const PlantedFault& uninitialised_padding() {
  static const UninitialisedPadding fault;
  return fault;
}
const PlantedFault& grad_shard_overallocated() {
  static const GradShardOverallocated fault;
  return fault;
}
const PlantedFault& reduce_scatter_wrong_shard() {
  static const ReduceScatterWrongShard fault;
  return fault;
}
const PlantedFault& bucket_flushed_one_gradient_early() {
  static const BucketFlushedOneGradientEarly fault;
  return fault;
}
const PlantedFault& fetch_gathers_last_parameter_alone() {
  static const FetchGathersLastParameterAlone fault;
  return fault;
}
const PlantedFault& wrong_gradient_divisor() {
  static const WrongGradientDivisor fault;
  return fault;
}

}  // namespace planted
}  // namespace zero3
