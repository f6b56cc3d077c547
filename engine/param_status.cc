#include "engine/param_status.h"

#include "engine/errors.h"

#include <string>

namespace zero3 {

const char* to_string(ParamStatus status) {
  switch (status) {
    case ParamStatus::NotAvailable: return "NOT_AVAILABLE";
    case ParamStatus::Inflight: return "INFLIGHT";
    case ParamStatus::Available: return "AVAILABLE";
  }
  return "?";
}

void transition(ParamStatus& status, ParamStatus to, std::string_view param_path) {
  const bool legal = (status == ParamStatus::NotAvailable && to == ParamStatus::Inflight) ||
                     (status == ParamStatus::Inflight && to == ParamStatus::Available) ||
                     (status == ParamStatus::Available && to == ParamStatus::NotAvailable);
  if (!legal)
    throw IllegalTransition(std::string(param_path) + ": illegal parameter transition " +
                            to_string(status) + " -> " + to_string(to));
  status = to;
}

}  // namespace zero3
