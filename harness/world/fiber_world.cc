#include "harness/world/fiber_world.h"

#include "harness/world/failure_text.h"
#include "harness/world/rank_memory.h"

#include "engine/local_comm.h"
#include "engine/module.h"

#include <ATen/ThreadLocalState.h>

#include <fmt/format.h>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define ZEROCHECK_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZEROCHECK_ASAN_FIBERS 1
#endif
#endif
#ifdef ZEROCHECK_ASAN_FIBERS
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace zerocheck {
namespace {

// LibTorch's dispatcher frames are deep, and AddressSanitizer's redzones make every frame bigger.
constexpr size_t kStackBytes = size_t{1} << 20;

// One fiber stack with a guard page below it, so an overflow faults instead of corrupting memory.
class Stack {
 public:
  Stack() {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    bytes_ = kStackBytes + page;
    void* memory = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw zero3::Error("cannot map a fiber stack of " + std::to_string(bytes_) + " bytes");
    ::mprotect(memory, page, PROT_NONE);
    base_ = static_cast<char*>(memory);
    bottom_ = base_ + page;
  }
  ~Stack() { ::munmap(base_, bytes_); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  char* bottom() const { return bottom_; }
  size_t size() const { return kStackBytes; }

 private:
  char* base_ = nullptr;
  char* bottom_ = nullptr;
  size_t bytes_ = 0;
};

thread_local bool t_on_a_fiber = false;

// Stacks are kept for the next world on this thread: mapping eight fresh megabytes per fuzz input
// would cost more than the input.
std::vector<std::unique_ptr<Stack>>& stack_pool() {
  thread_local std::vector<std::unique_ptr<Stack>> pool;
  return pool;
}

class FiberWorld {
 public:
  FiberWorld(int size, const WorldOptions& options, const RankBody& body)
      : size_(size), options_(options), body_(body), accounts_(new RankAccount[static_cast<size_t>(size)]) {}

  void run() {
    zero3::CommOptions comm_options;
    comm_options.timeout = options_.timeout;
    comm_options.yield = [this] { yield(); };
    abort_ = comm_options.abort;
    group_ = zero3::LocalCommGroup::create(size_, comm_options);

    auto& pool = stack_pool();
    while (pool.size() < static_cast<size_t>(size_)) pool.push_back(std::make_unique<Stack>());
    const at::ThreadLocalState caller_state;
    zero3::ForwardInterceptor* const caller_interceptor = zero3::current_forward_interceptor();
    RankAccount* const caller_account = current_account();
    fibers_.resize(static_cast<size_t>(size_));
    for (int rank = 0; rank < size_; ++rank) {
      Fiber& fiber = fibers_[static_cast<size_t>(rank)];
      fiber.stack = pool[static_cast<size_t>(rank)].get();
      fiber.torch_state.emplace(caller_state);
      fiber.account = &accounts_[static_cast<size_t>(rank)];
      make_context(rank);
    }
    // Round robin until every rank has finished; a waiting rank yields at once when it is not
    // its turn yet, so each pass moves every collective forward.
    for (int live = size_; live > 0;) {
      live = 0;
      for (int rank = 0; rank < size_; ++rank) {
        if (fibers_[static_cast<size_t>(rank)].finished) continue;
        switch_to(rank);
        live += fibers_[static_cast<size_t>(rank)].finished ? 0 : 1;
      }
    }
    at::ThreadLocalState::setThreadLocalState(caller_state);
    zero3::set_current_forward_interceptor(caller_interceptor);
    set_current_account(caller_account);
    if (first_failure_) throw *first_failure_;
  }

 private:
  struct Fiber {
    ucontext_t context{};
    Stack* stack = nullptr;
    bool finished = false;
    std::optional<at::ThreadLocalState> torch_state;
    zero3::ForwardInterceptor* interceptor = nullptr;
    RankAccount* account = nullptr;  // the rank's, or what the rank made current since
    void* fake_stack = nullptr;  // AddressSanitizer's, while switched out
  };

  // Apart, and never inlined: getcontext returns twice, so a caller's locals could be clobbered
  // (g++'s -Wclobbered).
  __attribute__((noinline)) void make_context(int rank) {
    Fiber& fiber = fibers_[static_cast<size_t>(rank)];
    ::getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack->bottom();
    fiber.context.uc_stack.ss_size = fiber.stack->size();
    fiber.context.uc_link = nullptr;  // a fiber never returns from its entry: it switches back
    const auto self = reinterpret_cast<uintptr_t>(this);
    ::makecontext(&fiber.context, reinterpret_cast<void (*)()>(&FiberWorld::entry), 3,
                  static_cast<unsigned>(self >> 32), static_cast<unsigned>(self & 0xffffffffu), rank);
#ifdef ZEROCHECK_ASAN_FIBERS
    // AddressSanitizer's swapcontext clears the shadow of the stack named in the target context,
    // twice per switch: a fresh 128 KiB shadow mapping for every switch into a fiber, a few
    // hundred per fuzz input, and a fifth of fuzz_attrs' time in the kernel. It also dropped the
    // redzones of the frames a suspended rank still has. glibc's swapcontext reads the stack
    // from the saved registers, not from uc_stack, once makecontext has run, so the fiber's
    // stack is unnamed there and its shadow is cleared here, once per world: what a finished
    // rank of the last world left poisoned cannot trip this one.
    fiber.context.uc_stack.ss_sp = nullptr;
    fiber.context.uc_stack.ss_size = 0;
    __asan_unpoison_memory_region(fiber.stack->bottom(), fiber.stack->size());
#endif
  }

  static void entry(unsigned high, unsigned low, int rank) {
    auto* world = reinterpret_cast<FiberWorld*>((static_cast<uintptr_t>(high) << 32) | low);
    world->run_rank(rank);
  }

  void run_rank(int rank) {
    arrived_in_fiber(rank);
    {
      std::unique_ptr<zero3::Comm> comm;
      try {
        comm = group_->comm_for(rank);
        body_(*comm);
      } catch (const std::exception& e) {
        record_failure(rank, failure_text(e));
      } catch (...) {
        record_failure(rank, "unknown exception");
      }
    }
    Fiber& fiber = fibers_[static_cast<size_t>(rank)];
    fiber.finished = true;
    leave_fiber(rank, /*for_good=*/true);
  }

  void record_failure(int rank, const std::string& what) {
    abort_->trip(rank, what);
    if (!first_failure_) first_failure_.emplace(rank, what);
  }

  // From the scheduler into `rank`'s fiber, until it yields or finishes.
  void switch_to(int rank) {
    Fiber& fiber = fibers_[static_cast<size_t>(rank)];
    current_ = rank;
#ifdef ZEROCHECK_ASAN_FIBERS
    void* scheduler_fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&scheduler_fake_stack, fiber.stack->bottom(), fiber.stack->size());
#endif
    ::swapcontext(&scheduler_, &fiber.context);
#ifdef ZEROCHECK_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
    current_ = -1;
  }

  // Called by the rank's collective while it waits: back to the scheduler, which runs the others.
  void yield() {
    const int rank = current_;
    leave_fiber(rank, /*for_good=*/false);
    arrived_in_fiber(rank);
  }

  void leave_fiber(int rank, bool for_good) {
    Fiber& fiber = fibers_[static_cast<size_t>(rank)];
    if (!for_good) {
      fiber.torch_state.emplace();
      fiber.interceptor = zero3::current_forward_interceptor();
      fiber.account = current_account();
    }
    t_on_a_fiber = false;
#ifdef ZEROCHECK_ASAN_FIBERS
    // A finished fiber's fake stack is released (nullptr), so nothing of it outlives the world.
    __sanitizer_start_switch_fiber(for_good ? nullptr : &fiber.fake_stack, scheduler_stack_bottom_,
                                   scheduler_stack_size_);
#endif
    ::swapcontext(&fiber.context, &scheduler_);
  }

  void arrived_in_fiber(int rank) {
    Fiber& fiber = fibers_[static_cast<size_t>(rank)];
#ifdef ZEROCHECK_ASAN_FIBERS
    const void* from_bottom = nullptr;
    size_t from_size = 0;
    __sanitizer_finish_switch_fiber(fiber.fake_stack, &from_bottom, &from_size);
    scheduler_stack_bottom_ = from_bottom;
    scheduler_stack_size_ = from_size;
#endif
    at::ThreadLocalState::setThreadLocalState(*fiber.torch_state);
    zero3::set_current_forward_interceptor(fiber.interceptor);
    set_current_account(fiber.account);
    t_on_a_fiber = true;
  }

  int size_;
  const WorldOptions& options_;
  const RankBody& body_;
  std::unique_ptr<RankAccount[]> accounts_;
  std::shared_ptr<zero3::AbortSignal> abort_;
  std::shared_ptr<zero3::LocalCommGroup> group_;
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_{};
  int current_ = -1;
  std::optional<RankFailure> first_failure_;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
};

class FiberWorldHandle final : public World {
 public:
  FiberWorldHandle(int size, const WorldOptions& options) : size_(size), options_(options) {}
  int size() const override { return size_; }
  void run(const RankBody& body) override {
    use_sequential_kernels();  // as every rank thread does: see world.h
    FiberWorld(size_, options_, body).run();
  }
  bool hosts(int rank) const override { return rank >= 0 && rank < size_; }
  std::unique_ptr<World> first(int size) override {
    if (size < 1 || size > size_)
      throw zero3::UsageError(fmt::format("a world of {} ranks has no first {}", size_, size));
    return make_fiber_world(size, options_);
  }
  std::string fresh_name() override {
    static std::atomic<int64_t> counter{0};
    return fmt::format("zerocheck_{}_f{}", ::getpid(), counter++);
  }

 private:
  int size_;
  WorldOptions options_;
};

}  // namespace

bool on_a_fiber() { return t_on_a_fiber; }

std::unique_ptr<World> make_fiber_world(int size, const WorldOptions& options) {
  if (size < 1) throw zero3::UsageError("world size must be >= 1, got " + std::to_string(size));
  if (options.comm != CommKind::local)
    throw zero3::UsageError(std::string("ranks as fibers need the local comm, not ") + to_string(options.comm));
  return std::make_unique<FiberWorldHandle>(size, options);
}

}  // namespace zerocheck
