// The weight-gradient micro-kernel for avx2, built with its -march (CMakeLists.txt).
#define EDB_OUTER_KERNEL outer_kernel_avx2
#include "runtime/outer_kernel_impl.h"
