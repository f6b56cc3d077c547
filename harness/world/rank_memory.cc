// The counting CPU allocator behind rank_memory.h.
//
// Each allocation gets a header in front of the bytes the caller sees: which account slot it was
// charged to, that slot's generation when it was, and how many bytes. The deleter finds the header
// from the data pointer, so data and context stay the same pointer and LibTorch's raw_allocate /
// raw_deallocate keep working. A slot's state is one word, generation and live bytes together, so
// a free that arrives after its account closed (and maybe after the slot was reused) changes
// nothing: it sees another generation.
#include "harness/world/rank_memory.h"

#include "engine/awake_wait.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define ZEROCHECK_ALLOCATOR_2_3 1
#endif

namespace zerocheck {
namespace {

constexpr size_t kHeaderBytes = 64;  // keeps the caller's bytes as aligned as the allocator's
constexpr uint32_t kNoSlot = 0xffffffffu;
constexpr size_t kSlots = 1024;      // accounts open at once: ranks of the worlds running now
constexpr int kBytesBits = 40;       // a rank holding a terabyte is out of scope
constexpr uint64_t kBytesMask = (uint64_t{1} << kBytesBits) - 1;
constexpr uint32_t kGenerationMask = (1u << (64 - kBytesBits)) - 1;

struct Header {
  uint32_t slot;
  uint32_t generation;
  uint64_t bytes;
};
static_assert(sizeof(Header) <= kHeaderBytes);

// Per slot: generation << kBytesBits | live bytes.
std::array<std::atomic<uint64_t>, kSlots> g_slots{};
std::mutex g_free_mutex;
std::vector<uint32_t> g_free_slots;  // guarded by g_free_mutex
bool g_free_slots_made = false;      // guarded by g_free_mutex

std::atomic<bool> g_counting{false};
at::Allocator* g_previous = nullptr;
c10::DeleterFnPtr g_previous_delete = nullptr;

thread_local RankAccount* t_current = nullptr;

uint32_t generation_of(uint64_t word) { return static_cast<uint32_t>(word >> kBytesBits); }

void credit(const Header& header) {
  std::atomic<uint64_t>& word = g_slots[header.slot];
  uint64_t now = word.load(std::memory_order_relaxed);
  do {
    if (generation_of(now) != header.generation) return;  // its account has closed
  } while (!word.compare_exchange_weak(now, now - header.bytes, std::memory_order_relaxed));
}

void counted_delete(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeaderBytes;
  Header header;
  std::memcpy(&header, base, sizeof(header));
  if (header.slot != kNoSlot) credit(header);
  g_previous_delete(base);
}

}  // namespace

// Where an allocation on this thread is charged now: the current account's slot and
// generation, or no slot.
struct RankAccountSlot {
  static std::pair<uint32_t, uint32_t> now() {
    const RankAccount* account = t_current;
    if (account == nullptr) return {kNoSlot, 0};
    return {account->slot_, account->generation_};
  }
};

namespace {

class CountingCpuAllocator final : public at::Allocator {
 public:
#ifdef ZEROCHECK_ALLOCATOR_2_3
  at::DataPtr allocate(size_t bytes) override { return counted(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#else
  at::DataPtr allocate(size_t bytes) const override { return counted(bytes); }
#endif
  at::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

 private:
  static at::DataPtr counted(size_t bytes) {
    char* base = static_cast<char*>(g_previous->raw_allocate(bytes + kHeaderBytes));
    const auto [slot, generation] = RankAccountSlot::now();
    const Header header{slot, generation, bytes};
    std::memcpy(base, &header, sizeof(header));
    if (slot != kNoSlot) g_slots[slot].fetch_add(bytes, std::memory_order_relaxed);
    void* data = base + kHeaderBytes;
    return {data, data, &counted_delete, at::Device(at::DeviceType::CPU)};
  }
};

}  // namespace

void count_rank_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_previous = c10::GetCPUAllocator();
    g_previous_delete = g_previous->raw_deleter();
    TORCH_INTERNAL_ASSERT(g_previous_delete != nullptr, "the CPU allocator has no raw deleter to wrap");
    static CountingCpuAllocator counting;
    c10::SetCPUAllocator(&counting, /*priority=*/200);  // above LibTorch's own registrations
    g_counting = true;
  });
}

bool counting_rank_memory() { return g_counting.load(); }

RankAccount::RankAccount() : slot_(kNoSlot), generation_(0) {
  if (!counting_rank_memory()) return;
  std::lock_guard<std::mutex> lock(g_free_mutex);
  if (!g_free_slots_made) {
    for (uint32_t s = kSlots; s-- > 0;) g_free_slots.push_back(s);
    g_free_slots_made = true;
  }
  if (g_free_slots.empty()) return;  // not counted: live_bytes() says so
  slot_ = g_free_slots.back();
  g_free_slots.pop_back();
  generation_ = (generation_of(g_slots[slot_].load()) + 1) & kGenerationMask;
  g_slots[slot_].store(static_cast<uint64_t>(generation_) << kBytesBits);
}

RankAccount::~RankAccount() {
  if (t_current == this) t_current = nullptr;
  if (slot_ == kNoSlot) return;
  // A new generation: frees of this account's memory from now on find nothing to credit.
  g_slots[slot_].store(static_cast<uint64_t>((generation_ + 1) & kGenerationMask) << kBytesBits);
  std::lock_guard<std::mutex> lock(g_free_mutex);
  g_free_slots.push_back(slot_);
}

int64_t RankAccount::live_bytes() const {
  if (slot_ == kNoSlot) return -1;
  return static_cast<int64_t>(g_slots[slot_].load() & kBytesMask);
}

ZERO3_TIMING_DEPENDENT int64_t RankAccount::settled_bytes(int64_t expected, std::chrono::milliseconds patience) const {
  int64_t now = live_bytes();
  const auto until = std::chrono::steady_clock::now() + patience;
  while (now != expected && now >= 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    now = live_bytes();
  }
  return now;
}

RankAccount* current_account() { return t_current; }
void set_current_account(RankAccount* account) { t_current = account; }


}  // namespace zerocheck
