// I4: what each rank holds outside forward/backward, measured from tensor storage against the
// shard sizes of the spec (c = ceil(n/N) elements: an fp32 master, and with bf16 a bf16 shard
// beside it and a gradient in the accumulation dtype), never against the engine's layout.
#include "harness/oracles/matching.h"

#include <fmt/format.h>

namespace zerocheck::oracles {

Result memory(const model::Expectation& expected, const std::vector<ObservedParam>& observed,
              const std::string& target, const zero3::PrecisionOptions& precision) {
  const int64_t param_size = c10::elementSize(precision.param_dtype);
  const int64_t grad_size = precision.mixed() ? c10::elementSize(precision.accum_dtype) : 4;
  return for_each_pair("I4", expected, observed, target, [&](const model::ExpectedParam& e, const ObservedParam& o) -> Result {
    if (e.owner >= 0) return std::nullopt;  // placed: I2's
    auto fail = [&](const std::string& want, const std::string& got, const std::string& message) {
      return violation("I4", e.module_path, e.path, want, got, message);
    };
    if (e.persistent) {
      if (!o.reported_persistent) return fail("persistent (whole on every rank)", "partitioned", "a persistent parameter is partitioned");
      // Storage, not the tensor's element count: a view of whole numel over a smaller storage
      // would hold less than the parameter.
      if (o.param_bytes != e.numel * param_size)
        return fail(fmt::format("{} bytes ({} {} elements)", e.numel * param_size, e.numel, c10::toString(precision.param_dtype)),
                    fmt::format("{} bytes behind the model tensor", o.param_bytes), "a persistent parameter is not whole");
      if (o.full_grad_bytes != 0) return fail("no full gradient", fmt::format("{} bytes", o.full_grad_bytes),
                                              "a persistent parameter keeps its gradient past backward");
      return std::nullopt;
    }
    const int64_t shard_bytes = e.chunk * 4;
    if (o.reported_persistent)
      return fail(fmt::format("partitioned ({} > threshold)", e.numel), "reported persistent",
                  "a parameter above the persistence threshold is kept whole");
    if (o.param_bytes != 0)
      return fail("no full data", fmt::format("{} bytes behind the model tensor", o.param_bytes),
                  "a partitioned parameter holds full data outside forward/backward");
    if (o.full_grad_bytes != 0)
      return fail("no full gradient", fmt::format("{} bytes", o.full_grad_bytes),
                  "a partitioned parameter keeps its full gradient");
    if (o.master_bytes != shard_bytes)
      return fail(fmt::format("{} bytes (ceil({}/N) fp32 elements)", shard_bytes, e.numel),
                  fmt::format("{} bytes", o.master_bytes), "a rank's shard is not ceil(n/N) elements");
    const int64_t low_shard_bytes = precision.mixed() ? e.chunk * param_size : 0;
    if (o.shard_bytes != low_shard_bytes)
      return fail(fmt::format("{} bytes (ceil({}/N) {} elements beside the master)", low_shard_bytes, e.numel,
                              c10::toString(precision.param_dtype)),
                  fmt::format("{} bytes", o.shard_bytes), "a rank's parameter-dtype shard is not ceil(n/N) elements");
    if (o.grad_shard_bytes != 0 && o.grad_shard_bytes != e.chunk * grad_size)
      return fail(fmt::format("{} bytes or none", e.chunk * grad_size), fmt::format("{} bytes", o.grad_shard_bytes),
                  "a shard gradient's storage is not one shard");
    if (o.optimizer_elements % e.chunk != 0 || o.optimizer_elements > 2 * e.chunk)
      return fail(fmt::format("0, {} or {} optimizer elements", e.chunk, 2 * e.chunk),
                  fmt::format("{}", o.optimizer_elements), "optimizer state is not per shard");
    return std::nullopt;
  });
}

Result unlisted_memory(int64_t held, int64_t accounted, const std::string& target) {
  if (held == accounted) return std::nullopt;
  if (held > accounted)
    return violation("I4", target, "", fmt::format("{} bytes: the tensors of its parameters and the user's", accounted),
                     fmt::format("{} bytes allocated and still held", held),
                     fmt::format("this rank holds {} bytes that no tensor of a parameter accounts for", held - accounted));
  return violation("I4", target, "", fmt::format("{} bytes: the tensors of its parameters and the user's", accounted),
                   fmt::format("{} bytes allocated and still held", held),
                   fmt::format("{} bytes of this rank's tensors were not allocated by this rank", accounted - held));
}

Result gathered_peak(int64_t expected, int64_t largest_module_fetch, int64_t measured, const std::string& knobs,
                     const std::string& target) {
  if (expected == measured) return std::nullopt;
  return violation("I4", target, "forward",
                   fmt::format("at most {} gathered parameter elements at once ({}; the largest module fetch {} numel)",
                               expected, knobs, largest_module_fetch),
                   fmt::format("{} gathered parameter elements at once", measured),
                   measured > expected ? "the forward held more gathered parameters at once than its prefetch and live-parameter limits allow"
                                       : "the forward held fewer gathered parameters at once than its prefetch and reuse rules keep");
}

}  // namespace zerocheck::oracles
