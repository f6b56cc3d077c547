#include "harness/upstream.h"

#include "engine/errors.h"
#include "harness/export.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace zerocheck {
namespace {

namespace fs = std::filesystem;

// A port the kernel just handed out on loopback: free for the runner's rendezvous.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    port = ntohs(address.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string runner_package_dir() {
  if (const char* dir = std::getenv("ZEROCHECK_DEEPSPEED_DIR")) return dir;
  return ZEROCHECK_DEEPSPEED_DIR;
}

// Starts one rank of the runner with its output in `log`. Returns the child's pid.
pid_t spawn_rank(const UpstreamOptions& o, const std::vector<std::string>& args, int rank, int port,
                 const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    for (const char* key : {"RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "LOCAL_RANK=", "PYTHONPATH="})
      if (entry.rfind(key, 0) == 0) goto skip;
    env.push_back(entry);
  skip:;
  }
  const char* existing = std::getenv("PYTHONPATH");
  env.push_back("PYTHONPATH=" + runner_package_dir() + (existing ? std::string(":") + existing : ""));
  if (o.world_size > 1) {
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("LOCAL_RANK=" + std::to_string(rank));
    env.push_back("WORLD_SIZE=" + std::to_string(o.world_size));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "zerocheck upstream: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

UpstreamResult run_upstream(const UpstreamOptions& o) {
  if (o.world_size < 1 || o.world_size > 8) throw zero3::UsageError("--world must be in 1..8");
  if (!fs::exists(fs::path(runner_package_dir()) / "zerocheck_ds"))
    throw zero3::UsageError("the runner package is not at " + runner_package_dir() +
                            " (set ZEROCHECK_DEEPSPEED_DIR to harness/deepspeed)");
  const std::string scenarios = (fs::path(o.out_dir) / "scenarios").string();
  const std::string verdicts = (fs::path(o.out_dir) / "verdicts").string();
  fs::remove_all(verdicts);
  export_scenarios(ExportOptions{o.cases, o.seed, o.world_size, o.out_dir});
  const std::vector<std::string> args{o.python, "-m", "zerocheck_ds", "--scenarios", scenarios,
                                      "--out", verdicts, "--adapter", o.adapter};
  const int port = free_port();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < o.world_size; ++r) {
    logs.push_back((fs::path(o.out_dir) / fmt::format("rank{}.log", r)).string());
    pids.push_back(spawn_rank(o, args, r, port, logs.back()));
  }
  // Wait for every rank; past the timeout, or once one rank failed and the others linger, stop
  // them: a hung collective in the runner must not hang zerocheck.
  UpstreamResult result;
  std::vector<int> codes(pids.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  for (size_t done = 0; done < pids.size();) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (codes[i] != 0 && !first_failure) first_failure = std::chrono::steady_clock::now();
        ++done;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (done < pids.size() && (now > deadline || (first_failure && now - *first_failure > std::chrono::seconds(30))))
      for (size_t i = 0; i < pids.size(); ++i)
        if (codes[i] == -1) ::kill(pids[i], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  result.runner_exit = codes[0];
  for (int c : codes) result.runner_exit = std::max(result.runner_exit, c);
  const std::string summary = (fs::path(verdicts) / "summary.json").string();
  if (fs::exists(summary)) result.summary = nlohmann::json::parse(read_text(summary));
  if (result.runner_exit >= 2 || !fs::exists(summary)) {
    result.runner_error = read_text(logs[0]);
    result.runner_exit = 2;
  }
  return result;
}

}  // namespace zerocheck
