// I5 and I7 at initialize: the engine raised exactly what the model predicted, and a refused
// repeat changed nothing. A policy the model cannot evaluate is a placement promise (I2).
#include "harness/oracles/oracles.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

namespace zerocheck::oracles {

Result initialize_outcome(const std::optional<std::string>& predicted, bool created, const std::string& raised,
                          const std::string& raised_message, const std::string& target) {
  using zero3::kind_name;
  // The kind alone says which error; its message says about which module and value (the reader's
  // first question).
  const std::string saying = raised_message.empty() ? "" : ": " + raised_message;
  const std::string repeat = kind_name<zero3::AlreadyInitialized>(), placement = kind_name<zero3::PlacementError>();
  if (!predicted) {
    if (created) return std::nullopt;
    return violation(raised == placement ? "I2" : "I7", target, "", "an engine", raised,
                     "initialize refused valid input" + saying);
  }
  const char* invariant = *predicted == repeat ? "I5" : *predicted == placement ? "I2" : "I7";
  if (created)
    return violation(invariant, target, "", *predicted, "accepted",
                     *predicted == repeat ? "a repeated initialize of a managed model or optimizer was accepted"
                                                        : "initialize accepted input it must refuse");
  if (raised != *predicted)
    return violation(invariant, target, "", *predicted, raised, "initialize refused with an unexpected error" + saying);
  return std::nullopt;
}

Result refused_changed_nothing(const std::vector<at::Tensor>& masters_before,
                               const std::vector<ObservedParam>& observed_after) {
  if (masters_before.size() != observed_after.size())
    return violation("I5", "", "", std::to_string(masters_before.size()) + " parameters",
                     std::to_string(observed_after.size()), "a refused initialize changed the live engine's parameters");
  for (size_t i = 0; i < masters_before.size(); ++i)
    if (!same_bits(observed_after[i].master, masters_before[i]))
      return violation("I5", "", observed_after[i].path, "unchanged shard", "changed",
                       "a refused initialize changed the live engine's shard");
  return std::nullopt;
}

std::vector<ParameterSnapshot> snapshot_parameters(const std::shared_ptr<zero3::Module>& root) {
  std::vector<ParameterSnapshot> out;
  for (const auto& [path, p] : unique_named_parameters(root))
    out.push_back({path, p.detach().clone(), p.requires_grad()});
  return out;
}

Result model_unchanged(const std::vector<ParameterSnapshot>& before, const std::vector<ParameterSnapshot>& after,
                       const std::string& target) {
  if (before.size() != after.size())
    return violation("I5", target, "", std::to_string(before.size()) + " parameters", std::to_string(after.size()),
                     "a refused initialize changed which parameters the model has");
  for (size_t i = 0; i < before.size(); ++i) {
    const ParameterSnapshot& a = before[i];
    const ParameterSnapshot& b = after[i];
    if (a.path != b.path)
      return violation("I5", target, a.path, a.path, b.path, "a refused initialize renamed a parameter");
    if (a.requires_grad != b.requires_grad)
      return violation("I5", target, a.path, a.requires_grad ? "requires_grad" : "frozen",
                       b.requires_grad ? "requires_grad" : "frozen", "a refused initialize changed requires_grad");
    if (a.value.sizes() != b.value.sizes() || !same_bits(a.value, b.value))
      return violation("I5", target, a.path, "the value before, shape " + c10::str(a.value.sizes()),
                       "shape " + c10::str(b.value.sizes()) +
                           (a.value.sizes() == b.value.sizes() ? ", " + difference(a.value, b.value) : ""),
                       "a refused initialize left the parameter other than it was");
  }
  return std::nullopt;
}

}  // namespace zerocheck::oracles
