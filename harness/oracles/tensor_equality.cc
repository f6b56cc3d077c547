// The two ways the oracles call tensors equal (oracles.h): as numbers, and bit for bit.
#include "harness/oracles/oracles.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>

namespace zerocheck::oracles {

bool same_numbers(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.detach().cpu(), y = b.detach().cpu();
  if (at::equal(x, y)) return true;  // the common case; false whenever a NaN is present
  if (!x.is_floating_point() || !y.is_floating_point()) return false;
  return at::logical_or(x.eq(y), at::logical_and(x.isnan(), y.isnan())).all().item<bool>();
}

bool same_numbers(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;  // no bytes (and data_ptr() may be null: memcmp must not see it)
  const at::Tensor x = a.detach().cpu().contiguous(), y = b.detach().cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

}  // namespace zerocheck::oracles
