#include "harness/world.h"

#include "engine/gloo_comm.h"
#include "engine/local_comm.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace zerocheck {

const char* to_string(CommKind kind) { return kind == CommKind::local ? "local" : "gloo"; }

CommKind comm_kind_by_name(const std::string& name) {
  if (name == "local") return CommKind::local;
  if (name == "gloo") return CommKind::gloo;
  throw zero3::UsageError("unknown comm '" + name + "' (expected local or gloo)");
}

void use_sequential_kernels() {
  if (at::get_num_threads() != 1) at::set_num_threads(1);
}

void run_world(const WorldOptions& options, const std::function<void(zero3::Comm&)>& body) {
  if (options.world_size < 1)
    throw zero3::UsageError("world size must be >= 1, got " + std::to_string(options.world_size));

  zero3::CommOptions comm_options;
  comm_options.timeout = options.timeout;
  auto abort = comm_options.abort;

  std::shared_ptr<zero3::LocalCommGroup> local_group;
  std::shared_ptr<zero3::GlooRendezvous> rendezvous;
  if (options.comm == CommKind::local) {
    local_group = zero3::LocalCommGroup::create(options.world_size, comm_options);
  } else {
    static std::atomic<int> world_counter{0};
    rendezvous = zero3::GlooRendezvous::in_process("world" + std::to_string(world_counter++));
  }

  std::mutex failure_mutex;
  std::optional<RankFailure> first_failure;
  auto record_failure = [&](int rank, const std::string& what) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    abort->trip(rank, what);
    // An abort echo from a peer is not the cause; keep the first real error.
    if (!first_failure) first_failure.emplace(rank, what);
  };

  std::vector<std::thread> threads;
  for (int rank = 0; rank < options.world_size; ++rank) {
    threads.emplace_back([&, rank] {
      use_sequential_kernels();  // the dense twin's arithmetic: see world.h
      // The comm outlives the catch: peers must see the abort signal before this rank's
      // connections close, or they would report "connection closed" instead of the cause.
      std::unique_ptr<zero3::Comm> comm;
      try {
        comm = local_group ? local_group->comm_for(rank)
                           : zero3::make_gloo_comm(rendezvous, rank, options.world_size, comm_options);
        body(*comm);
        // Nobody closes its connections while a peer may still be reading from them: Gloo
        // reports a peer that left early as "connection closed", not as the cause.
        if (options.comm == CommKind::gloo) comm->barrier();
      } catch (const std::exception& e) {
        record_failure(rank, e.what());
      } catch (...) {
        record_failure(rank, "unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_failure) throw *first_failure;
}

}  // namespace zerocheck
