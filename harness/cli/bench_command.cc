// `zerocheck bench`: the cost of one fuzzer execution (harness/bench.h), as JSON.
#include "harness/bench.h"
#include "harness/cli/command.h"

#include <iostream>

namespace zerocheck::cli {

void register_bench_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<BenchOptions>();
  command.add_option("--inputs", options->inputs, "random inputs to decode and run")->check(CLI::Range(1, 1000000));
  command.add_option("--seed", options->seed, "seed of the random inputs");
  // Ranges are checked by DecodeLimits::validate (a UsageError, exit 2), the one place they live.
  command.add_option("--world", options->limits.world, "fixed world size (0: decoded from the input)");
  command.add_option("--max-nodes", options->limits.max_nodes, "tree nodes at most");
  command.add_option("--max-ops", options->limits.max_ops, "operations at most");
  command.callback([options, &exit_code] {
    const BenchReport report = run_bench(*options);
    std::cout << report.to_json(*options).dump() << std::endl;
    // The reference engine must hold on every input; a violation here is a finding.
    exit_code = report.violations == 0 ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
