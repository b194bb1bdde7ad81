// A weight's gradient over every use in a trace: dW = sum_k a_k b_k^T, where a_k (dy) and b_k (x)
// are columns read through pointers wherever the uses left them. The uses are the reduction
// dimension: one contraction per weight per trace, with no gather of the pairs into matrices
// first. Columns are packed straight from their pointers into cache-sized panels, and a
// register-blocked micro-kernel (kRows x kCols accumulators) runs over the panels, as BLIS-style
// GEMMs do.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace edb::runtime {

struct OuterProducts {
  static constexpr int64_t kRows = 32;   // micro-tile rows: two 16-float vectors
  static constexpr int64_t kCols = 12;   // micro-tile columns: 24 accumulators in all
  static constexpr int64_t kDepth = 256; // columns per panel: a row panel and a column panel fit L1 and L2

  int64_t rows = 0;  // each a_k's length, the result's rows
  int64_t cols = 0;  // each b_k's length, the result's columns
  std::span<const float* const> a, b;  // column k of each factor; the same count

  // Whether the micro-kernel is worth it: products narrower than a tile (a bias's (dy, 1), a
  // classifier's few rows) would mostly pad it.
  static bool suits(int64_t rows, int64_t cols) { return rows >= kRows / 2 && cols >= kCols / 2; }
  // The scratch floats compute() needs for its panels.
  int64_t scratch_floats() const;
  // out (rows x cols, column-major, leading dimension rows) = sum_k a_k b_k^T. `split(count,
  // body)` runs body(begin, end) over pieces of [0, count) of the column tiles (on a pool, or as
  // one piece); `panels` holds scratch_floats() floats, 64-byte aligned or not.
  void compute(float* out, float* panels,
               const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const;
};

}  // namespace edb::runtime
