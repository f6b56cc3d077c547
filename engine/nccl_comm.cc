#include "engine/nccl_comm.h"

#include "engine/errors.h"
#include "engine/internal/c10d_comm.h"
#include "engine/internal/store_rendezvous.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <string>

namespace zero3 {
namespace {

// NCCL's watchdog fires after ours: our wait names what is known about the silent peers.
constexpr std::chrono::milliseconds kNcclTimeoutMargin{10000};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const std::shared_ptr<GlooRendezvous>& rendezvous, int rank,
                                     int world_size, int device_index, CommOptions options) {
  const auto* meeting = dynamic_cast<const internal::StoreRendezvous*>(rendezvous.get());
  if (meeting == nullptr) throw UsageError("make_nccl_comm: unknown rendezvous kind");
  const int devices = static_cast<int>(c10::cuda::device_count());
  if (device_index < 0 || device_index >= devices)
    throw UsageError("rank " + std::to_string(rank) + ": NCCL device cuda:" + std::to_string(device_index) +
                     " does not exist (" + std::to_string(devices) + " CUDA devices)");
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  // ProcessGroupNCCL creates its communicator on the current device at the first collective.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout + kNcclTimeoutMargin;
  options.device = device;
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(meeting->store, rank, world_size, nccl_options);
    return std::make_unique<internal::C10dComm<c10d::ProcessGroupNCCL>>(std::move(group), "nccl", device, rank,
                                                                        world_size, std::move(options));
  } catch (const c10::Error& e) {
    throw CommError("rank " + std::to_string(rank) + ": NCCL rendezvous of " + std::to_string(world_size) +
                    " ranks on cuda:" + std::to_string(device_index) + " failed: " + e.what_without_backtrace());
  }
}

}  // namespace zero3
