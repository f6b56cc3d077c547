// The fault a test run plants, from the environment: ZEROCHECK_FAULT=<catalogue name>.
//
// The engine's own tests create engines with this fault, so the kill check
// (engine/tests/fault_kill_test.cc) can run a named test once per fault and prove the test fails.
#pragma once

#include "engine/faults.h"

namespace zerocheck {

// Returns the fault named by ZEROCHECK_FAULT (Fault::none when unset or "reference").
// Throws zero3::UsageError for an unknown name, so a typo cannot pass as "no fault".
zero3::Fault fault_under_test();

}  // namespace zerocheck
