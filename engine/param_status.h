// The lifecycle of a partitioned parameter's full data on one rank:
//   NotAvailable --gather--> Inflight --complete--> Available --release--> NotAvailable
// Any other move is a schedule bug and throws IllegalTransition naming the parameter.
#pragma once

#include <string_view>

namespace zero3 {

enum class ParamStatus { NotAvailable, Inflight, Available };

const char* to_string(ParamStatus status);

// Moves `status` to `to`. Throws IllegalTransition naming `param_path` when the move is illegal.
void transition(ParamStatus& status, ParamStatus to, std::string_view param_path);

}  // namespace zero3
