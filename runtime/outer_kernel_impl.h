// The body of one ISA's OuterKernel, included once by each runtime/outer_kernel_ISA.cpp, which
// defines EDB_OUTER_KERNEL (the table's name) and is compiled with that ISA's -march: the vector
// width and the register count come from the compiler's target macros, the tile shape from them.
// Everything here has internal linkage and uses no inline library code, so no function compiled
// for a wider ISA can stand in for this file's at link time.
#include <cstdint>
#include <utility>

#include "runtime/outer_kernel.h"

#ifndef EDB_OUTER_KERNEL
#error "define EDB_OUTER_KERNEL before including runtime/outer_kernel_impl.h"
#endif

namespace edb::runtime {

namespace {

#if defined(__AVX512F__)
constexpr int64_t kVectorBytes = 64, kRegisters = 32;
#elif defined(__AVX__)
constexpr int64_t kVectorBytes = 32, kRegisters = 16;
#elif defined(__aarch64__)
constexpr int64_t kVectorBytes = 16, kRegisters = 32;
#else
constexpr int64_t kVectorBytes = 16, kRegisters = 16;
#endif

constexpr int64_t kLanes = kVectorBytes / int64_t(sizeof(float));
// A tile column is two vectors; each k step loads them and broadcasts one float of b per column,
// so cols accumulator pairs, two row vectors and two more (the broadcast and one spare) must fit
// the register file: 12 columns (24 accumulators) of 32 zmm, 6 (12) of 16 ymm or xmm. More than
// 12 columns would not fit a column panel's k step in a cache line's worth of b.
constexpr int64_t kRows = 2 * kLanes;
constexpr int64_t kCols = (kRegisters - 4) / 2 < 12 ? (kRegisters - 4) / 2 : 12;
static_assert(kCols >= 4, "too few registers for the micro-kernel");

using Vec = float __attribute__((vector_size(kVectorBytes)));

inline Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const Vec& v) { __builtin_memcpy(p, &v, sizeof v); }
inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// Columns are read this many ahead of their use: they lie anywhere in the arena, written long
// before (a weight gradient runs at the end of the backward pass).
constexpr int64_t kAhead = 4;

void prefetch_column(const float* column, int64_t floats) {
  const int64_t lines = (floats * int64_t(sizeof(float)) + 63) / 64;
  for (int64_t line = 0; line < lines; ++line) __builtin_prefetch(reinterpret_cast<const char*>(column) + line * 64);
}

// (The tile is a template argument so that a whole tile's copy is a fixed-size, inlined one.)
template <int64_t tile>
void pack(const float* const* columns, int64_t k0, int64_t depth, int64_t extent, float* panels) {
  const int64_t count = (extent + tile - 1) / tile;
  const int64_t tail = extent - (count - 1) * tile;
  for (int64_t k = 0; k < depth; ++k) {
    if (k + kAhead < depth) prefetch_column(columns[k0 + k + kAhead], extent);
    const float* column = columns[k0 + k];
    for (int64_t t = 0; t < count; ++t) {
      float* to = panels + (t * depth + k) * tile;
      const float* from = column + t * tile;
      if (t + 1 < count) {
        __builtin_memcpy(to, from, sizeof(float) * tile);
      } else {
        // A fixed-length loop the compiler vectorises with masks (a memcpy of `tail` floats and a
        // fill of the rest were two library calls per column).
        for (int64_t r = 0; r < tile; ++r) to[r] = r < tail ? from[r] : 0.0f;
      }
    }
  }
}

// Lines [k0, k0 + depth) of a strided matrix as panels of `tile`: line k's element i lies at
// base[k * line + i * step]; panel t holds, per k, elements [t * tile, (t + 1) * tile) of line k,
// zeros past `extent`. Panel by panel, so that a gather (step > 1) reads `tile` streams at once.
template <int64_t tile>
void pack_strided(const float* base, int64_t step, int64_t line, int64_t k0, int64_t depth, int64_t extent, float* panels) {
  const int64_t count = (extent + tile - 1) / tile;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t first = t * tile, live = smaller(tile, extent - first);
    for (int64_t k = 0; k < depth; ++k) {
      const float* from = base + (k0 + k) * line + first * step;
      float* to = panels + (t * depth + k) * tile;
      if (step == 1 && live == tile) {
        __builtin_memcpy(to, from, sizeof(float) * tile);
      } else {
        for (int64_t r = 0; r < live; ++r) to[r] = from[r * step];
        for (int64_t r = live; r < tile; ++r) to[r] = 0.0f;
      }
    }
  }
}

