#include "engine/internal/flat_copy.h"

#include <ATen/ATen.h>

#include <cassert>
#include <cstring>

namespace zero3 {

at::Tensor flat_copy_then_zeros(const at::Tensor& t, int64_t begin, int64_t count, int64_t size) {
  assert(begin >= 0 && count >= 0 && count <= size && begin + count <= t.numel());
  if (t.device().is_cpu() && t.is_contiguous()) {
    at::Tensor out = at::empty({size}, t.options().requires_grad(false));
    const auto element = static_cast<size_t>(t.element_size());
    auto* to = static_cast<char*>(out.data_ptr());
    if (count > 0) std::memcpy(to, static_cast<const char*>(t.data_ptr()) + begin * element, count * element);
    if (size > count) std::memset(to + count * element, 0, (size - count) * element);
    return out;
  }
  const at::Tensor flat = t.detach().reshape({-1});
  at::Tensor out = at::zeros({size}, flat.options());
  if (count > 0) out.narrow(0, 0, count).copy_(flat.narrow(0, begin, count));
  return out;
}

}  // namespace zero3
