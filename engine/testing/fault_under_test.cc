#include "engine/testing/fault_under_test.h"

#include "engine/errors.h"

#include <cstdlib>
#include <string>

namespace zerocheck {

zero3::Fault fault_under_test() {
  const char* name = std::getenv("ZEROCHECK_FAULT");
  if (name == nullptr || *name == '\0') return zero3::Fault::none;
  return zero3::engine_by_name(name, "ZEROCHECK_FAULT");
}

}  // namespace zerocheck
