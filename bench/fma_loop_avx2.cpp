// The FMA loop for avx2, built with its -march (bench/CMakeLists.txt).
#define EDB_FMA_LOOP fma_loop_avx2
#include "bench/fma_loop_impl.h"
