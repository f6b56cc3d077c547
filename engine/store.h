// KeyValueStore: the key-value store through which the processes of one world meet (c10d's
// TCPStore, as torchrun and `torch.distributed` use at MASTER_ADDR:MASTER_PORT). The harness
// sends jobs and results through it, and each world's Gloo group rendezvous under a prefix.
//
// Waits poll (check, then get) instead of blocking in the store: a TCPStore client whose blocking
// wait timed out can read the late answer as the reply to its next request.
// Thread-safety: one store may be used by several threads (c10d serializes its requests).
#pragma once

#include "engine/gloo_comm.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace zero3 {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Hosts the store on host:port (port 0: any free port) when `serve`, else connects to it.
  // Throws CommError naming host:port when it cannot within `timeout`.
  static std::shared_ptr<KeyValueStore> tcp(const std::string& host, int port, bool serve,
                                            std::chrono::milliseconds timeout);

  // The port the store listens on (the chosen one when hosted on port 0).
  virtual int port() const = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Returns the value once the key exists, or nullopt when it does not within `wait` (0: look
  // once). Throws CommError when the store is gone.
  virtual std::optional<std::string> get(const std::string& key, std::chrono::milliseconds wait) = 0;
  // Removes `key` (nothing when absent): long runs post a job per scenario.
  virtual void erase(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // A Gloo rendezvous over this store under `prefix` (one prefix per world).
  virtual std::shared_ptr<GlooRendezvous> rendezvous(const std::string& prefix) = 0;
};

}  // namespace zero3
