#include "harness/tools/upstream.h"

#include "engine/errors.h"
#include "harness/tools/export.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace zerocheck {
namespace {

namespace fs = std::filesystem;

std::string runner_package_dir() {
  if (const char* dir = std::getenv("ZEROCHECK_DEEPSPEED_DIR")) return dir;
  return ZEROCHECK_DEEPSPEED_DIR;
}

std::string number(double value) { return fmt::format("{:g}", value); }

}  // namespace

std::vector<std::string> supervisor_command(const UpstreamOptions& o, const std::string& self) {
  std::vector<std::string> args{o.python, "-m", "zerocheck_ds", "suite", "--adapter", o.adapter,
                                "--world", std::to_string(o.world_size), "--stage", std::to_string(o.stage),
                                "--out", o.out_dir,
                                "--scenario-timeout", number(o.scenario_timeout),
                                "--batch", std::to_string(o.batch), "--scenarios"};
  if (o.scenarios.empty()) {
    args.push_back((fs::path(o.out_dir) / "scenarios").string());
  } else {
    args.insert(args.end(), o.scenarios.begin(), o.scenarios.end());
  }
  if (!o.deepspeed_tree.empty()) args.insert(args.end(), {"--deepspeed-tree", o.deepspeed_tree});
  if (!o.baseline.empty()) args.insert(args.end(), {"--baseline", o.baseline});
  if (o.shrink) args.insert(args.end(), {"--shrink", "--shrink-seconds", number(o.shrink_seconds)});
  if (!o.disable.empty()) args.insert(args.end(), {"--disable", o.disable});
  if (o.inert_fraction >= 0) args.insert(args.end(), {"--inert-fraction", number(o.inert_fraction)});
  if (o.ablate) args.push_back("--ablate");
  if (o.keep_checkpoints) args.push_back("--keep-checkpoints");
  if (o.reshard) args.push_back("--reshard");
  if (o.json) args.push_back("--json");
  // Report lines give the command that replays one minimal scenario with these settings.
  args.insert(args.end(), {"--replay-command", fmt::format("{} upstream --python {} --adapter {}", self,
                                                           o.python, o.adapter)});
  return args;
}

namespace {

// Replaces this process with `args` (the runner package first on PYTHONPATH); returns only when
// it cannot start (a --python that does not run: bad usage, 2), after saying why.
int exec_python(const std::vector<std::string>& args, const char* who) {
  const char* existing = std::getenv("PYTHONPATH");
  const std::string path = runner_package_dir() + (existing && *existing ? std::string(":") + existing : "");
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  fmt::print(stderr, "zerocheck {}: cannot run {}: {}\n", who, args[0], std::strerror(errno));
  return 2;
}

void check_runner_package() {
  if (!fs::exists(fs::path(runner_package_dir()) / "zerocheck_ds"))
    throw zero3::UsageError("the runner package is not at " + runner_package_dir() +
                            " (set ZEROCHECK_DEEPSPEED_DIR to harness/deepspeed)");
}

}  // namespace

std::vector<std::string> bisect_command(const BisectOptions& o) {
  std::vector<std::string> args{o.python, "-m", "zerocheck_ds", "bisect", "--repo", o.repo, "--good", o.good,
                                "--bad", o.bad, "--repro", o.repro, "--find", o.find,
                                "--world", std::to_string(o.world_size), "--python", o.python,
                                "--timeout", number(o.timeout)};
  if (!o.shims.empty()) args.insert(args.end(), {"--shims", o.shims});
  if (!o.out.empty()) args.insert(args.end(), {"--out", o.out});
  if (o.json) args.push_back("--json");
  return args;
}

int run_bisect(const BisectOptions& o) {
  if (o.find != "bad" && o.find != "fix") throw zero3::UsageError("--find must be bad or fix, got " + o.find);
  if (o.world_size < 1 || o.world_size > 8) throw zero3::UsageError("--world must be in 1..8");
  if (!(o.timeout > 0)) throw zero3::UsageError("--timeout must be positive");
  check_runner_package();
  return exec_python(bisect_command(o), "upstream bisect");
}

std::vector<std::string> campaign_command(const CampaignOptions& o, const std::string& self) {
  std::vector<std::string> args{o.python, "-m", "zerocheck_ds", "campaign", "--out", o.out_dir,
                                "--minutes", number(o.minutes), "--zerocheck", self,
                                "--seed", std::to_string(o.seed), "--shard", o.shard,
                                "--per-draw", std::to_string(o.per_draw),
                                "--adapter", o.adapter, "--world", std::to_string(o.world_size),
                                "--stage", std::to_string(o.stage),
                                "--scenario-timeout", number(o.scenario_timeout),
                                "--batch", std::to_string(o.batch),
                                "--shrink-seconds", number(o.shrink_seconds)};
  if (!o.deepspeed_tree.empty()) args.insert(args.end(), {"--deepspeed-tree", o.deepspeed_tree});
  if (!o.disable.empty()) args.insert(args.end(), {"--disable", o.disable});
  if (o.inert_fraction >= 0) args.insert(args.end(), {"--inert-fraction", number(o.inert_fraction)});
  if (o.no_shrink) args.push_back("--no-shrink");
  args.insert(args.end(), {"--replay-command", fmt::format("{} upstream --python {} --adapter {}", self,
                                                           o.python, o.adapter)});
  return args;
}

int run_campaign(const CampaignOptions& o) {
  if (!(o.minutes > 0)) throw zero3::UsageError("--minutes must be positive");
  check_runner_package();
  std::error_code ignored;
  const std::string self = fs::read_symlink("/proc/self/exe", ignored).string();
  return exec_python(campaign_command(o, self.empty() ? "zerocheck" : self), "upstream campaign");
}

std::vector<std::string> merge_command(const MergeOptions& o) {
  std::vector<std::string> args{o.python, "-m", "zerocheck_ds", "merge", "--out", o.out_dir};
  args.insert(args.end(), o.folders.begin(), o.folders.end());
  return args;
}

int run_merge(const MergeOptions& o) {
  check_runner_package();
  return exec_python(merge_command(o), "upstream merge");
}

int run_upstream(const UpstreamOptions& o) {
  if (o.world_size < 1 || o.world_size > 8) throw zero3::UsageError("--world must be in 1..8");
  if (o.stage < 1 || o.stage > 3) throw zero3::UsageError("--stage must be 1, 2 or 3");
  check_runner_package();
  if (o.scenarios.empty()) {
    fs::remove_all(fs::path(o.out_dir) / "scenarios");
    export_scenarios(ExportOptions{o.cases, o.seed, o.world_size, o.out_dir});
  }
  std::error_code ignored;
  const std::string self = fs::read_symlink("/proc/self/exe", ignored).string();
  auto args = supervisor_command(o, self.empty() ? "zerocheck" : self);
  if (o.json) {
    // stdout holds the one JSON document: the suite writes it to a copy of stdout, and stdout
    // itself becomes stderr before Python starts, so whatever prints at import (a sitecustomize,
    // DeepSpeed's accelerator line) cannot come before it.
    std::fflush(stdout);
    const int document = ::dup(STDOUT_FILENO);
    if (document < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
      throw zero3::Error(fmt::format("zerocheck upstream --json: cannot set up stdout: {}", std::strerror(errno)));
    args.insert(args.end(), {"--json-fd", std::to_string(document)});
  }
  return exec_python(args, "upstream");
}

}  // namespace zerocheck
