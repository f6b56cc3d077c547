#include "engine/partitioner.h"

#include "engine/coalesced_gather.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <vector>

namespace zero3 {
namespace {

// The model tensor's data swaps under autograd's feet by design: a layer that saved the
// parameter for backward sees whatever data it holds when backward runs (re-gathered by then).
void swap_data(at::Tensor& param, const at::Tensor& data) {
  at::NoGradGuard no_grad;
  param.set_data(data);
}

// The first elements of the 1-D `flat` seen as a contiguous tensor of `shape`: what
// narrow(0, 0, n).view(shape) gives, in one operator call instead of five; every gather makes one.
at::Tensor leading_view(const at::Tensor& flat, at::IntArrayRef shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
  return flat.as_strided(shape, strides, flat.storage_offset());
}

at::Tensor empty_like_param(const at::Tensor& param) {
  return at::empty({0}, param.options().requires_grad(false));
}

}  // namespace

void Partitioner::partition(ManagedParam& p) {
  at::NoGradGuard no_grad;
  if (p.placed()) {
    if (p.owner == comm_.rank()) {
      swap_data(p.param, p.param.detach().to(device_));
      p.master = p.shard = p.param;
      p.status = ParamStatus::Available;
    } else {
      if (!faults_.keeps_placed_copy())
        swap_data(p.param, empty_like_param(p.param));  // other ranks hold no storage at all
      p.master = at::empty({0});
      p.shard = p.param;
      p.status = ParamStatus::NotAvailable;
    }
    return;
  }
  if (p.persistent) {
    p.shard = p.param;
    // R1: the master is the bf16 value widened, exactly.
    p.master = precision_.mixed() ? p.param.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true) : p.param;
    p.status = ParamStatus::Available;
    return;
  }
  if (precision_.mixed()) {
    p.shard = p.layout.shard_of(p.param.detach(), comm_.rank());
    p.master = p.shard.to(at::kFloat);
  } else {
    p.master = p.layout.shard_of(p.param.detach().to(at::kFloat), comm_.rank());
  }
  faults_.shard_cut(p, comm_.rank());
  faults_.shard_written(p, comm_.rank());
  if (precision_.mixed()) copy_back(p); else p.shard = p.master;  // a fault may have cut a new master
  swap_data(p.param, empty_like_param(p.param));
  p.status = ParamStatus::NotAvailable;
}

void Partitioner::copy_back(ManagedParam& p) {
  if (!precision_.mixed() || !p.master.defined() || p.master.numel() == 0) return;
  at::NoGradGuard no_grad;
  at::Tensor rounded = round_to(p.master, p.shard.scalar_type());
  faults_.copy_back(p.master, rounded);
  p.shard.detach().view({-1}).copy_(rounded.view({-1}));
}

void Partitioner::write_from_full(ManagedParam& p, const at::Tensor& full) {
  at::NoGradGuard no_grad;
  if (!precision_.mixed()) {
    p.master.copy_(p.layout.shard_of(full, comm_.rank()));
    return;
  }
  p.shard.copy_(p.layout.shard_of(full.to(p.shard.scalar_type()), comm_.rank()));
  p.master.copy_(p.shard);  // widened, exactly: the bf16 copy stays round_to(master)
}

at::Tensor Partitioner::zero_gradient(const ManagedParam& p) const {
  return at::zeros_like(p.master, p.master.options().dtype(precision_.mixed() ? precision_.accum_dtype : at::kFloat));
}

void Partitioner::gather(ManagedParam& p) {
  if (p.persistent || p.placed() || p.status == ParamStatus::Available) return;
  transition(p.status, ParamStatus::Inflight, p.path);
  at::Tensor full = at::empty({p.layout.padded_numel()}, p.shard.options());
  comm_.all_gather(p.shard, full);
  transition(p.status, ParamStatus::Available, p.path);
  swap_data(p.param, leading_view(full, p.shape));
}

void Partitioner::fetch(const std::vector<ManagedParam*>& params) {
  std::vector<ManagedParam*> wanted;
  for (ManagedParam* p : params)
    if (!p->persistent && !p->placed() && p->status != ParamStatus::Available &&
        std::find(wanted.begin(), wanted.end(), p) == wanted.end())
      wanted.push_back(p);
  if (wanted.empty()) return;
  // Every rank sorts alike, so the flat buffer means the same on each (DeepSpeed sorts by ds_id
  // for the same reason, partition_parameters.py:1213 (v0.14.5)).
  std::sort(wanted.begin(), wanted.end(), [](const ManagedParam* a, const ManagedParam* b) { return a->id < b->id; });
  size_t first = wanted.size();
  faults_.fetch_split(wanted.size(), first);
  gather_coalesced({wanted.begin(), wanted.begin() + static_cast<std::ptrdiff_t>(first)});
  if (first < wanted.size()) gather_coalesced({wanted.begin() + static_cast<std::ptrdiff_t>(first), wanted.end()});
}

