#include "engine/gloo_comm.h"

#include "engine/errors.h"
#include "engine/internal/c10d_comm.h"
#include "engine/internal/store_rendezvous.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>

namespace zero3 {
namespace {

using internal::StoreRendezvous;

constexpr std::chrono::milliseconds kGlooTimeoutMargin{10000};

}  // namespace

std::shared_ptr<GlooRendezvous> GlooRendezvous::in_process(const std::string& prefix) {
  c10::intrusive_ptr<c10d::Store> base = c10::make_intrusive<c10d::HashStore>();
  return std::make_shared<StoreRendezvous>(c10::make_intrusive<c10d::PrefixStore>(prefix, base));
}

std::unique_ptr<Comm> make_gloo_comm(const std::shared_ptr<GlooRendezvous>& rendezvous, int rank,
                                     int world_size, CommOptions options) {
  const auto* meeting = dynamic_cast<const StoreRendezvous*>(rendezvous.get());
  if (meeting == nullptr) throw UsageError("make_gloo_comm: unknown rendezvous kind");
  // Gloo's own timeout comes after ours: our wait names what is known about the silent peers
  // (CommOptions::explain_timeout); Gloo's would only say "timed out waiting for recv".
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout + kGlooTimeoutMargin);
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  gloo_options->threads = 1;
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(meeting->store, rank, world_size,
                                                             gloo_options);
    return std::make_unique<internal::C10dComm<c10d::ProcessGroupGloo>>(
        std::move(group), "gloo", at::Device(at::kCPU), rank, world_size, std::move(options));
  } catch (const c10::Error& e) {
    throw CommError("rank " + std::to_string(rank) + ": Gloo rendezvous of " +
                    std::to_string(world_size) + " ranks failed: " + e.what_without_backtrace());
  }
}

}  // namespace zero3
