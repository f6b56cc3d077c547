// The two ways the oracles call tensors equal (oracles.h): as numbers, and bit for bit; and how a
// violation describes a difference.
#include "harness/oracles/oracles.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace zerocheck::oracles {
namespace {

// `t` itself when its elements already lie in order in host memory, else such a copy: the
// oracles compare after every operation, and detach/cpu are operator calls even when they
// change nothing.
at::Tensor on_host(const at::Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  return t.detach().cpu().contiguous();
}

template <class T>
bool same_numbers_in(const at::Tensor& x, const at::Tensor& y) {
  const T* a = x.data_ptr<T>();
  const T* b = y.data_ptr<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    if (!same_numbers(static_cast<double>(a[i]), static_cast<double>(b[i]))) return false;  // one NaN rule
  return true;
}

}  // namespace

bool same_numbers(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const bool floats = a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble;
  if (a.numel() > 0 && floats && a.scalar_type() == b.scalar_type()) {
    const at::Tensor x = on_host(a), y = on_host(b);
    return a.scalar_type() == at::kFloat ? same_numbers_in<float>(x, y) : same_numbers_in<double>(x, y);
  }
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
  const at::Tensor x = on_host(a), y = on_host(b);
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

double max_abs_difference(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0;
  const at::Tensor x = a.detach().cpu().to(at::kDouble).reshape({-1});
  const at::Tensor y = b.detach().cpu().to(at::kDouble).reshape({-1});
  const double* p = x.contiguous().data_ptr<double>();
  const double* q = y.contiguous().data_ptr<double>();
  double worst = 0;
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    if (same_numbers(p[i], q[i])) continue;  // the one NaN rule: NaN matches NaN
    const double d = std::abs(p[i] - q[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

Violation violation(const std::string& invariant, const std::string& module_path, const std::string& attribute,
                    const std::string& expected, const std::string& actual, const std::string& message) {
  return Violation{invariant, -1, 0, module_path, attribute, expected, actual, message};
}

std::string difference(const at::Tensor& expected, const at::Tensor& actual) {
  if (!actual.defined()) return "<none>";
  if (expected.sizes() != actual.sizes())
    return fmt::format("shape {} (expected {})", c10::str(actual.sizes()), c10::str(expected.sizes()));
  if (expected.numel() == 0) return "equal";
  return fmt::format("max diff {:g}", max_abs_difference(expected, actual));
}

}  // namespace zerocheck::oracles
