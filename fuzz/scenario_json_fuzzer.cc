// libFuzzer entry: any bytes -> parse_scenario; only ScenarioError may come out, and a parsed
// scenario survives write -> read -> write unchanged (fuzz/scenario_json_check.h).
#include "fuzz/scenario_json_check.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto check = zerocheck::fuzz::check_scenario_json({reinterpret_cast<const char*>(data), size});
  if (check.finding) zerocheck::fuzz::report_and_abort(*check.finding);
  return 0;
}
