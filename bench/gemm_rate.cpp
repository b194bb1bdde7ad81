// Eigen GEMM timing: enough repetitions per timing for ~20 ms, median of several timings.
#include "bench/gemm_rate.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <vector>

namespace edb::bench {

double gemm_gflops(int rows, int inner, int columns, int rounds) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(rows, inner);
  Eigen::MatrixXf b = Eigen::MatrixXf::Random(inner, columns);
  Eigen::MatrixXf c(rows, columns);
  const double flops = 2.0 * rows * inner * columns;
  using Clock = std::chrono::steady_clock;
  int reps = 1;
  for (;;) {  // calibrate
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) c.noalias() = a * b;
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 0.02) break;
    reps *= 2;
  }
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) c.noalias() = a * b;
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(flops * reps / seconds / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  volatile float sink = c(0, 0);
  (void)sink;
  return rates[rates.size() / 2];
}

}  // namespace edb::bench
