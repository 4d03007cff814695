# `cmake --install BUILD --prefix P`: libfinegemm, its header, the finegemm CLI, and a CMake package, so that a
# project writes
#   find_package(finegemm REQUIRED)
#   target_link_libraries(app PRIVATE finegemm::finegemm)
# with -DCMAKE_PREFIX_PATH=P. tests/install checks this from a separate consumer project.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FINEGEMM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/finegemm" CACHE STRING
    "Where the finegemm CMake package is installed, relative to the prefix")

# The installed libfinegemm keeps the directories of what it links outside the system paths (NVRTC of the toolkit it
# was built against), as the build tree's copy does.
set_target_properties(finegemm PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS finegemm EXPORT finegemmTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/finegemm/finegemm.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/finegemm)

if(TARGET finegemm_cli)
  # bin/finegemm finds lib/libfinegemm.so.0 relative to itself, and cudart and cuBLASLt where it was linked with them.
  file(RELATIVE_PATH _fg_bin_to_lib "/${CMAKE_INSTALL_BINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
  set_property(TARGET finegemm_cli APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${_fg_bin_to_lib}")
  set_target_properties(finegemm_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS finegemm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # The CLI's default shape lists (bench, warmup and plan without --shapes), found from bin/ as share/finegemm/data.
  install(DIRECTORY data/shapes DESTINATION ${CMAKE_INSTALL_DATADIR}/finegemm/data)
endif()

# The package: the imported target finegemm::finegemm. libfinegemm is a shared library whose dependencies (NVRTC,
# the threads library) are all private, so the package makes its consumers find nothing else.
install(EXPORT finegemmTargets NAMESPACE finegemm:: DESTINATION ${FINEGEMM_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/finegemmConfig.cmake.in "${CMAKE_BINARY_DIR}/finegemmConfig.cmake"
  INSTALL_DESTINATION ${FINEGEMM_INSTALL_CMAKEDIR})
# NOTE: before 1.0 a minor version may change the API: a request for 0.1 accepts 0.1.x only.
write_basic_package_version_file("${CMAKE_BINARY_DIR}/finegemmConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/finegemmConfig.cmake" "${CMAKE_BINARY_DIR}/finegemmConfigVersion.cmake"
  DESTINATION ${FINEGEMM_INSTALL_CMAKEDIR})
