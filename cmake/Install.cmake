# `cmake --install`: the library, the public headers, edb-run and edb-cache, the CMake package
# (edbatchConfig.cmake, its version file, target edbatch::edbatch) and edbatch.pc for pkg-config.
# A shared libedbatch carries LLVM privately; a static one needs edb_jit, LLVM and Threads at the
# consumer's link, which the package config finds and the .pc file lists in Libs.private.
include(CMakePackageConfigHelpers)

set(EDB_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/edbatch")
get_target_property(edb_library_type edbatch TYPE)
set(edb_install_targets edbatch)
if(edb_library_type STREQUAL "STATIC_LIBRARY")
  # The JIT's archive goes too; in a shared build its objects are inside libedbatch.so.
  set_target_properties(edb_jit PROPERTIES EXPORT_NAME edbatch_jit OUTPUT_NAME edbatch_jit)
  list(APPEND edb_install_targets edb_jit)
  set(EDB_STATIC ON)
else()
  set(EDB_STATIC OFF)
endif()

install(TARGETS ${edb_install_targets} EXPORT edbatchTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# distributed.h goes with edbatch_dist (dist/), which is not installed yet: a consumer would need
# the MPI it was built against.
install(DIRECTORY include/edbatch DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h"
  PATTERN "distributed.h" EXCLUDE)
install(TARGETS edb-run edb-cache RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT edbatchTargets NAMESPACE edbatch:: DESTINATION ${EDB_CMAKE_DIR})
configure_package_config_file(cmake/edbatchConfig.cmake.in
  "${PROJECT_BINARY_DIR}/edbatchConfig.cmake" INSTALL_DESTINATION ${EDB_CMAKE_DIR})
# Before 1.0 a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/edbatchConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/edbatchConfig.cmake" "${PROJECT_BINARY_DIR}/edbatchConfigVersion.cmake"
  DESTINATION ${EDB_CMAKE_DIR})

# pkg-config: paths relative to the .pc file's prefix, so an installed tree can be moved.
if(EDB_STATIC)
  set(EDB_PC_LIBS_PRIVATE "-ledbatch_jit -L${LLVM_LIBRARY_DIR} -lLLVM-${LLVM_VERSION_MAJOR} -pthread")
else()
  set(EDB_PC_LIBS_PRIVATE "")
endif()
file(RELATIVE_PATH EDB_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" EDB_PC_TO_PREFIX "${EDB_PC_TO_PREFIX}")
configure_file(cmake/edbatch.pc.in "${PROJECT_BINARY_DIR}/edbatch.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/edbatch.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
