// Ranks as fibers: every rank of a LocalComm world runs on the calling thread, and a rank waiting
// for its peers in a collective switches to the next rank in user space (ucontext) instead of
// blocking its thread.
//
// Why: a world of N threads pays two futex wake-ups and context switches per rank per collective;
// with eight ranks on two cores those dominated the attributes fuzzer (fuzz/scenario_target.h)
// ten to one. Fibers switch in well under a microsecond and schedule deterministically (round
// robin, rank 0 first).
//
// What a switch carries: LibTorch's thread-local state (grad mode, dispatch keys, ...: one
// at::ThreadLocalState per fiber) and the engine's forward interceptor. What it does not:
// autograd's engine keeps per-thread state while a backward runs, and the engine reduces gradients
// from inside backward, so a scenario with a backward must not run on fibers (run_scenario refuses
// it). Under AddressSanitizer the switches are annotated (__sanitizer_*_switch_fiber).
//
// Failure: a rank that throws trips the world's abort signal; peers waiting in a collective throw
// CommError on their next turn; the caller gets the first error as RankFailure, like run_world.
#pragma once

#include "harness/world.h"

namespace zerocheck {

// Runs `body(comm)` for every rank as a fiber on this thread and returns when all have finished.
// Throws RankFailure carrying the first rank's error, and zero3::UsageError for a world size below
// 1 or a comm other than CommKind::local.
void run_fiber_world(const WorldOptions& options, const std::function<void(zero3::Comm&)>& body);

}  // namespace zerocheck
