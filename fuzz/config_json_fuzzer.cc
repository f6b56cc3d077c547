// libFuzzer entry: any bytes -> zero3::Config::parse; only ConfigError may come out, and a
// parsed config survives its JSON round trip (fuzz/config_json_check.h).
#include "fuzz/config_json_check.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto check = zerocheck::fuzz::check_config_json({reinterpret_cast<const char*>(data), size});
  if (check.finding) zerocheck::fuzz::report_and_abort(*check.finding);
  return 0;
}
