// libFuzzer entry: bytes -> Scenario (the attributes profile: big trees, wide worlds, nothing
// trains) -> the interpreter on LocalComm ranks, oracles I1, I2, I5, I7 (fuzz/scenario_target.h).
#include "fuzz/scenario_target.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zerocheck::fuzz::start_fuzzing(zerocheck::fuzz::attrs_target());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return zerocheck::fuzz::fuzz_one_input(data, size);
}
