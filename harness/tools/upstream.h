// `zerocheck upstream`: export scenarios (or take the maintainer's own), then hand over to the
// Python supervisor (harness/deepspeed/, `python -m zerocheck_ds suite`), which replays them on
// supervised rank processes, groups findings by signature, compares with a baseline and shrinks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck {

struct UpstreamOptions {
  std::string python = "python3";
  std::string adapter = "deepspeed";  // or passthrough / faulty, to check the runner itself
  int64_t cases = 10;
  uint64_t seed = 1;
  int world_size = 1;
  int stage = 3;                        // the ZeRO stage the scenarios are replayed with
  std::string disable;                  // of I3, I4, I6, I9, I10: invariants not to check ("I3,I9")
  bool ablate = false;                  // replay again with each of I3, I4, I6, I9 off in turn
  bool keep_checkpoints = false;        // keep OUT/checkpoints/<scenario> (removed by default)
  bool reshard = false;                 // resume loads with a world_size on a second pool
  std::string out_dir = "zerocheck-out/upstream";
  std::vector<std::string> scenarios;  // given: replay these instead of exporting
  std::string deepspeed_tree;          // a DeepSpeed source tree instead of the installed one
  std::string baseline;                // an earlier out_dir
  bool shrink = false;
  double shrink_seconds = 300;
  double scenario_timeout = 120;
  double inert_fraction = -1;           // I10's share of scenarios replayed again; < 0: the suite's default
  int batch = 50;
  bool json = false;
};

// The supervisor's command line for these options (exported scenarios under out_dir/scenarios).
std::vector<std::string> supervisor_command(const UpstreamOptions& options, const std::string& self);

// `zerocheck upstream bisect`: the first commit of a DeepSpeed git checkout where a repro script
// reproduces (or, with find "fix", stops reproducing); zerocheck_ds/repro/bisect.py does the work.
struct BisectOptions {
  std::string python = "python3";
  std::string repo;     // a local DeepSpeed git checkout (its top folder)
  std::string good;     // a revision where the script does not reproduce
  std::string bad;      // a later revision where it does
  std::string repro;    // a repro script (OUT/repro/*.py)
  std::string find = "bad";  // "bad": the first commit that reproduces; "fix": the first that no longer does
  int world_size = 1;
  std::string shims;    // put on PYTHONPATH after the checkout (../shared/deepspeed/shims)
  double timeout = 300;  // seconds per commit
  std::string out;       // also write the result here (JSON)
  bool json = false;
};

// The bisection's command line (`python -m zerocheck_ds bisect ...`).
std::vector<std::string> bisect_command(const BisectOptions& options);

// Replaces this process with the Python bisection (exit codes are its own: 0 found, 1 several
// candidates left by skipped commits, 2 bad usage, 3 it failed). Returns only when --python does
// not run, with exit code 2 after printing why. Throws zero3::UsageError for bad options.
int run_bisect(const BisectOptions& options);

// `zerocheck upstream campaign`: scenarios drawn by this program's export and replayed on
// DeepSpeed for a set time, root causes with their time to find (zerocheck_ds/suite/campaign.py).
struct CampaignOptions {
  std::string python = "python3";
  std::string out_dir;
  double minutes = 0;
  uint64_t seed = 1;
  std::string shard = "0/1";  // I/N: the shards draw apart
  int per_draw = 10;
  int world_size = 1;
  int stage = 3;
  std::string adapter = "deepspeed";
  std::string deepspeed_tree;
  std::string disable;
  double inert_fraction = -1;  // < 0: the suite's default
  double scenario_timeout = 120;
  int batch = 50;
  double shrink_seconds = 300;
  bool no_shrink = false;
};

// The campaign's command line; `self` is this program, which draws the scenarios.
std::vector<std::string> campaign_command(const CampaignOptions& options, const std::string& self);

// Replaces this process with the Python campaign (exit codes are its own: 0 no untriaged root
// cause, 1 one, 2 bad usage, 3 it failed, 130 interrupted). Returns only when --python does not
// run, with exit code 2. Throws zero3::UsageError for bad options.
int run_campaign(const CampaignOptions& options);

// `zerocheck upstream merge`: the campaign folders of a campaign's shards combined into one
// (zerocheck_ds/suite/campaign_merge.py).
struct MergeOptions {
  std::string python = "python3";
  std::string out_dir;
  std::vector<std::string> folders;  // the shards' campaign folders
};

// The merge's command line (`python -m zerocheck_ds merge ...`).
std::vector<std::string> merge_command(const MergeOptions& options);

// Replaces this process with the Python merge (exit codes are its own: 0 no untriaged root cause,
// 1 one, 2 bad usage, 3 it failed). Returns only when --python does not run, with exit code 2.
// Throws zero3::UsageError when the runner package is missing.
int run_merge(const MergeOptions& options);

// Exports when no scenarios are given, then replaces this process with the supervisor (so
// Ctrl-C and exit codes are the supervisor's own). Returns only on failure, with exit code 2
// after printing why. Throws zero3::UsageError for bad options.
int run_upstream(const UpstreamOptions& options);

}  // namespace zerocheck