void Partitioner::gather_coalesced(const std::vector<ManagedParam*>& group) {
  if (group.empty()) return;
  std::vector<at::Tensor> shards;
  for (ManagedParam* p : group) {
    transition(p->status, ParamStatus::Inflight, p->path);
    shards.push_back(p->shard);
  }
  std::vector<at::Tensor> full = all_gather_coalesced(comm_, shards);
  for (size_t i = 0; i < group.size(); ++i) {
    transition(group[i]->status, ParamStatus::Available, group[i]->path);
    swap_data(group[i]->param, leading_view(full[i], group[i]->shape));
  }
}

void Partitioner::release(ManagedParam& p) {
  if (p.persistent || p.placed() || p.status != ParamStatus::Available) return;
  transition(p.status, ParamStatus::NotAvailable, p.path);
  swap_data(p.param, empty_like_param(p.param));
}

void Partitioner::reduce_gradient(ManagedParam& p) {
  at::Tensor full_grad = p.param.grad();
  if (!full_grad.defined()) return;
  at::NoGradGuard no_grad;
  if (p.persistent) {
    // Mixed: R3 on the whole gradient (each rank divides before the SUM, precision.h).
    at::Tensor summed = precision_.mixed() ? gradient_for_sum(full_grad.reshape({-1}), precision_, divisor_of(p))
                                           : full_grad.reshape({-1}).clone();
    comm_.all_reduce_sum(summed);
    if (precision_.mixed()) accumulate_mixed(p, summed.view(p.shape));
    else accumulate(p, summed.view(p.shape));
  } else {
    at::Tensor padded = p.layout.pad(full_grad);
    if (precision_.mixed()) padded = gradient_for_sum(padded, precision_, divisor_of(p));
    faults_.before_reduce_scatter(p, padded);
    bucket_.add(p, std::move(padded), [this](ManagedParam& q, const at::Tensor& padded_q, const at::Tensor& summed) {
      accumulate_chunk(q, padded_q, summed);
    });
  }
  p.param.mutable_grad() = at::Tensor();
  release(p);
}

void Partitioner::flush_gradients() {
  at::NoGradGuard no_grad;
  bucket_.flush([this](ManagedParam& p, const at::Tensor& padded, const at::Tensor& summed) {
    accumulate_chunk(p, padded, summed);
  });
}

void Partitioner::accumulate_chunk(ManagedParam& p, const at::Tensor& padded, const at::Tensor& summed) {
  at::Tensor own;
  faults_.reduce_buffer(p, padded, own);
  if (precision_.mixed()) {  // summed_gradient_in_accum copies: the flush's buffer is not kept
    accumulate_mixed(p, own.defined() ? own.copy_(summed) : summed);
    return;
  }
  if (!own.defined()) own = at::empty({p.layout.chunk()}, summed.options());
  own.copy_(summed);  // its own storage: the flush's output holds every gradient of the bucket
  accumulate(p, own);
}

void Partitioner::accumulate_mixed(ManagedParam& p, const at::Tensor& summed) {
  // Each rank divided before the SUM (R3, gradient_for_sum): no divisor is left to apply here.
  at::Tensor reduced = summed_gradient_in_accum(summed, precision_);
  // R4: micro-step 0 is a copy, later ones add_ in the accumulation dtype.
  p.grad_shard = p.grad_shard.defined() ? p.grad_shard.add_(reduced) : reduced;
}

int Partitioner::divisor_of(const ManagedParam& p) const {
  int divisor = comm_.world_size();
  faults_.gradient_divisor(p, comm_.world_size(), divisor);
  return divisor;
}

void Partitioner::accumulate(ManagedParam& p, at::Tensor summed) {
  // Sum first, divide once: the dense baseline accumulates micro-batch gradients and divides
  // by the world size the same way, so the bits agree. (Mixed precision divides first, as
  // DeepSpeed does: accumulate_mixed.)
  summed.div_(divisor_of(p));
  p.grad_shard = p.grad_shard.defined() ? p.grad_shard.add_(summed) : summed;
}

void Partitioner::restore_full(ManagedParam& p) {
  if (p.persistent) return;
  if (p.placed()) {
    at::NoGradGuard no_grad;
    at::Tensor full = p.owner == comm_.rank() ? p.param.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)
                                              : at::zeros(p.shape);
    comm_.broadcast(full, p.owner);  // released models live on the CPU, as they were built
    swap_data(p.param, full);
    p.owner = -1;
    p.persistent = true;
    p.master = p.param;
    p.status = ParamStatus::Available;
    return;
  }
  gather(p);
  at::NoGradGuard no_grad;
  swap_data(p.param, p.param.detach().clone());  // own storage, not a view of the gather buffer
  p.persistent = true;
  p.master = p.shard = p.param;
}

}  // namespace zero3
