// Rank memory: the CPU bytes each rank holds, measured where they are allocated rather than read
// from anybody's list of tensors. A copy the engine keeps in a member it does not report is
// invisible to every list; it is not invisible here.
//
// Once switched on (count_rank_memory()), every CPU allocation of the process goes through a
// counting allocator that charges its bytes to the account current on the calling thread or
// fiber, and credits them back when the memory is freed, on whatever thread that happens. Every
// World opens one account per rank for each run and makes it current while that rank's body
// runs (a fiber world switches it with the fiber); work the harness does for itself rather than
// for the rank (the dense twin, the oracles' copies, the data it feeds) runs inside a
// NotChargedToTheRank scope, so its bytes are nobody's.
//
// Why the current account and not the thread: fiber ranks share one thread, and the dense twin
// computes on whichever rank's thread reaches it first.
//
// Cost: an allocation carries a 64-byte header and, while an account is current, one atomic add
// (and a compare-and-swap when it is freed). Off (the default) nothing changes: drivers switch
// it on only where the memory oracle (I4) reads it.
// Thread-safety: everything here may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace zerocheck {

// Switches counting on for the rest of the process (idempotent, thread-safe).
void count_rank_memory();
// Whether count_rank_memory() has run.
bool counting_rank_memory();

// One rank's account for one run: opened by the World, closed when the run ends (a free after
// that is credited to nobody).
class RankAccount {
 public:
  RankAccount();
  ~RankAccount();
  RankAccount(const RankAccount&) = delete;
  RankAccount& operator=(const RankAccount&) = delete;

  // Returns the bytes allocated while this account was current that are still allocated, or -1
  // when nothing was counted (counting was off when it opened, or no slot was free).
  int64_t live_bytes() const;
  // Returns live_bytes() as soon as it equals `expected`, else what it is after `patience`. A
  // rank's memory may be freed a little after the rank let go of it, by another thread: a Gloo
  // worker drops the collective it ran (and the rank's buffers in it) after the rank has its
  // result. A copy nobody frees stays more than expected however long the wait.
  int64_t settled_bytes(int64_t expected, std::chrono::milliseconds patience = std::chrono::milliseconds(200)) const;

 private:
  friend struct RankAccountSlot;  // the allocator reads where to charge
  uint32_t slot_;
  uint32_t generation_;
};

// Returns the account charged on this thread (or fiber) now; nullptr: nobody.
RankAccount* current_account();
// Makes `account` (nullptr: nobody) the one charged on this thread. Fiber worlds call it on
// every switch; everyone else uses the scopes below.
void set_current_account(RankAccount* account);

// Charges `account` while it lives, then the previous one again.
class ChargeTo {
 public:
  explicit ChargeTo(RankAccount* account) : previous_(current_account()) { set_current_account(account); }
  ~ChargeTo() { set_current_account(previous_); }
  ChargeTo(const ChargeTo&) = delete;
  ChargeTo& operator=(const ChargeTo&) = delete;

 private:
  RankAccount* previous_;
};

// The harness working for itself inside a rank: what it allocates is nobody's.
class NotChargedToTheRank : public ChargeTo {
 public:
  NotChargedToTheRank() : ChargeTo(nullptr) {}
};

}  // namespace zerocheck
