// The one-thread (or n-thread) FMA peak of an ISA, measured: independent FMA chains in that ISA's
// widest vector registers, each loop compiled for its own ISA (bench/fma_loop_*.cpp), the yardstick
// every benchmark divides model GFLOP/s by; and the median time of one call of a kernel.
#pragma once

#include <functional>

#include "ir/isa.h"

namespace edb::bench {

// GFLOP/s of `threads` threads each running independent FMAs of `isa` (median of 5 timings).
double fma_peak(ir::Isa isa, int threads);

// Median seconds per call of `f` over `rounds` timings, each of enough calls (doubled until one
// timing takes more than `min_seconds`).
double time_per_call(const std::function<void()>& f, int rounds, double min_seconds);

}  // namespace edb::bench
