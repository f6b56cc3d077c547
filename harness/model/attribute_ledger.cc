// The attribute ledger: deep copies, so the expectation never shares storage with the live model.
#include "harness/model/model.h"

#include <ATen/ATen.h>

namespace zerocheck::model {

zero3::AttrValue deep_copy(const zero3::AttrValue& value) {
  return std::visit(
      [&](const auto& v) -> zero3::AttrValue {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, at::Tensor>) {
          return zero3::AttrValue(v.defined() ? v.detach().clone() : v);
        } else if constexpr (std::is_same_v<T, zero3::AttrValue::List>) {
          zero3::AttrValue::List copies;
          for (const auto& item : v) copies.push_back(deep_copy(item));
          return zero3::AttrValue(std::move(copies));
        } else {
          return value;
        }
      },
      value.storage());
}

zero3::AttrDict deep_copy(const zero3::AttrDict& dict) {
  zero3::AttrDict out;
  for (const auto& entry : dict.entries()) out.set(entry.name, deep_copy(entry.value), entry.owner);
  return out;
}

AttributeLedger::AttributeLedger(const std::shared_ptr<zero3::Module>& root) {
  for (const auto& [path, module] : zero3::unique_modules(root)) {
    entries_.push_back({path, "", module.get(), deep_copy(module->attrs())});
    for (const auto& item : module->own_parameters()) {
      const zero3::AttrDict* attrs = module->find_param_attrs(item.first);
      entries_.push_back({path, item.first, module.get(), attrs ? deep_copy(*attrs) : zero3::AttrDict()});
    }
  }
}

AttributeLedger::Entry* AttributeLedger::find(const std::string& module_path, const std::string& param) {
  for (auto& entry : entries_)
    if (entry.module_path == module_path && entry.param == param) return &entry;
  return nullptr;
}

}  // namespace zerocheck::model
