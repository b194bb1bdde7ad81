// The FMA loop for avx512, built with its -march (bench/CMakeLists.txt).
#define EDB_FMA_LOOP fma_loop_avx512
#include "bench/fma_loop_impl.h"
