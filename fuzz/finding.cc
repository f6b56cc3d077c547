#include "fuzz/finding.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace zerocheck::fuzz {

void report_and_abort(const Finding& finding) {
  std::fprintf(stderr, "\n%s%s\n%s\n", kFindingMarker, finding.signature.c_str(), finding.details.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::abort();
}

std::string exception_type(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  return status == 0 && demangled ? demangled.get() : mangled;
}

}  // namespace zerocheck::fuzz
