# Installs a build tree into a fresh prefix and uses it as a user would: a separate project (consumer/) finds the
# finegemm CMake package there, builds and runs; the installed CLI runs; both load libfinegemm from the prefix.
# Registered in tests/CMakeLists.txt; every failed step stops the test with its output.
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DVERSION=... -DWITH_CLI=0|1
#         -DLIBDIR=lib -DBINDIR=bin -DINCLUDEDIR=include -P check.cmake
cmake_minimum_required(VERSION 3.24)
foreach(var BUILD_DIR WORK_DIR CONSUMER_DIR VERSION WITH_CLI LIBDIR BINDIR INCLUDEDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install check: -D${var}=... is missing")
  endif()
endforeach()

# run(OUT_VAR command...): the command's stdout and stderr, or a fatal error showing them.
function(run out_var)
  string(JOIN " " command ${ARGN})
  message(STATUS "install check: ${command}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install check: `${command}` failed (exit ${rc}):\n${output}")
  endif()
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()

# expect_match(TEXT REGEX WHAT)
function(expect_match text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "install check: ${what}: no match for '${regex}' in:\n${text}")
  endif()
endfunction()

# expect_resolved(BINARY): ldd finds every library BINARY needs; leaves ldd's output in ldd_output.
function(expect_resolved binary)
  run(ldd_output ldd "${binary}")
  if(ldd_output MATCHES "not found")
    message(FATAL_ERROR "install check: ${binary} has unresolved libraries:\n${ldd_output}")
  endif()
  set(ldd_output "${ldd_output}" PARENT_SCOPE)
endfunction()

# expect_loads_from_prefix(BINARY): as expect_resolved, and libfinegemm.so.0 is the prefix's copy.
function(expect_loads_from_prefix binary)
  expect_resolved("${binary}")
  if(NOT ldd_output MATCHES "libfinegemm\\.so\\.0 => ([^ \n]+)")
    message(FATAL_ERROR "install check: ${binary} does not load libfinegemm.so.0:\n${ldd_output}")
  endif()
  file(REAL_PATH "${CMAKE_MATCH_1}" loaded)
  file(REAL_PATH "${prefix}/${LIBDIR}/libfinegemm.so.0" expected)
  if(NOT loaded STREQUAL expected)
    message(FATAL_ERROR "install check: ${binary} loads ${loaded}, not the installed ${expected}:\n${ldd_output}")
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---- Install -------------------------------------------------------------------------------------------------
run(output "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(file "${INCLUDEDIR}/finegemm/finegemm.hpp" "${LIBDIR}/libfinegemm.so.0"
             "${LIBDIR}/cmake/finegemm/finegemmConfig.cmake" "${LIBDIR}/cmake/finegemm/finegemmConfigVersion.cmake"
             "${LIBDIR}/cmake/finegemm/finegemmTargets.cmake")
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "install check: ${file} is missing from the prefix ${prefix}")
  endif()
endforeach()
run(output readelf -d "${prefix}/${LIBDIR}/libfinegemm.so.0")
expect_match("${output}" "Library soname: \\[libfinegemm\\.so\\.0\\]" "SONAME of the installed library")

# ---- A separate project on the installed package -------------------------------------------------------------
set(consumer_build "${WORK_DIR}/consumer-build")
run(output "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${consumer_build}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run(output "${CMAKE_COMMAND}" --build "${consumer_build}")
run(output "${consumer_build}/consumer")
message(STATUS "install check: consumer output:\n${output}")
string(REPLACE "." "\\." version_regex "${VERSION}")
expect_match("${output}" "version ${version_regex}\n" "the consumer's version line")
expect_match("${output}" "config [^\n]+" "the consumer's config line")
expect_match("${output}" "rejected [^\n]*N must be a positive multiple of 8" "the consumer's rejected problem")
expect_loads_from_prefix("${consumer_build}/consumer")
expect_resolved("${prefix}/${LIBDIR}/libfinegemm.so.0")

# ---- The installed CLI ---------------------------------------------------------------------------------------
if(WITH_CLI)
  run(output "${prefix}/${BINDIR}/finegemm" --help)
  expect_match("${output}" "usage: finegemm" "finegemm --help")
  expect_loads_from_prefix("${prefix}/${BINDIR}/finegemm")
  # Its default shape list comes from the prefix (run from a directory that holds none): the seed shapes' plan.
  execute_process(COMMAND "${prefix}/${BINDIR}/finegemm" plan WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install check: `finegemm plan` from the prefix failed (exit ${rc}):\n${output}")
  endif()
  expect_match("${output}" "masked +4 +256 +7168 +2048 [|] BM=" "finegemm plan over the installed seed shapes")
else()
  message(STATUS "install check: the CLI is not built (FINEGEMM_BUILD_CLI=OFF): not checked")
endif()
message(STATUS "install check: passed (prefix ${prefix})")
