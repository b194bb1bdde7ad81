// fma_peak: each ISA's FMA loop on n threads, timed; the median of 5. time_per_call: a median too.
#include "bench/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace edb::bench {

double fma_loop_generic(int64_t iterations, float* sink);
#if defined(__x86_64__)
double fma_loop_avx2(int64_t iterations, float* sink);
double fma_loop_avx512(int64_t iterations, float* sink);
#endif

namespace {

using Loop = double (*)(int64_t, float*);

Loop loop_of(ir::Isa isa) {
#if defined(__x86_64__)
  if (isa == ir::Isa::avx512) return fma_loop_avx512;
  if (isa == ir::Isa::avx2) return fma_loop_avx2;
#endif
  (void)isa;
  return fma_loop_generic;
}

}  // namespace

double fma_peak(ir::Isa isa, int threads) {
  const Loop loop = loop_of(isa);
  const int64_t iterations = 20'000'000;
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    std::vector<std::thread> pool;
    std::vector<double> seconds(static_cast<size_t>(threads)), flops(static_cast<size_t>(threads));
    std::vector<float> sink(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const auto start = std::chrono::steady_clock::now();
        flops[size_t(t)] = loop(iterations, &sink[size_t(t)]);
        seconds[size_t(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
    for (std::thread& t : pool) t.join();
    double total = 0;
    for (double f : flops) total += f;
    rates.push_back(total / *std::max_element(seconds.begin(), seconds.end()) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double time_per_call(const std::function<void()>& f, int rounds, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  int reps = 1;
  for (;;) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    if (std::chrono::duration<double>(Clock::now() - start).count() > min_seconds) break;
    reps *= 2;
  }
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / reps);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace edb::bench