void pack_rows(const float* const* columns, int64_t k0, int64_t depth, int64_t extent, float* panels) {
  pack<kRows>(columns, k0, depth, extent, panels);
}
void pack_cols(const float* const* columns, int64_t k0, int64_t depth, int64_t extent, float* panels) {
  pack<kCols>(columns, k0, depth, extent, panels);
}

// out's (vectors x kLanes) x width tile += (row panel a) (column panel b)^T over `depth` columns:
// the panels' first rows and columns (they are kRows and kCols wide); only the first
// live_rows x live_cols of the tile are stored. The full tile is two vectors by kCols; the
// narrower ones serve the edges, where the full tile would compute mostly zeros (BiLSTM's 200 x 50
// recurrent weights: 224 x 60 computed for 200 x 50, then 208 x 52). Each element sums over k in
// the same order whichever tile computes it.
template <int64_t vectors, int64_t width>
void tile(const float* __restrict a, const float* __restrict b, int64_t depth, float* out, int64_t ld,
          int64_t live_rows, int64_t live_cols) {
  static_assert(vectors == 1 || vectors == 2);
  Vec top[width] = {}, bottom[width] = {};
  for (int64_t k = 0; k < depth; ++k) {
    const Vec a0 = load(a + k * kRows);
    const float* bk = b + k * kCols;
    if constexpr (vectors == 2) {
      const Vec a1 = load(a + k * kRows + kLanes);
#pragma GCC unroll 12
      for (int64_t j = 0; j < width; ++j) {
        top[j] += a0 * bk[j];
        bottom[j] += a1 * bk[j];
      }
    } else {
#pragma GCC unroll 12
      for (int64_t j = 0; j < width; ++j) top[j] += a0 * bk[j];
    }
  }
  if (live_rows == vectors * kLanes && live_cols == width) {
#pragma GCC unroll 12
    for (int64_t j = 0; j < width; ++j) {
      float* column = out + j * ld;
      store(column, load(column) + top[j]);
      if constexpr (vectors == 2) store(column + kLanes, load(column + kLanes) + bottom[j]);
    }
    return;
  }
  for (int64_t j = 0; j < live_cols; ++j) {
    float sums[kRows];
    store(sums, top[j]);
    if constexpr (vectors == 2) store(sums + kLanes, bottom[j]);
    float* column = out + j * ld;
    for (int64_t r = 0; r < live_rows; ++r) column[r] += sums[r];
  }
}

using TileFunction = void (*)(const float*, const float*, int64_t, float*, int64_t, int64_t, int64_t);

// The narrowest tile that holds an edge of live_rows x live_cols: one vector of rows or two;
// 4, 8 or kCols columns.
template <int64_t vectors>
TileFunction tile_for_columns(int64_t live_cols) {
  if constexpr (kCols > 4)
    if (live_cols <= 4) return tile<vectors, 4>;
  if constexpr (kCols > 8)
    if (live_cols <= 8) return tile<vectors, 8>;
  return tile<vectors, kCols>;
}
TileFunction tile_for(int64_t live_rows, int64_t live_cols) {
  return live_rows <= kLanes ? tile_for_columns<1>(live_cols) : tile_for_columns<2>(live_cols);
}

