// Waiting for another thread awake, for a short while, before blocking.
//
// The ranks of a world are threads that meet in every collective, mostly a few microseconds
// apart. Blocking on a futex and being woken costs tens of microseconds on a virtual machine whose
// other core idles (more than most of these waits), so a waiter first watches the condition,
// giving its core away at every turn (the thread it waits for may need that core), and blocks
// only when that did not do.
//
// How many turns a wait takes, and whether it ends awake or asleep, depends on thread timing.
// Counted as fuzzing coverage, that would make inputs look new at random (libFuzzer then keeps
// them and pays for their features), so such code is left out of the coverage instrumentation:
// ZERO3_TIMING_DEPENDENT on a function (never inlined, never counted) marks it.
#pragma once

#include <chrono>
#include <thread>

#if defined(__clang__)
#define ZERO3_TIMING_DEPENDENT __attribute__((noinline, no_sanitize("coverage")))
#else
#define ZERO3_TIMING_DEPENDENT
#endif

namespace zero3 {

// Returns true as soon as done() returns true, false when `limit` passed first. `done` should be
// a cheap check (an atomic load, a try_lock), and is called at least once.
template <class Done>
ZERO3_TIMING_DEPENDENT bool wait_awake(Done&& done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
}

}  // namespace zero3
