// What a rank's failure says, for a report: an exception's message, without LibTorch's
// backtrace (its frame addresses differ from process to process, so two runs of one failure
// would read as two failures, and they bury the message a maintainer needs).
#pragma once

#include <exception>
#include <string>

namespace zerocheck {

std::string failure_text(const std::exception& e);

}  // namespace zerocheck
