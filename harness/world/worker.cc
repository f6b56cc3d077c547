#include "harness/world/worker.h"

#include "engine/errors.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <csignal>
#include <optional>
#include <sys/prctl.h>
#include <thread>
#include <unistd.h>

namespace zerocheck {
namespace {

constexpr std::chrono::seconds kStoreConnectTimeout{60};
constexpr std::chrono::milliseconds kIdlePoll{200};
constexpr std::chrono::seconds kExitAckWait{10};

// This process as a rank: the environment and the store (hosted here when rank 0 is the host).
std::unique_ptr<ProcessRank> join(const WorkerOptions& options) {
  const RankEnv env = RankEnv::from_environment();
  if (env.launcher_pid != 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // also set before exec; kept for a worker started by hand
    if (::getppid() != env.launcher_pid)
      throw zero3::CommError(fmt::format("rank {}: the launcher (pid {}) is gone", env.rank, env.launcher_pid));
  }
  const bool host = env.rank == 0 && !env.store_hosted_elsewhere;
  auto store = zero3::KeyValueStore::tcp(env.master_addr, env.master_port, host, kStoreConnectTimeout);
  return std::make_unique<ProcessRank>(env, std::move(store), options.collective_timeout, options.hook,
                                       options.backend, options.device);
}

// Runs job `id` here and posts the result; returns false when the world lost a rank meanwhile.
bool run_and_post(ProcessRank& rank, int64_t id, const nlohmann::json& job, const JobRunner& run_job) {
  rank.begin_job(id);
  ProcessWorld world(rank, rank.world_size());
  const nlohmann::json result = run_job(world, job);
  if (!rank.lost().empty()) return false;
  rank.store().set(fmt::format("job{}/result/{}", id, rank.rank()), result.dump());
  rank.store().add(fmt::format("job{}/done", id), 1);
  return true;
}

int stop_lost(ProcessRank& rank) {
  fmt::print(stderr, "zerocheck worker rank {}: stopping: {}\n", rank.rank(), rank.lost());
  return 1;
}

class CoordinatorPool final : public JobPool {
 public:
  CoordinatorPool(std::unique_ptr<ProcessRank> rank, JobRunner run_job)
      : rank_(std::move(rank)), run_job_(std::move(run_job)) {}
  ~CoordinatorPool() override {
    // Rank 0 may host the store: it stays until every serving rank has read the exit job.
    try {
      rank_->store().set(fmt::format("job{}", next_job_), nlohmann::json{{"kind", "exit"}}.dump());
      const std::string done = fmt::format("job{}/done", next_job_);
      const auto deadline = std::chrono::steady_clock::now() + kExitAckWait;
      while (rank_->store().add(done, 0) < world_size() - 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } catch (const std::exception&) {
    }
  }
  int world_size() const override { return rank_->world_size(); }

  std::vector<nlohmann::json> run(const nlohmann::json& job) override {
    const int64_t id = next_job_++;
    rank_->store().set(fmt::format("job{}", id), job.dump());
    if (!run_and_post(*rank_, id, job, run_job_)) throw RankLost(rank_->lost());
    const std::string done = fmt::format("job{}/done", id);
    while (rank_->store().add(done, 0) < world_size()) {
      if (!rank_->lost().empty()) throw RankLost(rank_->lost());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<nlohmann::json> results;
    for (int r = 0; r < world_size(); ++r)
      results.push_back(nlohmann::json::parse(
          rank_->store().get(fmt::format("job{}/result/{}", id, r), std::chrono::seconds(10)).value_or("null")));
    return results;
  }

 private:
  std::unique_ptr<ProcessRank> rank_;
  JobRunner run_job_;
  int64_t next_job_ = 0;
};

}  // namespace

void check_backend_and_device(const WorkerOptions& options) {
  if (options.backend != "gloo" && options.backend != "nccl")
    throw zero3::UsageError(fmt::format("--backend {}: expected gloo or nccl", options.backend));
  if (options.device != "auto" && options.device != "cpu" && options.device != "cuda")
    throw zero3::UsageError(fmt::format("--device {}: expected auto, cpu or cuda", options.device));
  if (options.backend == "nccl" && options.device == "cpu")
    throw zero3::UsageError("--backend nccl runs every rank on a CUDA device: --device cpu contradicts it");
  const bool wants_cuda = options.backend == "nccl" || options.device == "cuda";
  if (!wants_cuda) return;
  const std::string what = options.backend == "nccl" ? "--backend nccl" : "--device cuda";
#ifndef ZEROCHECK_CUDA
  throw zero3::UsageError(what + ": this zerocheck was built without CUDA (ZEROCHECK_CUDA=OFF: its LibTorch has no "
                                 "CUDA); build against a CUDA LibTorch, see ci/gpu-check");
#else
  if (!torch::cuda::is_available())
    throw zero3::UsageError(what + ": no CUDA device is visible on this machine");
#endif
}

int serve_jobs(const WorkerOptions& options, const JobRunner& run_job) {
  auto rank = join(options);
  for (int64_t id = 0;; ++id) {
    std::optional<std::string> text;
    while (!(text = rank->store().get(fmt::format("job{}", id), kIdlePoll)))
      if (!rank->lost().empty()) return stop_lost(*rank);
    const nlohmann::json job = nlohmann::json::parse(*text);
    if (job.at("kind") == "exit") {
      rank->store().add(fmt::format("job{}/done", id), 1);  // rank 0 may be waiting to close the store
      return 0;
    }
    if (!run_and_post(*rank, id, job, run_job)) return stop_lost(*rank);
  }
}

std::unique_ptr<JobPool> join_as_coordinator(const WorkerOptions& options, JobRunner run_job) {
  auto rank = join(options);
  if (rank->rank() != 0)
    throw zero3::UsageError(fmt::format("rank {} cannot coordinate: only rank 0 runs the command", rank->rank()));
  return std::make_unique<CoordinatorPool>(std::move(rank), std::move(run_job));
}

}  // namespace zerocheck