void tiles(const float* row_panels, const float* col_panels, int64_t depth, float* out, int64_t ld, int64_t rows,
           int64_t cols, int64_t begin, int64_t end) {
  const int64_t row_tiles = (rows + kRows - 1) / kRows;
  // A column panel stays in L1 while the row panels stream past it.
  for (int64_t tj = begin; tj < end; ++tj) {
    const int64_t live_cols = smaller(kCols, cols - tj * kCols);
    for (int64_t ti = 0; ti < row_tiles; ++ti) {
      const int64_t live_rows = smaller(kRows, rows - ti * kRows);
      const float* a = row_panels + ti * kRows * depth;
      const float* b = col_panels + tj * kCols * depth;
      float* c = out + tj * kCols * ld + ti * kRows;
      // The full tile called directly (inlined), the edges through tile_for.
      if (live_rows == kRows && live_cols == kCols) tile<2, kCols>(a, b, depth, c, ld, live_rows, live_cols);
      else tile_for(live_rows, live_cols)(a, b, depth, c, ld, live_rows, live_cols);
    }
  }
}

// c += a b: a's panels per kGemmDepth columns, b's per kGemmColumns columns within them, as BLIS
// blocks a GEMM (the row panels of a stay in L2 while b's column panels pass).
void gemm(const Gemm& p, float* panels) {
  const int64_t row_tiles = (p.m + kRows - 1) / kRows;
  for (int64_t k0 = 0; k0 < p.depth; k0 += kGemmDepth) {
    const int64_t depth = smaller(kGemmDepth, p.depth - k0);
    const float* row_panels = p.packed_a ? p.packed_a + k0 * row_tiles * kRows : panels;
    float* col_panels = panels + row_tiles * kRows * depth;
    if (!p.packed_a) pack_strided<kRows>(p.a, p.a_row, p.a_col, k0, depth, p.m, panels);
    for (int64_t j0 = 0; j0 < p.n; j0 += kGemmColumns) {
      const int64_t cols = smaller(kGemmColumns, p.n - j0);
      pack_strided<kCols>(p.b + j0 * p.b_col, p.b_col, p.b_row, k0, depth, cols, col_panels);
      tiles(row_panels, col_panels, depth, p.c + j0 * p.ldc, p.ldc, p.m, cols, 0, (cols + kCols - 1) / kCols);
    }
  }
}

void pack_a(const Gemm& p, float* packed) {
  const int64_t row_tiles = (p.m + kRows - 1) / kRows;
  for (int64_t k0 = 0; k0 < p.depth; k0 += kGemmDepth)
    pack_strided<kRows>(p.a, p.a_row, p.a_col, k0, smaller(kGemmDepth, p.depth - k0), p.m,
                        packed + k0 * row_tiles * kRows);
}

// Rows [r0, r0 + vectors * kLanes) of out (rows x cols) += sum_k x_k y_k^T, the block's
// vectors x cols sums held in registers across every k, so that out is read and written once,
// not once per k (a bias's gradient: 384 x 1 over a TreeLSTM step's thousands of uses). Each
// element sums over k in order, as the loop by columns does.
template <int64_t cols, int64_t vectors>
void add_block(const float* const* x, const float* const* y, int64_t count, int64_t rows, int64_t r0, float* out) {
  Vec sums[cols][vectors];
#pragma GCC unroll 8
  for (int64_t j = 0; j < cols; ++j)
#pragma GCC unroll 8
    for (int64_t v = 0; v < vectors; ++v) sums[j][v] = load(out + j * rows + r0 + v * kLanes);
  for (int64_t k = 0; k < count; ++k) {
    if (k + kAhead < count) {
      prefetch_column(x[k + kAhead] + r0, vectors * kLanes);
      __builtin_prefetch(y[k + kAhead]);
    }
    const float* xk = x[k] + r0;
    Vec xs[vectors];
#pragma GCC unroll 8
    for (int64_t v = 0; v < vectors; ++v) xs[v] = load(xk + v * kLanes);
#pragma GCC unroll 8
    for (int64_t j = 0; j < cols; ++j) {
      const float s = y[k][j];
#pragma GCC unroll 8
      for (int64_t v = 0; v < vectors; ++v) sums[j][v] += xs[v] * s;
    }
  }
#pragma GCC unroll 8
  for (int64_t j = 0; j < cols; ++j)
#pragma GCC unroll 8
    for (int64_t v = 0; v < vectors; ++v) store(out + j * rows + r0 + v * kLanes, sums[j][v]);
}

