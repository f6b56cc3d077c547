// libFuzzer entry: bytes -> Scenario (the whole language) -> the interpreter on LocalComm ranks,
// oracles I1..I9 (fuzz/scenario_target.h; environment: fuzz/README.md), with the choice-level
// mutator (fuzz/choice_mutator.h) beside libFuzzer's byte mutations.
#include "engine/errors.h"
#include "fuzz/choice_mutator.h"
#include "fuzz/scenario_target.h"

#include <cstdio>
#include <cstdlib>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {
bool g_choice_mutator = true;  // as start_fuzzing's environment says
zerocheck::DecodeLimits g_limits;  // the target's, as start_fuzzing read them
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace zerocheck::fuzz;
  start_fuzzing(scenario_ops_target());
  try {
    g_choice_mutator = choice_mutator_from_environment();
    g_limits = limits_from_environment(scenario_ops_target());
  } catch (const zero3::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::abort();
  }
  std::fprintf(stderr, "zerocheck-fuzz: choice-level mutator %s (ZEROCHECK_CHOICE_MUTATOR)\n",
               g_choice_mutator ? "on" : "off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return zerocheck::fuzz::fuzz_one_input(data, size);
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  if (!g_choice_mutator) return LLVMFuzzerMutate(data, size, max_size);
  return zerocheck::fuzz::custom_mutate(data, size, max_size, seed, g_limits, LLVMFuzzerMutate);
}

// Off: 0, so libFuzzer picks another mutation, and its own crossover runs inside LLVMFuzzerMutate.
extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* a, size_t a_size, const uint8_t* b, size_t b_size,
                                            uint8_t* out, size_t max_out_size, unsigned int seed) {
  if (!g_choice_mutator) return 0;
  return zerocheck::fuzz::custom_cross_over(a, a_size, b, b_size, out, max_out_size, seed, g_limits);
}
