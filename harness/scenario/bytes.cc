#include "harness/scenario/bytes.h"

#include "harness/scenario/draw/fdp_chooser.h"

namespace zerocheck {

Scenario scenario_from_bytes(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  FdpChooser chooser(data, size);
  return draw_scenario(chooser, limits);
}

}  // namespace zerocheck
