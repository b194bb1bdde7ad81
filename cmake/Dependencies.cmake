# Third-party packages, all from Debian: LLVM 19 (pinned to its own CMake directory so another
# installed LLVM is never picked), Eigen 3.4, GoogleTest, nlohmann-json; CUDA headers optional.
# (LLVM's version file accepts only an exact major.minor, so the major is checked here.)
find_package(LLVM REQUIRED CONFIG
  PATHS /usr/lib/llvm-19/lib/cmake/llvm ${LLVM_DIR}
  NO_DEFAULT_PATH)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "edbatch needs LLVM 19, found ${LLVM_PACKAGE_VERSION} in ${LLVM_DIR}")
endif()
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")

find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(nlohmann_json 3.10 REQUIRED)
if(EDB_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(Threads REQUIRED)

# CUDA: headers only. libcuda and libnvrtc are loaded with dlopen at run time.
set(EDB_HAVE_CUDA_HEADERS OFF)
if(NOT EDB_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(EDB_HAVE_CUDA_HEADERS ON)
    message(STATUS "CUDA toolkit headers: ${CUDAToolkit_INCLUDE_DIRS}")
  elseif(EDB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EDB_CUDA=ON but no CUDA toolkit was found (set CUDAToolkit_ROOT)")
  else()
    message(STATUS "CUDA toolkit not found: building without GPU headers")
  endif()
endif()
