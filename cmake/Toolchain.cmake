# Compiler launcher, linker and flags: ccache when present, lld when the compiler accepts it.
find_program(EDB_CCACHE ccache)
if(EDB_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${EDB_CCACHE})
endif()

include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=lld" EDB_HAVE_LLD)
if(EDB_HAVE_LLD)
  add_link_options(-fuse-ld=lld)
endif()

add_compile_options(-Wall -Wextra -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-restrict)  # GCC 12 false positives in std::string (GCC bug 105329)
  # GCC 12's AVX-512 intrinsics initialise with `__Y = __Y`, flagged through Eigen (GCC bug 105593).
  add_compile_options(-Wno-maybe-uninitialized)
endif()
if(EDB_NATIVE)
  add_compile_options(-march=native)
endif()
