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

# edb_isa_sources(TARGET GENERIC AVX2 AVX512): sources of one piece of code built once per ISA
# (ir/isa.h), each with its own -march whatever EDB_NATIVE says (a later -march wins over
# -march=native) and with contracted `a * b + c` (one FMA where the ISA has it). Off x86 only the
# generic file is built, for the compiler's own target. Call it from the folder that lists the files.
function(edb_isa_sources target generic avx2 avx512)
  set(generic_flags -ffp-contract=fast)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    target_sources(${target} PRIVATE ${avx2} ${avx512})
    list(PREPEND generic_flags -march=x86-64 -mtune=generic)
    set_source_files_properties(${avx2} PROPERTIES COMPILE_OPTIONS "-march=x86-64-v3;-mtune=generic;-ffp-contract=fast")
    set_source_files_properties(${avx512} PROPERTIES COMPILE_OPTIONS
      "-march=x86-64-v4;-mtune=generic;-mprefer-vector-width=512;-ffp-contract=fast")
  endif()
  target_sources(${target} PRIVATE ${generic})
  set_source_files_properties(${generic} PROPERTIES COMPILE_OPTIONS "${generic_flags}")
endfunction()
