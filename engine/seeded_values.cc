#include "engine/seeded_values.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

#include <cmath>

namespace zero3 {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr double kHalfRange = 8388608.0;  // 2^23: k in [0, 2^24) maps to [-1, 1)

}  // namespace

uint64_t splitmix64(uint64_t state) {
  uint64_t z = state + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xCBF29CE484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001B3ULL;
  }
  return hash;
}

uint64_t stream_base(uint64_t seed, ValueStream stream, uint64_t key) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(stream)) ^ key);
}

uint64_t data_key(int64_t op_index, int rank) {
  return static_cast<uint64_t>(op_index) * 256 + static_cast<uint64_t>(rank);
}

double unit_value(uint64_t base, uint64_t index) {
  const uint64_t k = splitmix64(base + index * kGolden) >> 40;
  // Both operands are exact in double and the difference has at most 24 significant bits.
  return (static_cast<double>(k) - kHalfRange) / kHalfRange;
}

float parameter_bound(int64_t fan_in) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in < 1 ? 1 : fan_in)));
}

void fill_seeded(const at::Tensor& t, uint64_t base, float bound) {
  if (t.scalar_type() != at::kFloat || !t.is_contiguous() || !t.device().is_cpu())
    throw UsageError("fill_seeded: expected a contiguous CPU float32 tensor, got " + t.toString());
  float* out = t.data_ptr<float>();
  const auto n = static_cast<uint64_t>(t.numel());
  // A 24-bit value times a float32: the product is exact in double, so this is one rounding.
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(unit_value(base, i) * static_cast<double>(bound));
}

}  // namespace zero3
