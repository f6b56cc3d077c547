#include "harness/fault_under_test.h"

#include "engine/errors.h"

#include <cstdlib>
#include <string>

namespace zerocheck {

zero3::Fault fault_under_test() {
  const char* name = std::getenv("ZEROCHECK_FAULT");
  if (name == nullptr || *name == '\0') return zero3::Fault::none;
  auto fault = zero3::fault_by_name(name);
  if (!fault)
    throw zero3::UsageError(std::string("ZEROCHECK_FAULT='") + name +
                            "' is not in the catalogue (" + zero3::engine_names() + ")");
  return *fault;
}

}  // namespace zerocheck
