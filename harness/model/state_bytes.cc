// The model-state yardstick of docs/DESIGN.md, from the expectation alone.
#include "harness/model/model.h"

#include <torch/cuda.h>

namespace zerocheck::model {

int64_t expected_state_bytes(const Expectation& expected, const std::set<std::string>& trained, int rank,
                             int64_t optimizer_states, const zero3::PrecisionOptions& precision) {
  const bool placed_off_cpu = placed_on_accelerator(rank);
  // fp32: the master is the parameter (4 bytes); bf16: a bf16 copy beside an fp32 master.
  const int64_t weight_bytes = precision.mixed() ? c10::elementSize(precision.param_dtype) + 4 : 4;
  const int64_t grad_bytes = precision.mixed() ? c10::elementSize(precision.accum_dtype) : 4;
  int64_t bytes = 0;
  for (const auto& p : expected.params) {
    if (p.owner >= 0 && (p.owner != rank || placed_off_cpu)) continue;
    const int64_t elements = p.partitioned() ? p.chunk : p.numel;
    const bool had_gradient = p.trainable && trained.count(p.path) > 0;
    bytes += elements * (weight_bytes + (had_gradient ? grad_bytes + 4 * optimizer_states : 0));
  }
  return bytes;
}

bool placed_on_accelerator(int rank) {
  return torch::cuda::is_available() && rank < static_cast<int>(torch::cuda::device_count());
}

}  // namespace zerocheck::model
