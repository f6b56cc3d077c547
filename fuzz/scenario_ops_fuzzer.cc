// libFuzzer entry: bytes -> Scenario (the whole language) -> the interpreter on LocalComm ranks,
// oracles I1..I9 (fuzz/scenario_target.h; environment: fuzz/README.md).
#include "fuzz/scenario_target.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zerocheck::fuzz::start_fuzzing(zerocheck::fuzz::scenario_ops_target());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return zerocheck::fuzz::fuzz_one_input(data, size);
}
