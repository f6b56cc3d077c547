// LocalComm: ranks are threads of one process that exchange tensors through shared memory.
//
// Deterministic and fast: the in-process counterpart of PyTorch's threaded test backend, used by
// unit tests, properties and fuzzers. Each collective is two rendezvous: every rank posts its
// input, every rank reads what it needs, and nobody reuses its buffer until all have read.
//
// Thread-safety: the group is shared by its N rank threads; each LocalComm by one thread.
#pragma once

#include "engine/comm.h"

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

  const int world_size_;
  const CommOptions options_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::vector<const at::Tensor*> posted_;
};

}  // namespace zero3
