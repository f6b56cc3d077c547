#include "engine/partitioner.h"

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
      p.master = p.param;
      p.status = ParamStatus::Available;
    } else {
      if (!faults_.keeps_placed_copy())
        swap_data(p.param, empty_like_param(p.param));  // other ranks hold no storage at all
      p.master = at::empty({0});
      p.status = ParamStatus::NotAvailable;
    }
    return;
  }
  if (p.persistent) {
    p.master = p.param;
    p.status = ParamStatus::Available;
    return;
  }
  p.master = p.layout.shard_of(p.param.detach().to(at::kFloat), comm_.rank());
  faults_.shard_cut(p, comm_.rank());
  faults_.shard_written(p, comm_.rank());
  swap_data(p.param, empty_like_param(p.param));
  p.status = ParamStatus::NotAvailable;
}

void Partitioner::gather(ManagedParam& p) {
  if (p.persistent || p.placed() || p.status == ParamStatus::Available) return;
  transition(p.status, ParamStatus::Inflight, p.path);
  at::Tensor full = at::empty({p.layout.padded_numel()}, p.master.options());
  comm_.all_gather(p.master, full);
  transition(p.status, ParamStatus::Available, p.path);
  swap_data(p.param, leading_view(full, p.shape));
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
    at::Tensor summed = full_grad.reshape({-1}).clone();
    comm_.all_reduce_sum(summed);
    accumulate(p, summed.view(p.shape));
  } else {
    at::Tensor padded = p.layout.pad(full_grad);
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
  if (!own.defined()) own = at::empty({p.layout.chunk()}, summed.options());
  own.copy_(summed);  // its own storage: the flush's output holds every gradient of the bucket
  accumulate(p, own);
}

void Partitioner::accumulate(ManagedParam& p, at::Tensor summed) {
  // Sum first, divide once: the dense baseline accumulates micro-batch gradients and divides
  // by the world size the same way, so the bits agree.
  int divisor = comm_.world_size();
  faults_.gradient_divisor(p, comm_.world_size(), divisor);
  summed.div_(divisor);
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
  p.master = p.param;
}

}  // namespace zero3