// Rows [first, rows) of out += sum_k x_k y_k^T, column by column from the pointers.
void add_rows_by_columns(const float* const* x, const float* const* y, int64_t count, int64_t first, int64_t rows,
                         int64_t cols, float* out) {
  for (int64_t k = 0; k < count; ++k) {
    if (k + kAhead < count) {
      prefetch_column(x[k + kAhead] + first, rows - first);
      prefetch_column(y[k + kAhead], cols);
    }
    const float* __restrict xk = x[k];
    for (int64_t j = 0; j < cols; ++j) {
      const float s = y[k][j];
      float* __restrict column = out + j * rows;
      for (int64_t r = first; r < rows; ++r) column[r] += xk[r] * s;
    }
  }
}

// Whole vectors of rows by blocks in registers (as many vectors a block as the registers hold
// beside the block's loads), the last few rows by columns.
template <int64_t cols>
void add_in_blocks(const float* const* x, const float* const* y, int64_t count, int64_t rows, float* out) {
  constexpr int64_t kBlock = (kRegisters - 2) / (cols + 1) < 8 ? (kRegisters - 2) / (cols + 1) : 8;
  static_assert(kBlock >= 1);
  int64_t r0 = 0;
  for (; r0 + kBlock * kLanes <= rows; r0 += kBlock * kLanes) add_block<cols, kBlock>(x, y, count, rows, r0, out);
  for (; r0 + kLanes <= rows; r0 += kLanes) add_block<cols, 1>(x, y, count, rows, r0, out);
  if (r0 < rows) add_rows_by_columns(x, y, count, r0, rows, cols, out);
}

using AddFunction = void (*)(const float* const*, const float* const*, int64_t, int64_t, float*);
template <int64_t... cols>
struct AddTable {
  static constexpr AddFunction adds[sizeof...(cols)] = {add_in_blocks<cols + 1>...};
};
template <int64_t... cols>
constexpr const AddFunction* add_table(std::integer_sequence<int64_t, cols...>) {
  return AddTable<cols...>::adds;
}

// The narrow paths bring fewer columns than kCols / 2 (a bias's one) or, transposed, than kRows
// / 2 (a classifier's logits): at most 15 with AVX-512, 7 with AVX2. Blocks in registers take up
// to 15 columns, or 13 with 16 registers (a block of one vector needs as many accumulators, a load
// and a broadcast).
constexpr int64_t kMostColumnsInRegisters = kRegisters - 3 < 15 ? kRegisters - 3 : 15;
static_assert(kMostColumnsInRegisters >= kRows / 2 - 1 && kMostColumnsInRegisters >= kCols / 2 - 1);

void add_by_columns(const float* const* x, const float* const* y, int64_t count, int64_t rows, int64_t cols,
                    float* out) {
  // (A plain table: the file holds no inline library code; integer_sequence is only a type.)
  static constexpr const AddFunction* adds = add_table(std::make_integer_sequence<int64_t, kMostColumnsInRegisters>{});
  if (cols >= 1 && cols <= kMostColumnsInRegisters) return adds[cols - 1](x, y, count, rows, out);
  add_rows_by_columns(x, y, count, 0, rows, cols, out);
}

}  // namespace

extern const OuterKernel EDB_OUTER_KERNEL;
const OuterKernel EDB_OUTER_KERNEL{kRows, kCols, pack_rows, pack_cols, tiles, add_by_columns, gemm, pack_a};

}  // namespace edb::runtime
