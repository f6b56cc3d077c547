// libFuzzer entry: bytes -> Scenario -> the interpreter on LocalComm ranks, oracles I1..I8.
// ZEROCHECK_ENGINE picks the engine (a catalogue fault, default the reference) and
// ZEROCHECK_FUZZ_WORLD / _MAX_NODES / _MAX_OPS narrow the decoded scenarios; a violation
// writes the scenario JSON (see violation_scenario_path), prints the violation and its
// `zerocheck replay` command, and aborts.
#include "fuzz/scenario_ops_check.h"

#include "engine/errors.h"

#include <cstdio>
#include <cstdlib>

namespace {
zero3::Fault g_engine = zero3::Fault::none;
zerocheck::DecodeLimits g_limits;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    g_engine = zerocheck::fuzz::engine_from_environment();
    g_limits = zerocheck::fuzz::limits_from_environment();
  } catch (const zero3::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::abort();
  }
  std::fprintf(stderr, "zerocheck-fuzz: scenario_ops against engine %s (world %s, at most %zu nodes and %zu operations)\n",
               std::string(zero3::fault_name(g_engine)).c_str(),
               g_limits.world > 0 ? std::to_string(g_limits.world).c_str() : "1..4", g_limits.max_nodes, g_limits.max_ops);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerocheck::fuzz;
  OpsRun run;
  try {
    run = run_scenario_bytes(data, size, g_engine, g_limits);
  } catch (const std::exception& e) {
    report_and_abort({"scenario_ops: decoding or running threw " + exception_type(e), e.what()});
  }
  if (run.verdict.ok()) return 0;
  const std::string path = violation_scenario_path(data, size);
  try {
    write_scenario(run.scenario, path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zerocheck-fuzz: %s\n", e.what());
  }
  report_and_abort(*finding_of(run, g_engine, path));
}
