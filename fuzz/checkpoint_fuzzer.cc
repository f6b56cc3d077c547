// libFuzzer entry: any bytes -> a checkpoint bundle -> load into a fixed small model; only
// CheckpointError may come out, and a refused load changes nothing (fuzz/checkpoint_check.h).
#include "fuzz/checkpoint_check.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto check = zerocheck::fuzz::check_checkpoint({reinterpret_cast<const char*>(data), size});
  if (check.finding) zerocheck::fuzz::report_and_abort(*check.finding);
  return 0;
}
