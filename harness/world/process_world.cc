#include "harness/world/process_world.h"

#include "engine/errors.h"
#include "engine/gloo_comm.h"
#ifdef ZEROCHECK_CUDA
#include "engine/nccl_comm.h"
#endif
#include "harness/world/failure_text.h"
#include "harness/world/rank_memory.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>
#include <unistd.h>

namespace zerocheck {
namespace {

// How long a rank whose collective timed out waits for its peers to say the same: the ranks
// that do not are the ones that hung.
constexpr std::chrono::milliseconds kTimeoutRollCall{1500};

}  // namespace

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ProcessRank::ProcessRank(RankEnv env, std::shared_ptr<zero3::KeyValueStore> store,
                         std::chrono::milliseconds collective_timeout, LostRankHook hook, std::string backend,
                         std::string device)
    : env_(std::move(env)),
      store_(std::move(store)),
      collective_timeout_(collective_timeout),
      hook_(hook),
      backend_(std::move(backend)),
      device_(std::move(device)) {}

void ProcessRank::begin_job(int64_t id) {
  job_ = id;
  worlds_in_job_ = 0;
  operation_ = -1;
}

std::string ProcessRank::next_world_prefix() { return key(fmt::format("world{}/", worlds_in_job_++)); }

std::string ProcessRank::job_tag() const { return fmt::format("p{}_job{}", store_->port(), job_); }

std::string ProcessRank::key(const std::string& name) const { return fmt::format("job{}/{}", job_, name); }

void ProcessRank::note_operation(int64_t index, const std::string& what) {
  operation_ = index;
  operation_text_ = fmt::format("operation {} ({})", index, what);
  store_->set(fmt::format("progress/{}", rank()), fmt::format("job {}, {}", job_, operation_text_));
}

std::string ProcessRank::lost() const { return store_->get("lost", std::chrono::milliseconds(0)).value_or(""); }

void ProcessRank::before_collective(const char* op) {
  if (hook_.kind == LostRankHook::Kind::none || hook_.rank != rank() || hook_.op != operation_) return;
  fmt::print(stderr, "zerocheck worker rank {}: test hook: {} in {} of {}\n", rank(),
             hook_.kind == LostRankHook::Kind::kill ? "SIGKILL" : "hanging", op, operation_text_);
  std::fflush(stderr);
  store_->set("hook_fired_ms", std::to_string(wall_clock_ms()));  // for the launcher's detection time
  if (hook_.kind == LostRankHook::Kind::kill) ::kill(::getpid(), SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until the launcher kills us
}

std::string ProcessRank::poll_abort() {
  const std::string gone = lost();
  if (!gone.empty()) return gone;
  return store_->get(key("abort"), std::chrono::milliseconds(0)).value_or("");
}

std::string ProcessRank::explain_timeout(const char* op, int world_size) {
  store_->set(key(fmt::format("timeout/{}", rank())), op);
  const auto deadline = std::chrono::steady_clock::now() + kTimeoutRollCall;
  std::vector<int> silent;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank()) continue;
    const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  deadline - std::chrono::steady_clock::now()));
    if (!store_->get(key(fmt::format("timeout/{}", r)), left)) silent.push_back(r);
  }
  if (silent.empty()) return "every rank of the world timed out in it";
  const int hung = silent.front();
  const std::string where =
      store_->get(fmt::format("progress/{}", hung), std::chrono::milliseconds(0)).value_or("before its first operation");
  const std::string text = fmt::format("rank {} hung: it did not reach {} within {} ms (it was in {})", hung, op,
                                       collective_timeout_.count(), where);
  if (store_->add("lost_claim", 1) == 1) {
    store_->set("lost_rank", std::to_string(hung));
    store_->set("lost", text);
  }
  return text;
}

std::pair<int, std::string> ProcessRank::report_failure(const std::string& what) {
  if (store_->add(key("failures"), 1) == 1) {
    store_->set(key("first_what"), what);
    store_->set(key("first_rank"), std::to_string(rank()));
    store_->set(key("abort"), fmt::format("rank {} failed: {}", rank(), what));
    return {rank(), what};
  }
  // Another rank failed first: it is the cause, this failure its echo (as in the thread world).
  const auto first_rank = store_->get(key("first_rank"), std::chrono::seconds(5));
  if (!first_rank) return {rank(), what};
  return {std::stoi(*first_rank), store_->get(key("first_what"), std::chrono::seconds(1)).value_or(what)};
}

zero3::CommOptions ProcessRank::comm_options(int world_size) {
  zero3::CommOptions options;
  options.timeout = collective_timeout_;
  options.abort->watch_remote([this] { return poll_abort(); });
  options.before_collective = [this](const char* op) { before_collective(op); };
  options.explain_timeout = [this, world_size](const char* op) { return explain_timeout(op, world_size); };
  if (backend_ == "nccl" || device_ == "cuda")
    options.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_index()));
  else if (device_ == "cpu")
    options.device = at::Device(at::kCPU);
  return options;
}

int ProcessRank::cuda_index() const {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count == 0)
    throw zero3::UsageError(fmt::format("rank {}: --backend {} --device {} needs a CUDA device; none is visible",
                                        rank(), backend_, device_));
  return env_.local_rank % count;
}

std::unique_ptr<zero3::Comm> ProcessRank::make_comm(const std::string& prefix, int world_size) {
  if (backend_ == "nccl") {
#ifdef ZEROCHECK_CUDA
    return zero3::make_nccl_comm(store_->rendezvous(prefix), rank(), world_size, cuda_index(),
                                 comm_options(world_size));
#else
    throw zero3::UsageError("--backend nccl: this zerocheck was built without CUDA (ZEROCHECK_CUDA=OFF)");
#endif
  }
  return zero3::make_gloo_comm(store_->rendezvous(prefix), rank(), world_size, comm_options(world_size));
}

void ProcessRank::run_rank(int size, const RankBody& body) {
  const std::string prefix = next_world_prefix();
  if (rank() >= size) return;  // a world smaller than the process world
  use_sequential_kernels();  // as every rank thread does: see world.h
  // The comm outlives the catch: peers read the cause from the store before this rank's
  // connections close.
  std::unique_ptr<zero3::Comm> comm;
  try {
    comm = make_comm(prefix, size);
    {
      RankAccount account;
      const ChargeTo charge(&account);
      body(*comm);
    }
    comm->barrier();  // nobody closes connections a peer may still read from
  } catch (const RankLost&) {
    throw;
  } catch (const std::exception& e) {
    const auto [first, what] = report_failure(failure_text(e));
    throw RankFailure(first, what);
  }
}

std::unique_ptr<World> ProcessWorld::first(int size) {
  if (size < 1 || size > size_)
    throw zero3::UsageError(fmt::format("a world of {} processes has no first {}", size_, size));
  return std::make_unique<ProcessWorld>(rank_, size);
}

std::string ProcessWorld::fresh_name() { return "zerocheck_" + rank_.job_tag(); }

}  // namespace zerocheck
