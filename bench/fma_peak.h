// The one-thread (or n-thread) FMA peak of an ISA, measured: independent FMA chains in that ISA's
// widest vector registers, each loop compiled for its own ISA (bench/fma_loop_*.cpp), the yardstick
// every benchmark divides model GFLOP/s by.
#pragma once

#include "ir/isa.h"

namespace edb::bench {

// GFLOP/s of `threads` threads each running independent FMAs of `isa` (median of 5 timings).
double fma_peak(ir::Isa isa, int threads);

}  // namespace edb::bench
