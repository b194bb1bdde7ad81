// The FMA loop for generic, built with its -march (bench/CMakeLists.txt).
#define EDB_FMA_LOOP fma_loop_generic
#include "bench/fma_loop_impl.h"
