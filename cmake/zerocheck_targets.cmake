# One helper per kind of target, so every library and test is declared the same way.

# Every LibTorch-heavy target reuses one precompiled header: LibTorch's headers dominate the
# 2-core build, and parsing them once instead of per file keeps CI well under its budget.
set(ZEROCHECK_PCH_TARGET zerocheck_pch)

# zerocheck_library(NAME SOURCES ... DEPS ...)
function(zerocheck_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_precompile_headers(${name} REUSE_FROM ${ZEROCHECK_PCH_TARGET})
endfunction()

# zerocheck_test(NAME SOURCES ... DEPS ... LABELS ... [TIMEOUT seconds] [ENVIRONMENT "K=V"...] [NO_PCH])
# A GoogleTest binary; every test case becomes its own ctest entry with the labels and timeout.
# NO_PCH: for tests that do not touch LibTorch (e.g. ones that only run the CLI).
function(zerocheck_test name)
  cmake_parse_arguments(ARG "NO_PCH" "TIMEOUT" "SOURCES;DEPS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(NOT ARG_NO_PCH)
    target_precompile_headers(${name} REUSE_FROM ${ZEROCHECK_PCH_TARGET})
  endif()
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${ARG_ENVIRONMENT}"
    DISCOVERY_TIMEOUT 60)
endfunction()
