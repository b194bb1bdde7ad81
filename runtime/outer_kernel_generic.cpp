// The weight-gradient micro-kernel for generic, built with its -march (CMakeLists.txt).
#define EDB_OUTER_KERNEL outer_kernel_generic
#include "runtime/outer_kernel_impl.h"
