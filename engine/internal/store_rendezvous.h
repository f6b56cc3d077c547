// The one kind of GlooRendezvous: a c10d store (in-process HashStore or a TCPStore) under a
// prefix that separates worlds. Private to gloo_comm.cc and store.cc.
#pragma once

#include "engine/gloo_comm.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace zero3::internal {

class StoreRendezvous final : public GlooRendezvous {
 public:
  explicit StoreRendezvous(c10::intrusive_ptr<c10d::Store> store) : store(std::move(store)) {}
  c10::intrusive_ptr<c10d::Store> store;
};

}  // namespace zero3::internal
