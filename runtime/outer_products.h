// A weight's gradient over every use in a trace: dW = sum_k a_k b_k^T, where a_k (dy) and b_k (x)
// are columns read through pointers wherever the uses left them. The uses are the reduction
// dimension: one contraction per weight per trace, with no gather of the pairs into matrices
// first. Columns are packed straight from their pointers into cache-sized panels, and a
// register-blocked micro-kernel runs over the panels, as BLIS-style GEMMs do; the micro-kernel is
// compiled per ISA (runtime/outer_kernel.h) and picked by ir::selected_isa(), its tile shaped by
// that ISA's registers. Every shape goes through here (matmul_nt under the batched and jit executors).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace edb::ir {
struct ParameterInfo;
}

namespace edb::runtime {

struct OuterKernel;
struct Gemm;

// product.c += product.a product.b (runtime/outer_kernel.h's Gemm: strided, either factor may be
// transposed) by the selected ISA's micro-kernel, with panels of this thread's own. With `weight`
// (a is that parameter's data, or rows of it), a's panels are packed once per parameter version
// and kept by the thread (at most kPackedWeightBytes), instead of once per call: a weight's
// transpose (matmul_tn) is a gather each time it is packed.
void gemm(const Gemm& product, const ir::ParameterInfo* weight = nullptr);
constexpr int64_t kPackedWeightBytes = int64_t{64} << 20;

struct OuterProducts {
  static constexpr int64_t kDepth = 256; // columns per panel at most: a row panel and a column panel fit L1 and L2
  // The panels of both factors, at most (fewer columns per panel for wide products): with the
  // output beside them they stay in L2 while the tiles run.
  static constexpr int64_t kPanelBytes = 512 * 1024;

  // The micro-kernel of the selected ISA (its tile_rows() x tile_cols() register tile); tests and
  // benchmarks may name another one the CPU runs.
  static const OuterKernel& selected_kernel();
  static const OuterKernel& kernel_for(const char* isa);  // "generic", "avx2", "avx512"; throws UsageError otherwise
  static int64_t tile_rows();
  static int64_t tile_cols();

  int64_t rows = 0;  // each a_k's length, the result's rows
  int64_t cols = 0;  // each b_k's length, the result's columns
  std::span<const float* const> a, b;  // column k of each factor; the same count
  const OuterKernel* kernel = nullptr;  // null: selected_kernel()

  // The scratch floats compute() needs for its panels.
  int64_t scratch_floats() const;
  // Columns per panel: as many as there are, up to kDepth and kPanelBytes.
  int64_t depth() const;
  // out (rows x cols, column-major, leading dimension rows) = sum_k a_k b_k^T. Products narrower
  // than half a tile, which would mostly pad it, add their terms straight from the pointers
  // instead: a bias's (dy, 1) pairs column by column, a classifier's few rows as out^T. `split(count,
  // body)` runs body(begin, end) over pieces of [0, count) of the column tiles (on a pool, or as
  // one piece); `panels` holds scratch_floats() floats, 64-byte aligned or not.
  void compute(float* out, float* panels,
               const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const;
  // out += sum_k a_k b_k^T, panel after panel: where adds_by_blocks(), the same as compute() run
  // over uses [0, d) and then accumulate() over [d, 2d), ... (d = depth()), bit for bit, so that
  // a contraction may run its panels' worth of uses at different times. Not for few rows.
  void accumulate(float* out, float* panels,
                  const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const;
  bool adds_by_blocks() const;  // false for few rows (and more than a few columns): compute() transposes
};

}  // namespace edb::runtime
