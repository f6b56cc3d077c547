#include "harness/world/launcher.h"

#include "engine/errors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace zerocheck {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kStopGrace{10000};

std::string self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw zero3::CommError(std::string("cannot find this executable (/proc/self/exe): ") + std::strerror(errno));
  return std::string(path, static_cast<size_t>(n));
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

bool is_torchrun_variable(const std::string& entry) {
  for (const char* name : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=", "MASTER_PORT=",
                           "ZEROCHECK_LAUNCHER_PID=", "TORCHELASTIC_USE_AGENT_STORE="})
    if (entry.rfind(name, 0) == 0) return true;
  return false;
}

}  // namespace

ProcessLauncher::ProcessLauncher(const LaunchOptions& options) : options_(options) {
  if (options.procs < 1) throw zero3::UsageError(fmt::format("--procs must be >= 1, got {}", options.procs));
  store_ = zero3::KeyValueStore::tcp("127.0.0.1", 0, /*serve=*/true, std::chrono::seconds(60));
  pids_.assign(options.procs, 0);
  statuses_.assign(options.procs, 0);
  for (int rank = 0; rank < options.procs; ++rank) spawn(rank);
}

void ProcessLauncher::spawn(int rank) {
  const std::string exe = self_executable();
  std::vector<std::string> args{exe,         "worker", "--collective-timeout",
                                fmt::format("{:.3f}", options_.collective_timeout.count() / 1000.0),
                                "--backend", options_.backend, "--device", options_.device};
  if (options_.hook.kind != LostRankHook::Kind::none) {
    args.push_back(options_.hook.kind == LostRankHook::Kind::kill ? "--kill-rank" : "--hang-rank");
    args.push_back(std::to_string(options_.hook.rank));
    args.push_back("--at-op");
    args.push_back(std::to_string(options_.hook.op));
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!is_torchrun_variable(*e)) env.emplace_back(*e);
  env.push_back(fmt::format("RANK={}", rank));
  env.push_back(fmt::format("LOCAL_RANK={}", rank));
  env.push_back(fmt::format("WORLD_SIZE={}", options_.procs));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(fmt::format("MASTER_PORT={}", store_->port()));
  env.push_back(fmt::format("ZEROCHECK_LAUNCHER_PID={}", ::getpid()));
  // Everything the child needs is built before fork: between fork and exec only system calls.
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw zero3::CommError(fmt::format("rank {}: fork failed: {}", rank, std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a worker never outlives its launcher
    if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl
    ::dup2(2, 1);  // the launcher's stdout carries the report (JSON) alone
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  pids_[rank] = pid;
}

ProcessLauncher::~ProcessLauncher() {
  if (std::all_of(pids_.begin(), pids_.end(), [](pid_t p) { return p == 0; })) return;
  try {
    store_->set(fmt::format("job{}", next_job_), nlohmann::json{{"kind", "exit"}}.dump());
  } catch (const std::exception&) {
  }
  reap_all(kStopGrace);
}

double ProcessLauncher::reap_all(std::chrono::milliseconds grace) {
  const auto start = Clock::now();
  double last_exit = 0;
  while (Clock::now() - start < grace) {
    bool any = false;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] == 0) continue;
      if (::waitpid(pids_[r], &statuses_[r], WNOHANG) == pids_[r]) {
        pids_[r] = 0;
        last_exit = std::chrono::duration<double>(Clock::now() - start).count();
      } else {
        any = true;
      }
    }
    if (!any) return last_exit;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] == 0) continue;
    ::kill(pids_[r], SIGKILL);
    ::waitpid(pids_[r], &statuses_[r], 0);
    pids_[r] = 0;
  }
  return last_exit;
}

std::string ProcessLauncher::find_loss(int& lost_rank) {
  // A worker posted it: a peer hung (it names the rank) or failed outside a job.
  if (auto posted = store_->get("lost", std::chrono::milliseconds(0))) {
    lost_rank = std::stoi(store_->get("lost_rank", std::chrono::seconds(1)).value_or("-1"));
    return *posted;
  }
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] == 0 || ::waitpid(pids_[r], &statuses_[r], WNOHANG) != pids_[r]) continue;
    pids_[r] = 0;
    lost_rank = static_cast<int>(r);
    const std::string where = store_->get(fmt::format("progress/{}", r), std::chrono::milliseconds(0))
                                  .value_or("before its first operation");
    const std::string cause = fmt::format("rank {} {} during {}", r, describe_exit(statuses_[r]), where);
    if (store_->add("lost_claim", 1) == 1) {
      store_->set("lost_rank", std::to_string(r));
      store_->set("lost", cause);
      return cause;
    }
    return store_->get("lost", std::chrono::seconds(1)).value_or(cause);
  }
  return "";
}

void ProcessLauncher::fail_world(const std::string& cause, int lost_rank) {
  if (lost_rank >= 0 && lost_rank < static_cast<int>(pids_.size()) && pids_[lost_rank] != 0)
    ::kill(pids_[lost_rank], SIGKILL);  // a hung rank never stops by itself
  const double others = reap_all(kStopGrace);
  // The detection time a user cares about: from the loss (the test hook's moment) to the last
  // worker gone.
  std::string since_hook;
  if (auto fired = store_->get("hook_fired_ms", std::chrono::milliseconds(0)))
    since_hook = fmt::format("; {:.2f} s after the test hook fired", (wall_clock_ms() - std::stoll(*fired)) / 1000.0);
  std::vector<std::string> exits;
  for (size_t r = 0; r < statuses_.size(); ++r)
    exits.push_back(fmt::format("rank {} {}", r, describe_exit(statuses_[r])));
  fmt::print(stderr, "zerocheck: {}; every worker stopped {:.2f} s after the launcher learned it{} ({})\n", cause,
             others, since_hook, fmt::join(exits, ", "));
  throw RankLost(cause);
}

std::vector<nlohmann::json> ProcessLauncher::run(const nlohmann::json& job) {
  const int64_t id = next_job_++;
  store_->set(fmt::format("job{}", id), job.dump());
  const std::string done_key = fmt::format("job{}/done", id);
  auto pause = std::chrono::microseconds(50);
  while (store_->add(done_key, 0) < options_.procs) {
    int lost_rank = -1;
    const std::string cause = find_loss(lost_rank);
    if (!cause.empty()) fail_world(cause, lost_rank);
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
  std::vector<nlohmann::json> results;
  for (int r = 0; r < options_.procs; ++r) {
    const auto text = store_->get(fmt::format("job{}/result/{}", id, r), std::chrono::seconds(10));
    if (!text) throw zero3::CommError(fmt::format("rank {}: counted as done with job {} but posted no result", r, id));
    results.push_back(nlohmann::json::parse(*text));
  }
  // The job's text and results are the bulk of what a long check would pile up in the store.
  store_->erase(fmt::format("job{}", id));
  for (int r = 0; r < options_.procs; ++r) store_->erase(fmt::format("job{}/result/{}", id, r));
  return results;
}

}  // namespace zerocheck
