// LocalComm: ranks are threads of one process that exchange tensors through shared memory.
//
// Deterministic and fast: the in-process counterpart of PyTorch's threaded test backend, used by
// unit tests, properties and fuzzers. Each collective is one rendezvous: every rank posts a copy
// of its input, waits for all, and reads what it needs from its peers' copies (two sets of
// copies, used in turn, so a rank that runs ahead never overwrites one a peer still reads).
//
// Thread-safety: the group is shared by its N rank threads; each LocalComm by one thread. With
// CommOptions::yield set, the ranks are fibers of one thread instead (harness/world/fiber_world.h).
#pragma once

#include "engine/comm.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace zero3 {

class LocalCommGroup : public std::enable_shared_from_this<LocalCommGroup> {
 public:
  // Returns a group of `world_size` ranks. Throws UsageError when world_size < 1.
  static std::shared_ptr<LocalCommGroup> create(int world_size, CommOptions options);

  // Returns the Comm of `rank`; it keeps the group alive. Call once per rank.
  std::unique_ptr<Comm> comm_for(int rank);
  int world_size() const { return world_size_; }

 private:
  friend class LocalComm;
  LocalCommGroup(int world_size, CommOptions options);

  // Blocks until every rank arrived. Throws CommError on timeout or abort.
  void rendezvous(const Comm& caller, const char* op);
  // The same for ranks that are fibers of one thread (options_.yield set).
  void rendezvous_by_yielding(const Comm& caller, const char* op);

  const int world_size_;
  const CommOptions options_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  std::atomic<uint64_t> generation_{0};  // read without the lock while a rank waits awake
  // What one rank posted to a collective.
  struct Posted {
    int64_t numel = 0;
    at::ScalarType dtype = at::kFloat;
    std::vector<char> bytes;  // the data of a contiguous CPU input
    at::Tensor copy;          // any other input, cloned (flat)
  };
  std::array<std::vector<Posted>, 2> posted_;  // [collective parity][rank]
};

}  // namespace zero3
