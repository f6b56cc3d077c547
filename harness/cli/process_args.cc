#include "harness/cli/process_args.h"

#include "engine/errors.h"
#include "harness/world/launcher.h"

#include <torch/cuda.h>

#include <chrono>
#include <string>

namespace zerocheck::cli {
namespace {

std::shared_ptr<JobPool>& coordinated_pool() {
  static std::shared_ptr<JobPool> pool;
  return pool;
}

bool& coordinates_flag() {
  static bool coordinates = false;
  return coordinates;
}

}  // namespace

void set_coordinated_pool(std::shared_ptr<JobPool> pool) { coordinated_pool() = std::move(pool); }
bool has_coordinated_pool() { return coordinated_pool() != nullptr; }
void set_worker_coordinates(bool coordinates) { coordinates_flag() = coordinates; }
bool worker_coordinates() { return coordinates_flag(); }

void ProcessArgs::add_to(CLI::App& command, bool with_procs) {
  if (with_procs)
    command.add_option("--procs", procs, "run the ranks as this many processes (zerocheck worker), not threads")
        ->check(CLI::Range(1, 64));
  command.add_option("--collective-timeout", collective_timeout_s,
                     "seconds a process rank waits in a collective before naming the ranks that hung")
      ->check(CLI::Range(0.1, 86400.0));
  command.add_option("--backend", backend,
                     "collectives of process ranks: gloo (CPU, TCP) or nccl (a CUDA build; rank on "
                     "cuda:<LOCAL_RANK mod devices>, one device per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  command.add_option("--device", device,
                     "where process ranks place their experts: auto (the engine's default), cpu, or cuda "
                     "(cuda:<LOCAL_RANK mod devices>, a CUDA build; ranks may share a device)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  command.add_option("--kill-rank", kill_rank, "test hook: SIGKILL this worker in the middle of --at-op");
  command.add_option("--hang-rank", hang_rank, "test hook: this worker hangs in the middle of --at-op");
  command.add_option("--at-op", at_op, "the operation (scenario op index, or training step) the hook fires in");
}

WorkerOptions ProcessArgs::worker_options(int world_size) const {
  WorkerOptions options;
  options.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(collective_timeout_s * 1000));
  options.backend = backend;
  options.device = device;
  check_backend_and_device(options);
  if (kill_rank >= 0 && hang_rank >= 0) throw zero3::UsageError("--kill-rank and --hang-rank exclude each other");
  const int rank = kill_rank >= 0 ? kill_rank : hang_rank;
  if (rank < 0) return options;
  if (at_op < 0) throw zero3::UsageError("--kill-rank/--hang-rank need --at-op K (K >= 0)");
  if (rank >= world_size)
    throw zero3::UsageError("--kill-rank/--hang-rank " + std::to_string(rank) + " is outside the world of " +
                            std::to_string(world_size) + " processes");
  options.hook.kind = kill_rank >= 0 ? LostRankHook::Kind::kill : LostRankHook::Kind::hang;
  options.hook.rank = rank;
  options.hook.op = at_op;
  return options;
}

std::shared_ptr<JobPool> ProcessArgs::make_pool() const {
  if (coordinated_pool()) return coordinated_pool();
  WorkerOptions asked;
  asked.backend = backend;
  asked.device = device;
  check_backend_and_device(asked);  // first: on a build without CUDA, say that
  if (procs == 0) {
    if (kill_rank >= 0 || hang_rank >= 0) throw zero3::UsageError("--kill-rank/--hang-rank need --procs");
    if (backend != "gloo" || device != "auto")
      throw zero3::UsageError("--backend/--device choose what process ranks use: add --procs N, or run "
                              "`zerocheck worker --backend ... -- COMMAND` under torchrun");
    return nullptr;
  }
  const WorkerOptions worker = worker_options(procs);
  if (backend == "nccl" && procs > static_cast<int>(torch::cuda::device_count()))
    throw zero3::UsageError("--backend nccl with --procs " + std::to_string(procs) + ": NCCL needs one CUDA device "
                            "per rank and this machine has " + std::to_string(torch::cuda::device_count()));
  LaunchOptions launch;
  launch.procs = procs;
  launch.collective_timeout = worker.collective_timeout;
  launch.hook = worker.hook;
  launch.backend = worker.backend;
  launch.device = worker.device;
  return std::make_shared<ProcessLauncher>(launch);
}

}  // namespace zerocheck::cli
