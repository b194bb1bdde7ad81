// One ISA's FMA loop, included by bench/fma_loop_ISA.cpp, which defines EDB_FMA_LOOP (the function's
// name) and is built with that ISA's -march (bench/CMakeLists.txt). The vector width comes from the
// compiler's target macros; without FMA (generic x86-64) a multiply and an add count as its 2 flops.
#include <cstdint>

#ifndef EDB_FMA_LOOP
#error "define EDB_FMA_LOOP before including bench/fma_loop_impl.h"
#endif

namespace edb::bench {

#if defined(__AVX512F__)
constexpr int kFmaVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kFmaVectorBytes = 32;
#else
constexpr int kFmaVectorBytes = 16;
#endif

// Runs `iterations` steps of 12 independent chains acc = acc * a + b and returns the flops done;
// `sink` keeps the result alive.
double EDB_FMA_LOOP(int64_t iterations, float* sink) {
  using Vec = float __attribute__((vector_size(kFmaVectorBytes)));
  constexpr int kChains = 12;
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + float(c) * 1e-3f;
  const Vec a = Vec{} + 0.999999f, b = Vec{} + 1e-7f;
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
  __builtin_memcpy(sink, &acc[0], sizeof(float));
  return double(iterations) * kChains * (kFmaVectorBytes / 4) * 2;
}

}  // namespace edb::bench
