// The one place where LibTorch 1.13 (Debian) and LibTorch 2.x (the GPU machine's pip torch)
// differ for zerocheck. Everything else uses APIs both have.
#pragma once

#include <ATen/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace zero3::compat {

// LibTorch 1.13 keys optimizer state by the TensorImpl address printed as a string; 2.x keys it
// by the address itself. `Key` is the map's key type, so each version picks its branch at
// compile time.
template <class Key>
Key optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;  // what 1.13's c10::guts::to_string does
    out << param.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace zero3::compat
