// OuterProducts: panels packed from the columns' pointers, and the register-blocked micro-kernel.
// Written with GCC/Clang vector types, so the build's -march picks the instructions (two zmm
// registers per tile column on AVX-512, four ymm on AVX2); this file is built with
// -ffp-contract=fast so that `acc += a * b` is one fused multiply-add.
#include "runtime/outer_products.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "edbatch/errors.h"

namespace edb::runtime {

namespace {

constexpr int64_t kRows = OuterProducts::kRows;
constexpr int64_t kCols = OuterProducts::kCols;
constexpr int64_t kLanes = 16;
static_assert(kRows == 2 * kLanes, "the micro-kernel holds a tile column in two vectors");

using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }

int64_t tiles(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }

// Columns are read this many ahead of their use: they lie anywhere in the arena, written long
// before (a weight gradient runs at the end of the backward pass).
constexpr int64_t kAhead = 4;

// The cache lines of a column of `floats` floats, fetched for reading.
void prefetch_column(const float* column, int64_t floats) {
  const int64_t lines = (floats * int64_t(sizeof(float)) + 63) / 64;
  for (int64_t line = 0; line < lines; ++line) __builtin_prefetch(reinterpret_cast<const char*>(column) + line * 64);
}

// Columns [k0, k0 + depth) of `columns` (each `extent` long) as panels of `tile` rows: panel t
// holds, per column k, rows [t * tile, (t + 1) * tile), zeros past `extent`.
// (The tile is a template argument so that a whole tile's copy is a fixed-size, inlined one.)
template <int64_t tile>
void pack(std::span<const float* const> columns, int64_t k0, int64_t depth, int64_t extent, float* panels) {
  const int64_t count = tiles(extent, tile);
  const int64_t tail = extent - (count - 1) * tile;
  for (int64_t k = 0; k < depth; ++k) {
    if (k + kAhead < depth) prefetch_column(columns[size_t(k0 + k + kAhead)], extent);
    const float* column = columns[size_t(k0 + k)];
    for (int64_t t = 0; t < count; ++t) {
      float* to = panels + (t * depth + k) * tile;
      if (t + 1 < count) {
        std::memcpy(to, column + t * tile, sizeof(float) * size_t(tile));
      } else {
        // A fixed-length loop the compiler vectorises with masks (a memcpy of `tail` floats and a
        // fill of the rest were two library calls per column).
        const float* from = column + t * tile;
        for (int64_t r = 0; r < tile; ++r) to[r] = r < tail ? from[r] : 0.0f;
      }
    }
  }
}

// out's kRows x kCols tile += (row panel a) (column panel b)^T over `depth` columns; only the
// first live_rows x live_cols of the tile are stored.
void tile(const float* __restrict a, const float* __restrict b, int64_t depth, float* out, int64_t ld,
          int64_t live_rows, int64_t live_cols) {
  Vec top[kCols] = {}, bottom[kCols] = {};
  for (int64_t k = 0; k < depth; ++k) {
    const Vec a0 = load(a + k * kRows), a1 = load(a + k * kRows + kLanes);
    const float* bk = b + k * kCols;
#pragma GCC unroll 12
    for (int64_t j = 0; j < kCols; ++j) {
      top[j] += a0 * bk[j];
      bottom[j] += a1 * bk[j];
    }
  }
  if (live_rows == kRows && live_cols == kCols) {
#pragma GCC unroll 12
    for (int64_t j = 0; j < kCols; ++j) {
      float* column = out + j * ld;
      store(column, load(column) + top[j]);
      store(column + kLanes, load(column + kLanes) + bottom[j]);
    }
    return;
  }
  for (int64_t j = 0; j < live_cols; ++j) {
    float sums[kRows];
    store(sums, top[j]);
    store(sums + kLanes, bottom[j]);
    float* column = out + j * ld;
    for (int64_t r = 0; r < live_rows; ++r) column[r] += sums[r];
  }
}

// out += sum_k x_k y_k^T (x_k `rows` long, y_k `cols`), column by column, each x_k read once from
// where it lies: for few columns (a bias's (dy, 1)).
void add_by_columns(std::span<const float* const> x, std::span<const float* const> y, int64_t rows, int64_t cols,
                    float* out) {
  for (size_t k = 0; k < x.size(); ++k) {
    if (k + kAhead < x.size()) {
      prefetch_column(x[k + kAhead], rows);
      prefetch_column(y[k + kAhead], cols);
    }
    const float* __restrict xk = x[k];
    for (int64_t j = 0; j < cols; ++j) {
      const float s = y[k][j];
      float* __restrict column = out + j * rows;
      for (int64_t r = 0; r < rows; ++r) column[r] += xk[r] * s;
    }
  }
}

// Few rows (a classifier's logits): out^T = sum_k b_k a_k^T column by column in `transposed`, so
// that the inner loop runs along the long side, then out = (out^T)^T.
void by_rows(const OuterProducts& p, float* out, float* transposed) {
  std::fill(transposed, transposed + p.rows * p.cols, 0.0f);
  add_by_columns(p.b, p.a, p.cols, p.rows, transposed);
  for (int64_t j = 0; j < p.cols; ++j)
    for (int64_t i = 0; i < p.rows; ++i) out[j * p.rows + i] = transposed[i * p.cols + j];
}

bool narrow_columns(int64_t cols) { return cols < kCols / 2; }
bool narrow_rows(int64_t rows) { return rows < kRows / 2; }

}  // namespace

