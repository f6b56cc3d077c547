// Worlds of threads (and the choice between threads and fibers: make_world).
#include "harness/world/world.h"

#include "harness/world/failure_text.h"
#include "harness/world/fiber_world.h"
#include "harness/world/rank_memory.h"

#include "engine/awake_wait.h"
#include "engine/gloo_comm.h"
#include "engine/local_comm.h"
#include "engine/module.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace zerocheck {

namespace {

// ---- rank threads ------------------------------------------------------------------------------
//
// Rank 0 runs on the calling thread, the others on threads kept from one world to the next:
// creating and joining a thread costs 0.2 to 0.5 ms here, and a fuzz input's world of two ranks
// runs in a few milliseconds. Every rank starts from the thread-local LibTorch state of a new
// thread (grad mode, dispatch keys, ...), as when each world made its own threads.

// The thread-local LibTorch state of a thread that has done nothing yet.
const at::ThreadLocalState& fresh_thread_state() {
  static const at::ThreadLocalState fresh = [] {
    std::optional<at::ThreadLocalState> state;
    std::thread([&] { state.emplace(); }).join();
    return *state;
  }();
  return fresh;
}

// Counts down the ranks of one world still running.
class Completion {
 public:
  explicit Completion(int ranks) : remaining_(ranks) {}
  void done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (remaining_.fetch_sub(1) == 1) all_done_.notify_all();
  }
  // The ranks end together (they agree after every operation), so the last ones are mostly a
  // few microseconds away: wait for them awake first (engine/awake_wait.h), then asleep. Either
  // way it returns only under the lock the last done() released: the caller may destroy this
  // the moment it returns.
  ZERO3_TIMING_DEPENDENT void wait() {
    zero3::wait_awake([&] { return remaining_.load() == 0; }, std::chrono::microseconds(100));
    std::unique_lock<std::mutex> lock(mutex_);
    all_done_.wait(lock, [&] { return remaining_.load() == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_done_;
  std::atomic<int> remaining_;
};

class RankThread {
 public:
  RankThread() : thread_([this] { loop(); }) { thread_.detach(); }

  // Runs task(rank) on this thread; `done` hears when it returned. `task` must not throw.
  void start(const std::function<void(int)>* task, int rank, Completion* done) {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = task;
    rank_ = rank;
    done_ = done;
    has_task_.notify_one();
  }

 private:
  // Waits for work (for how long and how many wake-ups it takes is timing: not coverage).
  ZERO3_TIMING_DEPENDENT void loop() {
    const at::ThreadLocalState& fresh = fresh_thread_state();
    for (;;) {
      const std::function<void(int)>* task;
      int rank;
      Completion* done;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        has_task_.wait(lock, [&] { return task_ != nullptr; });
        task = std::exchange(task_, nullptr);
        rank = rank_;
        done = done_;
      }
      at::ThreadLocalState::setThreadLocalState(fresh);
      (*task)(rank);
      done->done();
    }
  }

  std::mutex mutex_;
  std::condition_variable has_task_;
  const std::function<void(int)>* task_ = nullptr;
  int rank_ = 0;
  Completion* done_ = nullptr;
  std::thread thread_;
};

// Idle rank threads, shared by every world of the process (worlds may run side by side: each
// takes threads nobody else holds). Never destroyed: idle threads outlive main harmlessly, and
// joining them from a static destructor would race LibTorch's own.
class RankThreadPool {
 public:
  static RankThreadPool& instance() {
    static auto* pool = new RankThreadPool();
    return *pool;
  }

  std::vector<RankThread*> take(int count) {
    std::vector<RankThread*> out;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // A forked child has none of its parent's threads: start over (the records leak).
      if (pid_ != ::getpid()) {
        idle_.clear();
        pid_ = ::getpid();
      }
      while (!idle_.empty() && static_cast<int>(out.size()) < count) {
        out.push_back(idle_.back());
        idle_.pop_back();
      }
    }
    while (static_cast<int>(out.size()) < count) out.push_back(new RankThread());
    return out;
  }

  void give_back(const std::vector<RankThread*>& threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ == ::getpid()) idle_.insert(idle_.end(), threads.begin(), threads.end());
  }

 private:
  std::mutex mutex_;
  pid_t pid_ = ::getpid();
  std::vector<RankThread*> idle_;
};

