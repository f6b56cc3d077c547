// Gloo-backed Comm: the real c10d ProcessGroupGloo, for ranks that are threads of one process
// (sharing an in-process store, as PyTorch's own C++ tests do) or separate processes.
//
// c10d's Gloo in LibTorch 1.13 has no reduce_scatter, so the base Comm builds it from
// alltoall_base (ring-equivalent traffic) and sums in rank order. What Gloo and NCCL share
// (staging, waiting, aborts) is engine/internal/c10d_comm.h.
//
// GlooRendezvous is the store both c10d backends meet in (make_nccl_comm takes it too).
#pragma once

#include "engine/comm.h"

#include <memory>
#include <string>

namespace zero3 {

// Where Gloo ranks meet. Opaque so c10d's headers stay inside gloo_comm.cc.
class GlooRendezvous {
 public:
  virtual ~GlooRendezvous() = default;
  // Returns a store shared by rank threads of this process; `prefix` separates worlds.
  static std::shared_ptr<GlooRendezvous> in_process(const std::string& prefix);
};

// Returns a Comm for `rank` of `world_size`. Blocks until all ranks joined the rendezvous.
// Throws CommError when they do not within options.timeout.
std::unique_ptr<Comm> make_gloo_comm(const std::shared_ptr<GlooRendezvous>& rendezvous, int rank,
                                     int world_size, CommOptions options);

}  // namespace zero3
