// Ranks as fibers: every rank of a LocalComm world runs on the calling thread, and a rank waiting
// for its peers in a collective switches to the next rank in user space (ucontext) instead of
// blocking its thread. Internal to harness/world: make_world (world.h) makes these.
//
// Why: a world of N threads pays two futex wake-ups and context switches per rank per collective;
// with eight ranks on two cores those dominated the attributes fuzzer (fuzz/scenario_target.h)
// ten to one. Fibers switch in well under a microsecond and schedule deterministically (round
// robin, rank 0 first).
//
// What a switch carries: LibTorch's thread-local state (grad mode, dispatch keys, ...: one
// at::ThreadLocalState per fiber), the engine's forward interceptor and the rank's memory account
// (rank_memory.h). What it does not: autograd's engine keeps per-thread state while a backward
// runs, and the engine reduces gradients from inside backward, so a scenario with a backward must
// not run on fibers (the interpreter refuses it). Under AddressSanitizer the switches are
// annotated (__sanitizer_*_switch_fiber).
//
// Failure: a rank that throws trips the world's abort signal; peers waiting in a collective throw
// CommError on their next turn; the caller gets the first error as RankFailure.
#pragma once

#include "harness/world/world.h"

#include <memory>

namespace zerocheck {

// Returns a world of `size` fibers. Throws zero3::UsageError for a comm other than LocalComm.
std::unique_ptr<World> make_fiber_world(int size, const WorldOptions& options);

// Whether the calling code runs on a fiber of a fiber world (its stack is small).
bool on_a_fiber();

}  // namespace zerocheck
