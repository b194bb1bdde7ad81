// OuterProducts: the selected ISA's micro-kernel (runtime/outer_kernel.h), panels sized to it, and
// the few-rows and few-columns shapes that would mostly pad a tile.
#include "runtime/outer_products.h"

#include <algorithm>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "ir/ir.h"
#include "ir/isa.h"
#include "runtime/outer_kernel.h"

namespace edb::runtime {

namespace {

int64_t tiles(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }

const OuterKernel& kernel_of(ir::Isa isa) {
#if defined(__x86_64__)
  if (isa == ir::Isa::avx512) return outer_kernel_avx512;
  if (isa == ir::Isa::avx2) return outer_kernel_avx2;
#endif
  (void)isa;
  return outer_kernel_generic;
}

const OuterKernel& kernel_of(const OuterProducts& p) { return p.kernel ? *p.kernel : OuterProducts::selected_kernel(); }

void check_pairs(const OuterProducts& p) {
  if (p.a.size() != p.b.size())
    throw InternalError("OuterProducts: " + std::to_string(p.a.size()) + " left columns but " + std::to_string(p.b.size()) +
                        " right ones");
}

bool narrow_columns(const OuterKernel& kernel, int64_t cols) { return cols < kernel.cols / 2; }
bool narrow_rows(const OuterKernel& kernel, int64_t rows) { return rows < kernel.rows / 2; }

// Few rows (a classifier's logits): out^T = sum_k b_k a_k^T column by column in `transposed`, so
// that the inner loop runs along the long side, then out = (out^T)^T.
void by_rows(const OuterKernel& kernel, const OuterProducts& p, float* out, float* transposed) {
  std::fill(transposed, transposed + p.rows * p.cols, 0.0f);
  kernel.add_by_columns(p.b.data(), p.a.data(), int64_t(p.a.size()), p.cols, p.rows, transposed);
  for (int64_t j = 0; j < p.cols; ++j)
    for (int64_t i = 0; i < p.rows; ++i) out[j * p.rows + i] = transposed[i * p.cols + j];
}

}  // namespace

const OuterKernel& OuterProducts::selected_kernel() {
  static const OuterKernel& kernel = kernel_of(ir::selected_isa());
  return kernel;
}

const OuterKernel& OuterProducts::kernel_for(const char* isa) {
  const std::optional<ir::Isa> parsed = ir::parse_isa(isa);
  if (!parsed) throw UsageError(std::string("OuterProducts::kernel_for: no ISA named '") + isa + "'");
  return kernel_of(ir::resolve_isa(isa, ir::host_isa()));
}

int64_t gemm_panel_floats(const OuterKernel& kernel, int64_t m, int64_t n) {
  const int64_t depth = kGemmDepth, cols = std::min(n, kGemmColumns);
  return (tiles(m, kernel.rows) * kernel.rows + tiles(cols, kernel.cols) * kernel.cols) * depth;
}

namespace {

// A weight's row panels as one thread packed them: which rows of which parameter (the key), from
// which data and version.
struct PackedA {
  struct Key {
    uint64_t uid = 0;
    const float* a = nullptr;
    int64_t a_row = 0, a_col = 0, m = 0, depth = 0;
    const OuterKernel* kernel = nullptr;
    bool operator==(const Key&) const = default;
  };
  Key key;
  const float* data = nullptr;
  uint64_t version = 0;
  std::vector<float> panels;
};

struct PackedWeights {
  std::vector<PackedA> entries;
  int64_t floats = 0;
};

// a's panels packed from `weight` at its current version, or null where they would not fit.
const float* packed_a(const OuterKernel& kernel, const Gemm& p, const ir::ParameterInfo& weight) {
  thread_local PackedWeights packed;
  const PackedA::Key key{weight.uid, p.a, p.a_row, p.a_col, p.m, p.depth, &kernel};
  PackedA* entry = nullptr;
  for (PackedA& e : packed.entries)
    if (e.key == key) entry = &e;
  if (!entry) {
    const int64_t floats = packed_a_floats(kernel, p.m, p.depth);
    constexpr int64_t kMaxFloats = kPackedWeightBytes / int64_t(sizeof(float));
    if (floats > kMaxFloats) return nullptr;
    if (packed.floats + floats > kMaxFloats) {  // full: start again (weights of models gone, mostly)
      packed.entries.clear();
      packed.floats = 0;
    }
    entry = &packed.entries.emplace_back();
    entry->key = key;
    entry->panels.resize(size_t(floats));
    packed.floats += floats;
  } else if (entry->data == weight.data && entry->version == *weight.version) {
    return entry->panels.data();
  }
  kernel.pack_a(p, entry->panels.data());
  entry->data = weight.data;
  entry->version = *weight.version;
  return entry->panels.data();
}

}  // namespace

void gemm(const Gemm& product, const ir::ParameterInfo* weight) {
  if (product.m <= 0 || product.n <= 0 || product.depth <= 0) return;
  const OuterKernel& kernel = OuterProducts::selected_kernel();
  thread_local std::vector<float> panels;
  const size_t floats = size_t(gemm_panel_floats(kernel, product.m, product.n));
  if (panels.size() < floats) panels.resize(floats);
  // Only a versioned parameter whose every write moves its version (ir::ParameterInfo): a value
  // that stands in for others (a cell call's argument) has no version.
  if (weight && weight->version && !(weight->written_unversioned && *weight->written_unversioned)) {
    Gemm p = product;
    p.packed_a = packed_a(kernel, p, *weight);
    return kernel.gemm(p, panels.data());
  }
  kernel.gemm(product, panels.data());
}

int64_t OuterProducts::tile_rows() { return selected_kernel().rows; }
int64_t OuterProducts::tile_cols() { return selected_kernel().cols; }

int64_t OuterProducts::scratch_floats() const {
  const OuterKernel& k = kernel_of(*this);
  if (narrow_columns(k, cols)) return 0;
  if (narrow_rows(k, rows)) return rows * cols;
  return (tiles(rows, k.rows) * k.rows + tiles(cols, k.cols) * k.cols) * depth();
}

int64_t OuterProducts::depth() const {
  // As deep as the columns there are: a single outer product (an MV-RNN word matrix's gradient,
  // dy x^T) needs one column of each, not kDepth.
  const OuterKernel& k = kernel_of(*this);
  const int64_t column_bytes = (tiles(rows, k.rows) * k.rows + tiles(cols, k.cols) * k.cols) * int64_t(sizeof(float));
  return std::clamp<int64_t>(std::min<int64_t>(int64_t(a.size()), kPanelBytes / column_bytes), 1, kDepth);
}

bool OuterProducts::adds_by_blocks() const {
  const OuterKernel& k = kernel_of(*this);
  return narrow_columns(k, cols) || !narrow_rows(k, rows);  // few columns win: add_by_columns
}

void OuterProducts::compute(float* out, float* panels,
                            const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const {
  std::fill(out, out + rows * cols, 0.0f);
  if (adds_by_blocks()) return accumulate(out, panels, split);
  check_pairs(*this);
  by_rows(kernel_of(*this), *this, out, panels);
}

void OuterProducts::accumulate(float* out, float* panels,
                               const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split) const {
  check_pairs(*this);
  const OuterKernel& k = kernel_of(*this);
  if (narrow_columns(k, cols)) return k.add_by_columns(a.data(), b.data(), int64_t(a.size()), rows, cols, out);
  if (narrow_rows(k, rows)) throw InternalError("OuterProducts::accumulate: a product of few rows (compute() only)");
  const int64_t row_tiles = tiles(rows, k.rows), col_tiles = tiles(cols, k.cols);
  const int64_t count = int64_t(a.size());
  const int64_t panel_depth = this->depth();
  for (int64_t k0 = 0; k0 < count; k0 += panel_depth) {
    const int64_t depth = std::min<int64_t>(panel_depth, count - k0);
    float* row_panels = panels;
    float* col_panels = panels + row_tiles * k.rows * depth;
    k.pack_rows(a.data(), k0, depth, rows, row_panels);
    k.pack_cols(b.data(), k0, depth, cols, col_panels);
    split(col_tiles,
          [&](int64_t begin, int64_t end) { k.tiles(row_panels, col_panels, depth, out, rows, rows, cols, begin, end); });
  }
}

}  // namespace edb::runtime
