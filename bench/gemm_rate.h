// This machine's GEMM rate for a given shape, measured with Eigen in the same process, so model
// throughput can be reported as a fraction of it (the roofline reference of docs/design.md).
#pragma once

namespace edb::bench {

// GFLOP/s of (rows x inner) * (inner x columns) on one thread, median of `rounds` timings.
double gemm_gflops(int rows, int inner, int columns, int rounds = 7);

}  // namespace edb::bench
