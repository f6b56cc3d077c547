// NCCL-backed Comm: c10d's ProcessGroupNCCL, one rank per process (or per thread) and per CUDA
// device. Built only when ZEROCHECK_CUDA is on (a LibTorch with CUDA): the CPU build has no
// definition of make_nccl_comm and includes no CUDA header.
//
// Each rank's collectives run on cuda:<device_index>: tensors that live elsewhere (the engine
// keeps shards on the CPU) are copied there and back. Reductions are the base Comm's all_to_all
// plus a local sum in rank order, not NCCL's reduce (its ring/tree order depends on the
// topology), so NCCL gives LocalComm's bits (engine/internal/c10d_comm.h).
//
// NCCL refuses two ranks of one communicator on the same device ("Duplicate GPU detected"):
// a world needs one device per rank. Timeouts: CommOptions::timeout bounds every wait (a poll of
// the work's CUDA events, so a peer's failure posted in the store ends it at once), and NCCL's
// own watchdog is set a margin later, as for Gloo: a rank that gave up on a collective reports
// first, and the watchdog then tears its process down (LibTorch 2.x's default error handling).
#pragma once

#include "engine/comm.h"
#include "engine/gloo_comm.h"

#include <memory>

namespace zero3 {

// Returns a Comm for `rank` of `world_size` whose collectives run on cuda:<device_index>; its
// options().device is that device. Blocks until all ranks joined the rendezvous (the store
// behind `rendezvous`, as for make_gloo_comm).
// Throws CommError when the rendezvous fails or times out, UsageError when the device does not
// exist.
std::unique_ptr<Comm> make_nccl_comm(const std::shared_ptr<GlooRendezvous>& rendezvous, int rank,
                                     int world_size, int device_index, CommOptions options);

}  // namespace zero3
