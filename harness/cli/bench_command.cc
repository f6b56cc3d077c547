// `zerocheck bench`: the cost of one fuzzer execution (harness/tools/bench.h), as JSON.
#include "harness/tools/bench.h"
#include "harness/cli/command.h"

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace zerocheck::cli {
namespace {

// The names are draw_scenario's to_string, so the option spells a profile as everything else does.
std::map<std::string, DrawProfile> profiles_by_name() {
  std::map<std::string, DrawProfile> names;
  for (const DrawProfile p : {DrawProfile::training, DrawProfile::attributes}) names.emplace(to_string(p), p);
  return names;
}

}  // namespace

void register_bench_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<BenchOptions>();
  struct Narrowing {
    std::string profile = to_string(DrawProfile::training);
    std::optional<int> world;
    std::optional<size_t> max_nodes, max_ops;
  };
  auto narrowing = std::make_shared<Narrowing>();
  command.add_option("--inputs", options->inputs, "random inputs to decode and run")->check(CLI::Range(1, 1000000));
  command.add_option("--seed", options->seed, "seed of the random inputs");
  command.add_option("--profile", narrowing->profile,
                     "what the inputs decode into and how they run: training (fuzz_scenario_ops) or attributes "
                     "(fuzz_attrs)")
      ->check(CLI::IsMember(profiles_by_name()));
  // Ranges are checked by DecodeLimits::validate (a UsageError, exit 2), the one place they live.
  command.add_option("--world", narrowing->world, "fixed world size (0: decoded from the input)");
  command.add_option("--max-nodes", narrowing->max_nodes, "tree nodes at most (default: the profile's widest)");
  command.add_option("--max-ops", narrowing->max_ops, "operations at most");
  command.add_option("--corpus", options->corpus_name,
                     "a fuzzer's corpus folder: its files are the inputs (instead of --inputs random ones)");
  command.callback([options, narrowing, &exit_code] {
    // The profile's widest limits first, then what the user narrowed, in any order on the line.
    options->limits = DecodeLimits(profiles_by_name().at(narrowing->profile));
    if (narrowing->world) options->limits.world = *narrowing->world;
    if (narrowing->max_nodes) options->limits.max_nodes = *narrowing->max_nodes;
    if (narrowing->max_ops) options->limits.max_ops = *narrowing->max_ops;
    if (!options->corpus_name.empty()) options->corpus = read_corpus(options->corpus_name);
    const BenchReport report = run_bench(*options);
    std::cout << report.to_json(*options).dump() << std::endl;
    // The reference engine must hold on every input; a violation here is a finding.
    exit_code = report.violations == 0 ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
