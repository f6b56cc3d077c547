// Whether this process's LibTorch computes fp16 on CPU, decided by running it, not by its version:
// LibTorch 1.13 (Debian 12) has no fp16 matmul on CPU ("addmm_impl_cpu_" not implemented for
// 'Half'), LibTorch 2.6 (Debian 13) has. The engine refuses fp16 where the probe fails
// (precision_refusal), and the harness reports an fp16 scenario there as not runnable.
//
// Thread-safety: the probe runs once per process (a function-local static), then only reads.
#pragma once

#include <string>

namespace zero3 {

// Returns "" when a tiny fp16 Linear (addmm) runs forward and backward on CPU here, else the
// message LibTorch threw for it (backtrace dropped).
const std::string& cpu_fp16_refusal();

// Whether cpu_fp16_refusal() is "".
inline bool cpu_fp16_available() { return cpu_fp16_refusal().empty(); }

}  // namespace zero3
