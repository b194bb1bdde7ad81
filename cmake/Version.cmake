# One version: project(VERSION) must match include/edbatch/version.h, which consumers compile against.
file(STRINGS "${PROJECT_SOURCE_DIR}/include/edbatch/version.h" edb_version_lines
  REGEX "^#define EDBATCH_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
set(edb_header_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "EDBATCH_VERSION_${part} ([0-9]+)" _ "${edb_version_lines}")
  list(APPEND edb_header_version "${CMAKE_MATCH_1}")
endforeach()
list(JOIN edb_header_version "." edb_header_version)
if(NOT edb_header_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/edbatch/version.h says ${edb_header_version}, "
    "CMakeLists.txt project(VERSION) says ${PROJECT_VERSION}: change both together")
endif()
file(STRINGS "${PROJECT_SOURCE_DIR}/include/edbatch/version.h" edb_version_string
  REGEX "^#define EDBATCH_VERSION_STRING \"${PROJECT_VERSION}\"$")
if(NOT edb_version_string)
  message(FATAL_ERROR "include/edbatch/version.h: EDBATCH_VERSION_STRING is not \"${PROJECT_VERSION}\"")
endif()
