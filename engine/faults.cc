#include "engine/faults.h"

#include "engine/errors.h"

namespace zero3 {

const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> catalogue = {
#define ZERO3_FAULT_INFO(id, name, invariant, killer, kill_text, doc) \
  {Fault::id, name, invariant, killer, kill_text, doc, false, std::string_view(name).substr(0, 5) == "fp16-"},
      ZERO3_FAULTS(ZERO3_FAULT_INFO)
#undef ZERO3_FAULT_INFO
#define ZERO3_DEEP_FAULT_INFO(id, name, invariant, killer, kill_text, doc) \
  {Fault::id, name, invariant, killer, kill_text, doc, true, std::string_view(name).substr(0, 5) == "fp16-"},
      ZERO3_DEEP_FAULTS(ZERO3_DEEP_FAULT_INFO)
#undef ZERO3_DEEP_FAULT_INFO
  };
  return catalogue;
}

std::string_view fault_name(Fault fault) {
  for (const auto& info : fault_catalogue())
    if (info.fault == fault) return info.name;
  return "reference";
}

std::optional<Fault> fault_by_name(std::string_view name) {
  if (name == "reference") return Fault::none;
  for (const auto& info : fault_catalogue())
    if (info.name == name) return info.fault;
  return std::nullopt;
}

Fault engine_by_name(std::string_view name, std::string_view given_as) {
  if (auto fault = fault_by_name(name)) return *fault;
  throw UsageError(std::string(given_as) + "='" + std::string(name) + "' is not an engine (expected one of: " +
                   engine_names() + ")");
}

std::string engine_names() {
  std::string out = "reference";
  for (const auto& info : fault_catalogue()) out += ", " + std::string(info.name);
  return out;
}

}  // namespace zero3
