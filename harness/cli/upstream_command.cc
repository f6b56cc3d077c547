// `zerocheck export` and `zerocheck upstream`: zerocheck's scenarios against upstream DeepSpeed.
#include "engine/errors.h"
#include "harness/cli/command.h"
#include "harness/tools/export.h"
#include "harness/tools/upstream.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace zerocheck::cli {

void register_export_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<ExportOptions>();
  command.add_option("--cases", options->cases, "random scenarios on top of the dictionary and seed ones")
      ->check(CLI::Range(0, 100000));
  command.add_option("--seed", options->seed, "seed of the random scenarios");
  command.add_option("--first", options->first,
                     "index of the first random scenario (random-<first>...; draw k is the same whatever --first)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  command.add_flag("--random-only", options->random_only, "only the random scenarios (no dictionary or named ones)");
  command.add_option("--world", options->world_size, "world size written into every scenario")->check(CLI::Range(1, 8));
  command.add_option("--out", options->out_dir, "where the scenarios and manifest.json go")->required();
  command.callback([options, &exit_code] {
    const auto manifest = export_scenarios(*options);
    const auto& coverage = manifest["coverage"];
    fmt::print("zerocheck export: {} scenarios in {}\n", manifest["scenarios"].size(), options->out_dir);
    fmt::print("dictionary names: {}; missing on modules: {}; missing on parameters: {}\n",
               coverage["dictionary_names"].get<int>(), coverage["names_on_modules_missing"].size(),
               coverage["names_on_parameters_missing"].size());
    fmt::print("repeated initialize: {} with the same optimizer, {} with a fresh one\n",
               coverage["repeated_initialize_same_optimizer"].get<int>(),
               coverage["repeated_initialize_fresh_optimizer"].get<int>());
    exit_code = kExitOk;
  });
}

namespace {

void register_bisect_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<BisectOptions>();
  command.add_option("--python", options->python, "the Python that has torch")->required();
  command.add_option("--repo", options->repo, "a local DeepSpeed git checkout (its top folder)")
      ->required()
      ->check(CLI::ExistingDirectory);
  command.add_option("--good", options->good, "a revision where the script does not reproduce")->required();
  command.add_option("--bad", options->bad, "a later revision where it reproduces")->required();
  command.add_option("--repro", options->repro, "a repro script (OUT/repro/*.py)")
      ->required()
      ->check(CLI::ExistingFile);
  command.add_option("--find", options->find,
                     "bad: the first commit that reproduces; fix: the first that no longer does "
                     "(then --bad is the older end)")
      ->check(CLI::IsMember({"bad", "fix"}));
  command.add_option("--world", options->world_size, "ranks to run the script on")->check(CLI::Range(1, 8));
  command.add_option("--shims", options->shims,
                     "a folder put on PYTHONPATH after the checkout (../shared/deepspeed/shims)")
      ->check(CLI::ExistingDirectory);
  command.add_option("--timeout", options->timeout, "seconds per commit")->check(CLI::Range(1.0, 86400.0));
  command.add_option("--out", options->out, "also write the result here (JSON)");
  command.add_flag("--json", options->json, "print only the result, as JSON");
  command.callback([options, &exit_code] { exit_code = run_bisect(*options); });
}

void register_campaign_command(CLI::App& command, int& exit_code) {
  auto o = std::make_shared<CampaignOptions>();
  command.add_option("--python", o->python, "the Python that has torch and deepspeed")->required();
  command.add_option("--out", o->out_dir, "the campaign's folder (its campaign.json is resumed)")->required();
  command.add_option("--minutes", o->minutes, "how long to draw and replay")->required()->check(CLI::Range(0.001, 1e6));
  command.add_option("--seed", o->seed, "seed of the draw");
  command.add_option("--shard", o->shard, "I/N: this campaign is shard I of N; the shards never repeat a scenario");
  command.add_option("--per-draw", o->per_draw, "scenarios drawn at a time")->check(CLI::Range(1, 1000));
  command.add_option("--world", o->world_size, "ranks (processes on loopback)")->check(CLI::Range(1, 8));
  command.add_option("--stage", o->stage, "the ZeRO stage to replay the scenarios with")->check(CLI::Range(1, 3));
  command.add_option("--adapter", o->adapter, "deepspeed, or passthrough/faulty to check the campaign")
      ->check(CLI::IsMember({"deepspeed", "passthrough", "faulty"}));
  command.add_option("--deepspeed-tree", o->deepspeed_tree, "a DeepSpeed source tree instead of the installed one")
      ->check(CLI::ExistingDirectory);
  command.add_option("--disable", o->disable, "invariants not to check, of I3, I4, I6, I9, I10");
  command.add_option("--inert-fraction", o->inert_fraction, "the share of scenarios I10 replays again")
      ->check(CLI::Range(0.0, 1.0));
  command.add_option("--scenario-timeout", o->scenario_timeout, "seconds before a scenario is a hang")
      ->check(CLI::Range(1.0, 86400.0));
  command.add_option("--batch", o->batch, "scenarios per start of the ranks")->check(CLI::Range(1, 100000));
  command.add_option("--shrink-seconds", o->shrink_seconds, "time budget per root cause's shrinking at the end")
      ->check(CLI::Range(1.0, 86400.0));
  command.add_flag("--no-shrink", o->no_shrink, "do not replay, shrink and write up the root causes at the end");
  command.callback([o, &exit_code] { exit_code = run_campaign(*o); });
}

