// Seeded values: the numbers a scenario means, computed from counters instead of a random
// number generator, so C++ (any LibTorch), Python (any torch) and a reader with a pencil get the
// same float32 bits. harness/SCENARIO_FORMAT.md ("Numbers") states the rule; the Python replay
// implements it once more (harness/deepspeed/zerocheck_ds/model/seeded.py) and both are held to one
// fixture of golden values (harness/tests/fixtures/seeded_values.json).
//
// The rule: a stream is picked by (seed, tag, key); its element i is the 24 high bits k of the
// (i+1)-th output of a splitmix64 generator started at the stream's base, mapped to
// u = (k - 2^23) / 2^23 in [-1, 1) (exact in float32), and the value is float32(u * bound), one
// rounding of a product that is exact in double.
//
// Thread-safety: pure functions.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string_view>

namespace zero3 {

// X(name, tag, key): every stream of values, with the 64-bit tag that picks it and its key.
#define ZERO3_VALUE_STREAMS(X)                                                                  \
  X(parameter, 1, "FNV-1a 64 of the parameter's path (\"0.linear.weight\")")                   \
  X(input, 2, "op_index * 256 + rank: a forward's input x, (batch, features) row-major")       \
  X(target, 3, "op_index * 256 + rank: a forward's target y, (batch, features) row-major")     \
  X(probe_input, 4, "op_index * 256 + rank: the upstream replay's no-gradient probe forward")

enum class ValueStream : uint64_t {
#define ZERO3_VALUE_STREAM_ENUM(name, tag, key) name = tag,
  ZERO3_VALUE_STREAMS(ZERO3_VALUE_STREAM_ENUM)
#undef ZERO3_VALUE_STREAM_ENUM
};

// Returns the next output of a splitmix64 generator whose state is `state` (Steele, Lea and
// Flood 2014): mix(state + 0x9E3779B97F4A7C15). splitmix64(0) == 0xE220A8397B1DCDAF.
uint64_t splitmix64(uint64_t state);
// Returns the FNV-1a 64-bit hash of `bytes`.
uint64_t fnv1a64(std::string_view bytes);
// Returns splitmix64(splitmix64(splitmix64(seed) ^ tag) ^ key): where the stream starts.
uint64_t stream_base(uint64_t seed, ValueStream stream, uint64_t key);
// Returns the key of a data stream (input, target, probe_input) for operation `op_index` on `rank`.
uint64_t data_key(int64_t op_index, int rank);
// Returns element `index` of the stream at `base`, before scaling: (k - 2^23) / 2^23 with k the
// 24 high bits of splitmix64(base + index * 0x9E3779B97F4A7C15).
double unit_value(uint64_t base, uint64_t index);
// Returns float32(1 / sqrt(fan_in)), rounded once from double.
float parameter_bound(int64_t fan_in);
// Fills `t` (float32, contiguous) with float32(unit_value(base, i) * bound) for i = 0, 1, ...
// Throws UsageError for another dtype or a non-contiguous tensor.
void fill_seeded(const at::Tensor& t, uint64_t base, float bound);

}  // namespace zero3
