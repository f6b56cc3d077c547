#include "fuzz/config_json_check.h"

#include "engine/config.h"
#include "engine/errors.h"

#include <nlohmann/json.hpp>

namespace zerocheck::fuzz {

ParseCheck check_config_json(std::string_view text) {
  ParseCheck check;
  zero3::Config config;
  try {
    config = zero3::Config::parse(text);
  } catch (const zero3::ConfigError& e) {
    check.refusal = e.what();  // the documented refusal
    return check;
  } catch (const std::exception& e) {
    check.finding = Finding{"config_json: Config::parse threw " + exception_type(e) + " instead of ConfigError",
                            std::string("what(): ") + e.what()};
    return check;
  } catch (...) {
    check.finding = Finding{"config_json: Config::parse threw a non-std exception", ""};
    return check;
  }
  check.parsed = true;
  try {
    const nlohmann::json written = config.to_json();
    const nlohmann::json again = zero3::Config::from_json(written).to_json();
    if (again != written)
      check.finding = Finding{"config_json: to_json -> from_json -> to_json changed the config",
                              "first:  " + written.dump() + "\nsecond: " + again.dump() +
                                  "\npatch:  " + nlohmann::json::diff(written, again).dump()};
  } catch (const std::exception& e) {
    check.finding = Finding{"config_json: a parsed config's JSON form does not read back (" + exception_type(e) + ")",
                            std::string("what(): ") + e.what()};
  }
  return check;
}

}  // namespace zerocheck::fuzz