void register_merge_command(CLI::App& command, int& exit_code) {
  auto o = std::make_shared<MergeOptions>();
  command.add_option("--python", o->python, "the Python that has torch")->required();
  command.add_option("--out", o->out_dir, "the merged folder (new, empty or an earlier merge)")->required();
  command.add_option("folders", o->folders, "the shards' campaign folders")->required()->check(CLI::ExistingDirectory);
  command.callback([o, &exit_code] { exit_code = run_merge(*o); });
}

}  // namespace

void register_upstream_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<UpstreamOptions>();
  register_bisect_command(
      *command.add_subcommand("bisect", "the first commit of a DeepSpeed git checkout where a repro script "
                                        "reproduces (--find fix: where it stops)"),
      exit_code);
  register_campaign_command(
      *command.add_subcommand("campaign", "draw scenarios and replay them on DeepSpeed for --minutes: root "
                                          "causes with their time to find, resumable, shardable"),
      exit_code);
  register_merge_command(
      *command.add_subcommand("merge", "the campaign folders of a campaign's shards in one: each root cause once, "
                                       "with the time to find of the shard that found it first"),
      exit_code);
  // Required unless the command is a subcommand (which has its own): checked in the callback.
  CLI::Option* python =
      command.add_option("--python", options->python, "the Python that has torch (and deepspeed)");
  command.add_option("--cases", options->cases, "random scenarios on top of the dictionary and seed ones")
      ->check(CLI::Range(0, 100000));
  command.add_option("--world", options->world_size, "ranks (processes on loopback)")->check(CLI::Range(1, 8));
  command.add_option("--seed", options->seed, "seed of the random scenarios");
  command.add_option("--stage", options->stage,
                     "the ZeRO stage to replay the scenarios with (they stay stage 3; default 3)")
      ->check(CLI::Range(1, 3));
  command.add_option("--disable", options->disable,
                     "invariants not to check, of I3, I4, I6, I9, I10 (the dense twin, the shard exchange, checkpoint "
                     "reads, the knobs that promise not to change the numbers)");
  command.add_option("--inert-fraction", options->inert_fraction,
                     "the share of scenarios I10 replays again with the inert knobs drawn anew (default: the suite's own)")
      ->check(CLI::Range(0.0, 1.0));
  command.add_flag("--ablate", options->ablate,
                   "replay each scenario again with each of I3, I4, I6, I9 off in turn: which scenarios only it catches");
  command.add_flag("--keep-checkpoints", options->keep_checkpoints,
                   "keep each scenario's checkpoints in OUT/checkpoints/<scenario> (default: measured, then removed)");
  command.add_flag("--reshard", options->reshard,
                   "resume each load with a world_size on a pool of that many ranks from a universal checkpoint (I6)");
  command.add_option("--out", options->out_dir, "where scenarios, verdicts, logs and report.md go");
  command.add_option("--scenarios", options->scenarios,
                     "replay these scenario files or folders instead of exporting new ones")
      ->check(CLI::ExistingPath);
  command.add_option("--deepspeed-tree", options->deepspeed_tree,
                     "a DeepSpeed source tree (e.g. ../shared/deepspeed/v0.14.5) instead of the installed one")
      ->check(CLI::ExistingDirectory);
  command.add_option("--baseline", options->baseline,
                     "an earlier --out: print fixed/new/unchanged signatures, exit 1 only for new ones")
      ->check(CLI::ExistingDirectory);
  command.add_flag("--shrink", options->shrink, "shrink one scenario per signature, write repro/<signature>.py");
  command.add_option("--shrink-seconds", options->shrink_seconds, "time budget per signature")
      ->check(CLI::Range(1.0, 86400.0));
  command.add_option("--scenario-timeout", options->scenario_timeout, "seconds before a scenario is a hang")
      ->check(CLI::Range(1.0, 86400.0));
  command.add_option("--batch", options->batch, "scenarios per start of the ranks (1: one launch each)")
      ->check(CLI::Range(1, 100000));
  command.add_option("--adapter", options->adapter, "deepspeed, or passthrough/faulty to check the runner")
      ->check(CLI::IsMember({"deepspeed", "passthrough", "faulty"}));
  command.add_flag("--json", options->json, "print summary.json instead of the text summary");
  command.callback([options, python, &command, &exit_code] {
    for (const char* own : {"bisect", "campaign", "merge"})
      if (command.got_subcommand(own)) return;
    if (python->count() == 0) throw CLI::RequiredError("--python");
    exit_code = run_upstream(*options);
  });
}

}  // namespace zerocheck::cli