// Runs task(rank) for every rank of [0, ranks), rank 0 on this thread and each other on a thread
// of its own, and returns when all have returned. `task` must not throw.
void run_on_rank_threads(int ranks, const std::function<void(int)>& task) {
  const at::ThreadLocalState& fresh = fresh_thread_state();
  auto& pool = RankThreadPool::instance();
  const std::vector<RankThread*> threads = pool.take(ranks - 1);
  Completion completion(ranks - 1);
  for (int rank = 1; rank < ranks; ++rank) threads[static_cast<size_t>(rank - 1)]->start(&task, rank, &completion);
  {
    const at::ThreadLocalStateGuard state(fresh);  // the caller's state comes back after
    zero3::ForwardInterceptor* const caller_interceptor = zero3::current_forward_interceptor();
    zero3::set_current_forward_interceptor(nullptr);
    task(0);
    zero3::set_current_forward_interceptor(caller_interceptor);
  }
  completion.wait();
  pool.give_back(threads);
}

// Runs `body` on `size` rank threads (comm and timeout from `options`), each rank charging its
// own account (rank_memory.h). Throws RankFailure carrying the first rank that threw.
void run_threads(int size, const WorldOptions& options, const RankBody& body) {
  zero3::CommOptions comm_options;
  comm_options.timeout = options.timeout;
  auto abort = comm_options.abort;

  std::shared_ptr<zero3::LocalCommGroup> local_group;
  std::shared_ptr<zero3::GlooRendezvous> rendezvous;
  if (options.comm == CommKind::local) {
    local_group = zero3::LocalCommGroup::create(size, comm_options);
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

  const std::unique_ptr<RankAccount[]> accounts(new RankAccount[static_cast<size_t>(size)]);
  run_on_rank_threads(size, [&](int rank) {
    use_sequential_kernels();  // the dense twin's arithmetic: see world.h
    // The comm outlives the catch: peers must see the abort signal before this rank's
    // connections close, or they would report "connection closed" instead of the cause.
    std::unique_ptr<zero3::Comm> comm;
    try {
      comm = local_group ? local_group->comm_for(rank) : zero3::make_gloo_comm(rendezvous, rank, size, comm_options);
      {
        const ChargeTo charge(&accounts[static_cast<size_t>(rank)]);
        body(*comm);
      }
      // Nobody closes its connections while a peer may still be reading from them: Gloo
      // reports a peer that left early as "connection closed", not as the cause.
      if (options.comm == CommKind::gloo) comm->barrier();
    } catch (const std::exception& e) {
      record_failure(rank, failure_text(e));
    } catch (...) {
      record_failure(rank, "unknown exception");
    }
  });
  if (first_failure) throw *first_failure;
}

class ThreadWorld final : public World {
 public:
  ThreadWorld(int size, const WorldOptions& options) : size_(size), options_(options) {}

  int size() const override { return size_; }

  void run(const RankBody& body) override {
    // Rank 0 runs on the calling thread, but a fiber's stack is small: from a fiber (a world a
    // rank of a fiber world starts for itself) every rank gets a thread.
    if (!on_a_fiber()) return run_threads(size_, options_, body);
    std::exception_ptr failure;
    std::thread host([&] {
      try {
        run_threads(size_, options_, body);
      } catch (...) {
        failure = std::current_exception();
      }
    });
    host.join();
    if (failure) std::rethrow_exception(failure);
  }

  bool hosts(int rank) const override { return rank >= 0 && rank < size_; }

  std::unique_ptr<World> first(int size) override {
    if (size < 1 || size > size_)
      throw zero3::UsageError(fmt::format("a world of {} ranks has no first {}", size_, size));
    return make_world(size, options_);
  }

  std::string fresh_name() override {
    static std::atomic<int64_t> counter{0};
    return fmt::format("zerocheck_{}_{}", ::getpid(), counter++);
  }

 private:
  int size_;
  WorldOptions options_;
};

}  // namespace

const char* to_string(CommKind kind) { return kind == CommKind::local ? "local" : "gloo"; }

CommKind comm_kind_by_name(const std::string& name) {
  if (name == "local") return CommKind::local;
  if (name == "gloo") return CommKind::gloo;
  throw zero3::UsageError("unknown comm '" + name + "' (expected local or gloo)");
}

void use_sequential_kernels() {
  if (at::get_num_threads() != 1) at::set_num_threads(1);
}

std::unique_ptr<World> make_world(int size, const WorldOptions& options) {
  if (size < 1) throw zero3::UsageError("world size must be >= 1, got " + std::to_string(size));
  if (options.ranks == RankKind::fibers) return make_fiber_world(size, options);
  return std::make_unique<ThreadWorld>(size, options);
}

}  // namespace zerocheck
