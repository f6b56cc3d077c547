# One helper per kind of target, so every library, test and executable is declared the same way.
#
# Each one is also recorded (folder, sources, dependencies) for the include check
# (ci/tests/include_layers.py, ctest `include_layers`): an #include may only follow a declared
# dependency, so a folder is a library boundary, not a label, and the DEPS below are the one
# statement of the layer order.

# Every LibTorch-heavy target reuses one precompiled header: LibTorch's headers dominate the
# 2-core build, and parsing them once instead of per file keeps CI well under its budget.
set(ZEROCHECK_PCH_TARGET zerocheck_pch)

# zerocheck_record(NAME KIND SOURCES... ) with DEPS in ARGN after the keyword DEPS.
function(zerocheck_record name kind)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  set(sources "")
  foreach(source IN LISTS ARG_SOURCES)
    get_filename_component(absolute "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    file(RELATIVE_PATH relative "${PROJECT_SOURCE_DIR}" "${absolute}")
    list(APPEND sources "${relative}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY ZEROCHECK_RECORDED_TARGETS ${name})
  set_property(GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_KIND "${kind}")
  set_property(GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_FOLDER "${folder}")
  set_property(GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_SOURCES "${sources}")
  set_property(GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_DEPS "${ARG_DEPS}")
endfunction()

# zerocheck_library(NAME SOURCES ... DEPS ...): a static library of one folder.
function(zerocheck_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_precompile_headers(${name} REUSE_FROM ${ZEROCHECK_PCH_TARGET})
  zerocheck_record(${name} library SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
endfunction()

# zerocheck_executable(NAME SOURCES ... DEPS ...): a program (the CLI, a generator).
function(zerocheck_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_precompile_headers(${name} REUSE_FROM ${ZEROCHECK_PCH_TARGET})
  zerocheck_record(${name} executable SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
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
  zerocheck_record(${name} test SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
endfunction()

# Writes every recorded target as JSON into `file` (called once, at the end of the top-level
# CMakeLists.txt, when all are recorded).
function(zerocheck_write_targets file)
  get_property(names GLOBAL PROPERTY ZEROCHECK_RECORDED_TARGETS)
  set(entries "")
  foreach(name IN LISTS names)
    get_property(kind GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_KIND)
    get_property(folder GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_FOLDER)
    get_property(sources GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_SOURCES)
    get_property(deps GLOBAL PROPERTY ZEROCHECK_TARGET_${name}_DEPS)
    set(entry "{}")
    string(JSON entry SET "${entry}" name "\"${name}\"")
    string(JSON entry SET "${entry}" kind "\"${kind}\"")
    string(JSON entry SET "${entry}" folder "\"${folder}\"")
    foreach(field sources deps)
      set(array "[]")
      set(i 0)
      foreach(item IN LISTS ${field})
        string(JSON array SET "${array}" ${i} "\"${item}\"")
        math(EXPR i "${i} + 1")
      endforeach()
      string(JSON entry SET "${entry}" ${field} "${array}")
    endforeach()
    list(APPEND entries "${entry}")
  endforeach()
  list(JOIN entries ",\n  " body)
  file(WRITE "${file}" "{\"targets\": [\n  ${body}\n]}\n")
endfunction()