int64_t OuterProducts::scratch_floats() const {
  if (narrow_columns(cols)) return 0;
  if (narrow_rows(rows)) return rows * cols;
  return (tiles(rows, kRows) * kRows + tiles(cols, kCols) * kCols) * depth();
}

int64_t OuterProducts::depth() const {
  // As deep as the columns there are: a single outer product (an MV-RNN word matrix's gradient,
  // dy x^T) needs one column of each, not kDepth.
  const int64_t column_bytes = (tiles(rows, kRows) * kRows + tiles(cols, kCols) * kCols) * int64_t(sizeof(float));
  return std::clamp<int64_t>(std::min<int64_t>(int64_t(a.size()), kPanelBytes / column_bytes), 1, kDepth);
}

void OuterProducts::compute(float* out, float* panels,
                            const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const {
  std::fill(out, out + rows * cols, 0.0f);
  if (a.size() != b.size()) throw InternalError("OuterProducts: " + std::to_string(a.size()) + " left columns but " +
                                                std::to_string(b.size()) + " right ones");
  if (narrow_columns(cols)) return add_by_columns(a, b, rows, cols, out);
  if (narrow_rows(rows)) return by_rows(*this, out, panels);
  const int64_t row_tiles = tiles(rows, kRows), col_tiles = tiles(cols, kCols);
  const size_t count = a.size();
  const int64_t panel_depth = this->depth();
  for (int64_t k0 = 0; k0 < int64_t(count); k0 += panel_depth) {
    const int64_t depth = std::min<int64_t>(panel_depth, int64_t(count) - k0);
    float* a_panels = panels;
    float* b_panels = panels + row_tiles * kRows * depth;
    pack<kRows>(a, k0, depth, rows, a_panels);
    pack<kCols>(b, k0, depth, cols, b_panels);
    // A column panel stays in L1 while the row panels stream past it.
    split(col_tiles, [&](int64_t begin, int64_t end) {
      for (int64_t tj = begin; tj < end; ++tj)
        for (int64_t ti = 0; ti < row_tiles; ++ti)
          tile(a_panels + ti * kRows * depth, b_panels + tj * kCols * depth, depth, out + tj * kCols * rows + ti * kRows,
               rows, std::min(kRows, rows - ti * kRows), std::min(kCols, cols - tj * kCols));
    });
  }
}

}  // namespace edb::runtime
