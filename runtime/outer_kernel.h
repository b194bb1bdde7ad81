// The weight-gradient micro-kernel compiled once per ISA (runtime/outer_kernel_*.cpp, each built
// for its ISA's instructions) and picked at run time by OuterProducts through ir::selected_isa().
// Plain functions over raw pointers: the ISA files hold no inline code another file could share.
#pragma once

#include <cstdint>

namespace edb::runtime {

struct Gemm;

struct OuterKernel {
  // The register tile: rows (two vectors of the ISA) x cols accumulators, cols from the register
  // count (runtime/outer_kernel_impl.h).
  int64_t rows = 0, cols = 0;
  // Columns [k0, k0 + depth) of `columns` (each `extent` long) as panels of `tile` (rows or cols)
  // floats: panel t holds, per column k, rows [t * tile, (t + 1) * tile), zeros past `extent`.
  void (*pack_rows)(const float* const* columns, int64_t k0, int64_t depth, int64_t extent, float* panels) = nullptr;
  void (*pack_cols)(const float* const* columns, int64_t k0, int64_t depth, int64_t extent, float* panels) = nullptr;
  // out (rows x cols, leading dimension ld) += the tiles in column tiles [begin, end) of the
  // packed row and column panels, each `depth` deep.
  void (*tiles)(const float* row_panels, const float* col_panels, int64_t depth, float* out, int64_t ld, int64_t rows,
                int64_t cols, int64_t begin, int64_t end) = nullptr;
  // out (rows x cols) += sum_k x_k y_k^T over `count` pairs, column by column from the pointers.
  void (*add_by_columns)(const float* const* x, const float* const* y, int64_t count, int64_t rows, int64_t cols,
                         float* out) = nullptr;
  // product.c += product.a product.b (Gemm, below) over `panels` of gemm_panel_floats(m, n) floats.
  void (*gemm)(const Gemm& product, float* panels) = nullptr;
  // product.a's row panels for every depth block, block after block (packed_a_floats(m, depth)):
  // what gemm packs per call, packed once for a Gemm::packed_a.
  void (*pack_a)(const Gemm& product, float* packed) = nullptr;
};

// A GEMM over strided operands: c (m x n, column j at c + j * ldc) += a b, where a is m x depth
// with element (i, k) at a[i * a_row + k * a_col] and b is depth x n with (k, j) at
// b[k * b_row + j * b_col]: any of them transposed, or a block of a larger matrix.
struct Gemm {
  int64_t m = 0, n = 0, depth = 0;
  const float* a = nullptr;
  int64_t a_row = 1, a_col = 0;
  const float* b = nullptr;
  int64_t b_row = 1, b_col = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  // a already packed (OuterKernel::pack_a), or null: gemm packs a's panels itself.
  const float* packed_a = nullptr;
};

// The GEMM's blocking: panels of at most kGemmDepth columns of a and kGemmColumns columns of b.
constexpr int64_t kGemmDepth = 256, kGemmColumns = 480;
// The scratch floats `kernel`'s gemm needs for an m x n product.
int64_t gemm_panel_floats(const OuterKernel& kernel, int64_t m, int64_t n);
inline int64_t packed_a_floats(const OuterKernel& kernel, int64_t m, int64_t depth) {
  return (m + kernel.rows - 1) / kernel.rows * kernel.rows * depth;
}

extern const OuterKernel outer_kernel_generic;
#if defined(__x86_64__)
extern const OuterKernel outer_kernel_avx2;
extern const OuterKernel outer_kernel_avx512;
#endif

}  // namespace edb::runtime
