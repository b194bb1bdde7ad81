// Batched kernels per op. A batch's output is one rows x (members * cols) matrix (outputs sit
// consecutively in member order). Each operand slot is classified once per batch:
//   shared   - one value for every member (a weight): used once;
//   strided  - member k at base + k * stride (in place, including views such as slices);
//   gathered - anywhere else: read through a per-member pointer array. Its members still fall
//              into maximal strided runs (the slices of several gates, the members of several
//              cell calls): elementwise kernels run run by run in place, and only members alone
//              in their run count as bytes gathered; a GEMM copies the operand into scratch.
#include "runtime/batched.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <tuple>

#include "edbatch/errors.h"
#include "memplan/layout.h"
#include "runtime/batch_context.h"
#include "runtime/call_expansion.h"
#include "runtime/outer_kernel.h"
#include "runtime/outer_products.h"
#include "runtime/selection.h"
#include "runtime/side_by_side.h"
#include "runtime/weight_gradients.h"

namespace edb::runtime {

namespace {


constexpr int64_t kFewRows = 16;                  // a GEMM of fewer output rows runs transposed
constexpr int64_t kMinFlopsPerPiece = 200'000;    // a piece cut by columns worth a thread hand-off

// Operand and BatchContext: runtime/batch_context.h.

// Elementwise ops over operands of the output's shape. Strided and shared operands run as one
// whole-batch expression; with a gathered operand each member's column block runs on its own.
// Segments of [0, n) in which every gathered operand stays inside one strided run.
template <typename Body>
void for_each_segment(const BatchContext& c, std::span<const Operand> ops, Body&& body) {
  for (int64_t begin = 0; begin < c.n();) {
    int64_t end = c.n();
    for (const Operand& o : ops) {
      if (o.kind == Operand::kGathered) end = std::min<int64_t>(end, o.run_end[begin]);
      if (o.kind == Operand::kShared && o.shape.cols > 1) end = begin + 1;  // no view repeats a matrix
    }
    body(begin, end);
    begin = end;
  }
}

template <typename F>
void elementwise(const BatchContext& c, std::span<const Operand> ops, F&& f) {
  const bool whole = std::all_of(ops.begin(), ops.end(), [&](const Operand& o) {
    return o.kind == Operand::kStrided && (o.shape.cols == 1 || o.stride == o.shape.size());
  });
  const ir::Shape shape = c.first.shape;
  if (whole) {
    Matrix out = c.output();
    c.split(out.cols(), std::max<int64_t>(1, kMinElementsPerTask / shape.rows), [&](int64_t b, int64_t e) {
      f(out.middleCols(b, e - b), [&](size_t i) { return ops[i].view(c.n()).middleCols(b, e - b); });
    });
    c.stats.kernel_calls += 1;
    return;
  }
  // Run by run: each segment is one whole-segment expression over in-place views.
  for_each_segment(c, ops, [&](int64_t begin, int64_t end) {
    Matrix out(c.out + begin * shape.size(), shape.rows, shape.cols * (end - begin));
    f(out, [&](size_t i) { return ops[i].view(begin, end - begin); });
    for (const Operand& o : ops) c.count_alone(o, begin, end);
    c.stats.kernel_calls += 1;
  });
}

template <typename F>
void unary(const BatchContext& c, F&& f) {
  const Operand x = c.operand(0);
  elementwise(c, std::span(&x, 1), [&](auto out, auto arg) { out.array() = f(arg(0).array()); });
}

template <typename F>
void binary(const BatchContext& c, F&& f) {
  const Operand xs[2] = {c.operand(0), c.operand(1)};
  elementwise(c, xs, [&](auto out, auto arg) { out.array() = f(arg(0).array(), arg(1).array()); });
}

void run_sum(const BatchContext& c) {
  if (c.first.shape.size() == 1) {  // sums of scalars (a trace's losses): no operand analysis per slot
    for (int64_t k = 0; k < c.n(); ++k) {
      const auto args = c.values.graph.args(c.members[size_t(k)]);
      float total = *c.values.in(args[0]);
      for (size_t i = 1; i < args.size(); ++i) total += *c.values.in(args[i]);
      c.out[k] = total;
    }
    return;
  }
  std::vector<Operand> xs;
  for (size_t slot = 0; slot < c.first.arg_count; ++slot) xs.push_back(c.operand(slot));
  elementwise(c, xs, [&](auto out, auto arg) {
    out = arg(0);
    for (size_t i = 1; i < xs.size(); ++i) out += arg(i);
  });
}

// Runs body(begin, end) over columns [0, columns) across the pool, in pieces of at least
// kMinFlopsPerPiece whose bounds are multiples of 16 columns: a piece's vector loops then meet
// the same elements in the same lanes as one whole-batch loop would, so the values do not depend
// on the thread count.
template <typename Body>
void split_columns(const BatchContext& c, int64_t columns, int64_t flops_per_column, Body&& body) {
  constexpr int64_t kStep = 16;
  const int64_t steps = (columns + kStep - 1) / kStep;
  const int64_t pieces = std::min({int64_t(c.pool.size()), steps, columns * flops_per_column / kMinFlopsPerPiece});
  if (pieces <= 1) return body(int64_t{0}, columns);
  const std::function<void(int)> task = [&](int i) {
    body(std::min(columns, steps * i / pieces * kStep), std::min(columns, steps * (i + 1) / pieces * kStep));
  };
  c.pool.parallel_for(static_cast<int>(pieces), task);
}

// Whether a gathered X is better read in place run by run (one GEMM per strided run) than copied
// whole into scratch (memplan::gemm_reads_runs, which the planner's prediction shares).
bool gemm_by_runs(const Operand& x, int64_t output_rows, int64_t n) {
  if (x.kind != Operand::kGathered) return false;
  int64_t runs = 0;
  for (int64_t k = 0; k < n; k = x.run_end[k]) ++runs;
  return memplan::gemm_reads_runs(runs, output_rows, n);
}

// An Eigen block's (or its transpose's) data and the steps between its rows and its columns.
template <typename Expression>
std::tuple<const float*, int64_t, int64_t> strides_of(const Expression& e) {
  if constexpr (std::decay_t<Expression>::IsRowMajor) return {e.data(), int64_t(e.outerStride()), int64_t(e.innerStride())};
  else return {e.data(), int64_t(e.innerStride()), int64_t(e.outerStride())};
}

// out = init + W_1 X_1 + W_2 X_2 + ... (or W_1^T X_1 + ... when `transposed`): one GEMM per shared
// weight over all members, split by rows of the output across threads (each thread packs only its
// rows of W; X is small). init(begin, end) writes the starting value of members [begin, end)'s
// columns (a bias, or zero). A gathered X is copied into scratch first, or read run by run in place
// where gemm_by_runs says so.
template <typename Init>
void gemm_rows(const BatchContext& c, const std::vector<std::pair<Operand, Operand>>& products, bool transposed,
               Init&& init) {
  Matrix out = c.output();
  std::vector<uint8_t> by_runs;
  for (const auto& [w, x] : products) {
    by_runs.push_back(gemm_by_runs(x, transposed ? w.shape.cols : w.shape.rows, c.n()));
    if (by_runs.back()) c.count_alone(x, 0, c.n());
  }
  int64_t calls = 0;
  for (size_t i = 0; i < products.size(); ++i)
    for (int64_t k = 0; k < c.n(); k = by_runs[i] ? products[i].second.run_end[k] : c.n()) ++calls;
  c.stats.kernel_calls += calls;
  // rows: output rows [begin, end) of W (or W^T), whichever expression type that is.
  // A product of few output rows (a classifier's logits over every node) runs transposed,
  // out^T += X^T W^T: GEMM kernels block the left factor's rows in panels (Eigen's float panel is
  // 48 rows on AVX-512), which W's few rows would mostly pad.
  // Otherwise the selected ISA's GEMM (runtime/outer_kernel.h), so that a build for any -march
  // runs its widest vectors.
  auto add = [](auto&& out_block, const auto& rows, const auto& x, const ir::ParameterInfo* weight) {
    if (rows.rows() < kFewRows && x.cols() >= 4 * kFewRows) {
      out_block.transpose().noalias() += x.transpose() * rows.transpose();
      return;
    }
    Gemm product{rows.rows(), x.cols(), rows.cols()};
    std::tie(product.a, product.a_row, product.a_col) = strides_of(rows);
    std::tie(product.b, product.b_row, product.b_col) = strides_of(x);
    const auto [c, c_row, c_col] = strides_of(out_block);
    if (c_row != 1) throw InternalError("gemm_rows: an output block whose rows are not contiguous");
    product.c = const_cast<float*>(c);
    product.ldc = c_col;
    gemm(product, weight);
  };
  // Members [first, last)'s columns of out (rows [begin, end)) += rows * their X of product i, run
  // by run where it reads runs in place.
  auto add_products = [&](size_t i, int64_t begin, int64_t end, const auto& rows, int64_t first, int64_t last,
                          const StridedConst& copied) {
    const Operand& x = products[i].second;
    const ir::ParameterInfo* weight = products[i].first.parameter;
    const int64_t cols = x.shape.cols;
    if (!by_runs[i]) {
      add(out.block(begin, first * cols, end - begin, (last - first) * cols), rows,
          copied.middleCols(first * cols, (last - first) * cols), weight);
      return;
    }
    for (int64_t k = first; k < last; k = std::min<int64_t>(x.run_end[k], last)) {
      const int64_t count = std::min<int64_t>(x.run_end[k], last) - k;
      add(out.block(begin, k * cols, end - begin, count * cols), rows, x.view(k, count), weight);
    }
  };
  // Too few output rows to cut by rows (a classifier's logits over every node): cut by columns,
  // whole members, each piece starting its columns, copying its members of a gathered X and
  // multiplying all of W by its columns of X: the same sums, in the same order, as the whole
  // product.
  if (out.rows() < 2 * kMinRowsPerTask && c.pool.size() > 1) {
    const int64_t cols = c.first.shape.cols;  // an output member's columns, and each X member's
    int64_t depth = 0;
    for (const auto& [w, x] : products) depth += transposed ? w.shape.rows : w.shape.cols;
    std::vector<float*> copies(products.size(), nullptr);
    for (size_t i = 0; i < products.size(); ++i) {
      const Operand& x = products[i].second;
      if (by_runs[i] || x.kind == Operand::kStrided) continue;
      if (x.kind == Operand::kGathered) c.stats.bytes_gathered += x.bytes() * c.n();
      copies[i] = c.scratch.allocate(size_t(x.shape.size() * c.n()));
    }
    split_columns(c, c.n(), 2 * out.rows() * depth * cols, [&](int64_t first, int64_t last) {
      init(first, last);
      for (size_t i = 0; i < products.size(); ++i) {
        const Operand& w = products[i].first;
        const Operand& x = products[i].second;
        const ConstMatrix weight(w.base, w.shape.rows, w.shape.cols);
        if (copies[i]) x.copy(first, last, copies[i]);
        const StridedConst copied = copies[i] ? StridedConst(copies[i], x.shape.rows, x.shape.cols * c.n(),
                                                             Eigen::OuterStride<>(x.shape.rows))
                                  : by_runs[i] ? x.view(0, 1)  // unread: stands in for the runs' views
                                               : x.view(c.n());
        if (transposed) add_products(i, 0, out.rows(), weight.transpose(), first, last, copied);
        else add_products(i, 0, out.rows(), weight, first, last, copied);
      }
    });
    return;
  }
  init(int64_t{0}, c.n());
  std::vector<StridedConst> xs;
  for (size_t i = 0; i < products.size(); ++i)
    xs.push_back(by_runs[i] ? products[i].second.view(0, 1) : c.matrix(products[i].second));  // the first only stands in for a run view
  c.split(out.rows(), kMinRowsPerTask, [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < products.size(); ++i) {
      const Operand& w = products[i].first;
      const ConstMatrix weight(w.base, w.shape.rows, w.shape.cols);
      if (transposed) add_products(i, begin, end, weight.middleCols(begin, end - begin).transpose(), 0, c.n(), xs[i]);
      else add_products(i, begin, end, weight.middleRows(begin, end - begin), 0, c.n(), xs[i]);
    }
  });
}

// Products whose left factor differs per member: one small product per member, added to `out`.
void per_member_products(const BatchContext& c, size_t product_begin) {
  for (int64_t k = 0; k < c.n(); ++k) {
    Matrix out = c.output(k);
    for (size_t slot = product_begin; slot + 1 < c.first.arg_count; slot += 2) {
      const ir::Shape sa = c.arg_shape(slot), sb = c.arg_shape(slot + 1);
      out.noalias() += ConstMatrix(c.in(size_t(k), slot), sa.rows, sa.cols) * ConstMatrix(c.in(size_t(k), slot + 1), sb.rows, sb.cols);
    }
  }
  c.stats.kernel_calls += c.n();
}

// matmul, affine, matvec: the output starts as the bias (affine) or zero, then takes the products:
// one GEMM per shared weight over all members, or per-member products otherwise.
void run_linear(const BatchContext& c) {
  const size_t product_begin = c.first.op == ir::Op::affine ? 1 : 0;
  std::optional<Operand> bias;
  if (c.first.op == ir::Op::affine) bias = c.operand(0);
  // Members [begin, end)'s outputs start as their bias (affine) or zero.
  auto init = [&](int64_t begin, int64_t end) {
    const int64_t size = c.first.shape.size();
    Matrix out(c.out + begin * size, c.first.shape.rows, c.first.shape.cols * (end - begin));
    if (!bias) {
      out.setZero();
    } else if (bias->kind == Operand::kShared && bias->shape.cols == 1) {
      out.colwise() = ConstMatrix(bias->base, bias->shape.rows, 1).col(0);
    } else {
      bias->copy(begin, end, c.out);
    }
  };
  if (bias && bias->kind == Operand::kGathered) c.stats.bytes_gathered += bias->bytes() * c.n();
  std::vector<std::pair<Operand, Operand>> products;
  for (size_t slot = product_begin; slot + 1 < c.first.arg_count; slot += 2) {
    const Operand w = c.operand(slot);
    const bool one_weight = w.kind == Operand::kShared || c.n() == 1;
    if (c.first.op == ir::Op::matvec || !one_weight) {
      init(0, c.n());
      return per_member_products(c, product_begin);
    }
    products.emplace_back(w, c.operand(slot + 1));
  }
  gemm_rows(c, products, /*transposed=*/false, init);
}

// A^T B: with A shared (a weight), one GEMM A^T X over all members (gemm_rows, transposed);
// otherwise one small product per member.
void run_matmul_tn(const BatchContext& c) {
  const Operand a = c.operand(0);
  if (a.kind != Operand::kShared && c.n() > 1) {
    const ir::Shape sx = c.arg_shape(0), sy = c.arg_shape(1);
    for (int64_t k = 0; k < c.n(); ++k)
      c.output(k).noalias() = ConstMatrix(c.in(size_t(k), 0), sx.rows, sx.cols).transpose() *
                              ConstMatrix(c.in(size_t(k), 1), sy.rows, sy.cols);
    c.stats.kernel_calls += c.n();
    return;
  }
  const int64_t size = c.first.shape.size();
  gemm_rows(c, {{a, c.operand(1)}}, /*transposed=*/true, [&](int64_t begin, int64_t end) {
    std::fill(c.out + begin * size, c.out + end * size, 0.0f);
  });
}

void run_concat(const BatchContext& c) {
  // Member k's output is [a_k; b_k; ...]: one copy per member and slot, straight from where each
  // operand lives (no separate gather).
  const int64_t cols = c.first.shape.cols;
  int64_t row = 0;
  for (size_t slot = 0; slot < c.first.arg_count; ++slot) {
    const Operand x = c.operand(slot);
    for (int64_t k = 0; k < c.n(); ++k)
      c.output(k).middleRows(row, x.shape.rows) = ConstMatrix(x.member(k), x.shape.rows, cols);
    c.count_alone(x, 0, c.n());
    row += x.shape.rows;
  }
  c.stats.kernel_calls += 1;
}

// Per-column log-sum-exp of x (rows x columns). x minus each column's max is written to
// `shifted` (rows x columns, contiguous) and exponentiated there as one flat array, so that every
// exp is a whole vector: Eigen's column-wise sum over an exp expression ran 5-7x slower (partly
// libm's scalar expf on each column's tail). `shifted` then holds exp(x - max).
template <typename M>
Eigen::RowVectorXf log_sum_exp(const M& x, float* shifted) {
  const Eigen::RowVectorXf max = x.colwise().maxCoeff();
  Eigen::Map<Eigen::MatrixXf> y(shifted, x.rows(), x.cols());
  y = x.rowwise() - max;
  Eigen::Map<Eigen::ArrayXf> flat(shifted, x.size());
  flat = flat.exp();
  return max + y.colwise().sum().array().log().matrix();
}

// out = exp(x - lse) per column (out contiguous, rows x columns): a softmax, one flat exp.
template <typename M>
void exp_minus(const M& x, const Eigen::RowVectorXf& lse, Matrix out) {
  out = x.rowwise() - lse;
  Eigen::Map<Eigen::ArrayXf> flat(out.data(), out.size());
  flat = flat.exp();
}

// Softmax and its kin, each column of x on its own: body(begin, end, lse) for pieces of x's
// columns, lse being the log-sum-exp of columns [begin, end), cut across the pool where the batch
// is large enough (split_columns).
template <typename Body>
void by_columns(const BatchContext& c, const StridedConst& x, Body&& body) {
  float* shifted = c.scratch.allocate(size_t(x.size()));
  // An element costs about what 64 flops of a product do (a max, an exp, a sum; and a pick reads
  // its member's node): 2,500 columns of 5 logits took 130 us on one thread.
  split_columns(c, x.cols(), 64 * x.rows(), [&](int64_t begin, int64_t end) {
    body(begin, end, log_sum_exp(x.middleCols(begin, end - begin), shifted + begin * x.rows()));
  });
}

void run_lookup(const BatchContext& c) {
  const ir::ParameterInfo& table = c.values.graph.parameter(c.first.attrs.parameter);
  const int64_t dim = table.shape.rows;
  // Rows of members [begin, end): copies, cut across the pool by members for large batches (a
  // batch of 1,300 words' embeddings is 0.7 MB).
  c.split(c.n(), std::max<int64_t>(1, kMinElementsPerTask / dim), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t entry = c.index(size_t(k));
      std::memcpy(c.out + k * dim, table.data + entry * dim, sizeof(float) * size_t(dim));
    }
  });
  c.stats.kernel_calls += 1;
}

// argmax, kmax_pooling and kmax_pooling's gradient: each member from its own operands, in place,
// at the positions runtime/selection.h's rule picks; cut across the pool by members.
void run_selection(const BatchContext& c) {
  const Operand x = c.operand(0);
  const ir::Shape in = x.shape, shape = c.first.shape;
  const bool gradient = c.first.op == ir::Op::kmax_pooling_grad;
  const Operand dy = gradient ? c.operand(1) : x;
  c.split(c.n(), std::max<int64_t>(1, kMinElementsPerTask / (4 * in.size())), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> kept;
    for (int64_t k = begin; k < end; ++k) {
      const ConstMatrix value(x.member(k), in.rows, in.cols);
      Matrix out = c.output(k);
      switch (c.first.op) {
        case ir::Op::argmax:
          out.setZero();
          for (int64_t j = 0; j < in.cols; ++j) out(argmax_position(value.data() + j * in.rows, in.rows, 1), j) = 1.0f;
          break;
        case ir::Op::kmax_pooling:
          for (int64_t i = 0; i < in.rows; ++i) {
            kmax_positions(value.data() + i, in.cols, in.rows, shape.cols, kept);
            for (int64_t j = 0; j < shape.cols; ++j) out(i, j) = value(i, kept[size_t(j)]);
          }
          break;
        case ir::Op::kmax_pooling_grad: {
          const ConstMatrix d(dy.member(k), dy.shape.rows, dy.shape.cols);
          out.setZero();
          for (int64_t i = 0; i < in.rows; ++i) {
            kmax_positions(value.data() + i, in.cols, in.rows, d.cols(), kept);
            for (int64_t j = 0; j < d.cols(); ++j) out(i, kept[size_t(j)]) = d(i, j);
          }
          break;
        }
        default: throw InternalError("batched executor: run_selection of " + std::string(ir::op_name(c.first.op)));
      }
    }
  });
  c.count_alone(x, 0, c.n());
  if (gradient) c.count_alone(dy, 0, c.n());
  c.stats.kernel_calls += 1;
}

// sum_elements, mean_elements and transpose: each member's value from its own operand, in place.
void run_per_member(const BatchContext& c) {
  const Operand x = c.operand(0);
  for (int64_t k = 0; k < c.n(); ++k) {
    const ConstMatrix value(x.member(k), x.shape.rows, x.shape.cols);
    switch (c.first.op) {
      case ir::Op::sum_elements: c.out[k] = value.sum(); break;
      case ir::Op::mean_elements: c.out[k] = value.mean(); break;
      case ir::Op::transpose: c.output(k) = value.transpose(); break;
      default: throw InternalError("batched executor: run_per_member of " + std::string(ir::op_name(c.first.op)));
    }
  }
  c.count_alone(x, 0, c.n());
  c.stats.kernel_calls += 1;
}


void run_batch(const BatchContext& c) {
  const ir::Node& node = c.first;
  switch (node.op) {
    case ir::Op::input:
    case ir::Op::parameter:
      throw InternalError("batched executor: a leaf was scheduled");
    case ir::Op::call:
      throw InternalError("batched executor: a cell call node outside a batch of calls");
    case ir::Op::lookup: return run_lookup(c);
    case ir::Op::matmul:
    case ir::Op::affine:
    case ir::Op::matvec:
      return run_linear(c);
    case ir::Op::add: return binary(c, [](auto x, auto y) { return x + y; });
    case ir::Op::sub: return binary(c, [](auto x, auto y) { return x - y; });
    case ir::Op::cmult: return binary(c, [](auto x, auto y) { return x * y; });
    case ir::Op::scale: {
      const float s = node.attrs.constant;
      return unary(c, [s](auto x) { return x * s; });
    }
    case ir::Op::add_const: {
      const float s = node.attrs.constant;
      return unary(c, [s](auto x) { return x + s; });
    }
    case ir::Op::tanh: return unary(c, [](auto x) { return x.tanh(); });
    case ir::Op::sigmoid: return unary(c, [](auto x) { return x.logistic(); });
    case ir::Op::relu: return unary(c, [](auto x) { return x.max(0.0f); });
    case ir::Op::sum: return run_sum(c);
    case ir::Op::concat: return run_concat(c);
    case ir::Op::slice: {
      const Operand x = c.operand(0);
      const int begin = node.attrs.begin, rows = node.attrs.end - node.attrs.begin;
      for (int64_t k = 0; k < c.n(); ++k)
        c.output(k) = ConstMatrix(x.member(k), x.shape.rows, x.shape.cols).middleRows(begin, rows);
      c.count_alone(x, 0, c.n());
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::reshape:  // when the plan could not make it a view: copy each member
    case ir::Op::scale_gradient: {
      const Operand x = c.operand(0);
      const int64_t size = node.shape.size();
      for (int64_t k = 0; k < c.n(); ++k) std::copy_n(x.member(k), size, c.out + k * size);
      c.count_alone(x, 0, c.n());
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::softmax: {
      const StridedConst x = c.matrix(c.operand(0));
      Matrix out = c.output();
      by_columns(c, x, [&](int64_t b, int64_t e, const Eigen::RowVectorXf& lse) {
        exp_minus(x.middleCols(b, e - b), lse, Matrix(out.data() + b * out.rows(), out.rows(), e - b));
      });
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::log_softmax: {
      const StridedConst x = c.matrix(c.operand(0));
      Matrix out = c.output();
      by_columns(c, x, [&](int64_t b, int64_t e, const Eigen::RowVectorXf& lse) {
        out.middleCols(b, e - b) = x.middleCols(b, e - b).rowwise() - lse;
      });
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::pick_neg_log_softmax: {  // members are columns: one per column of x
      const StridedConst x = c.matrix(c.operand(0));
      by_columns(c, x, [&](int64_t b, int64_t e, const Eigen::RowVectorXf& lse) {
        for (int64_t k = b; k < e; ++k)
          c.out[k] = lse(k - b) - x(c.index(size_t(k)), k);
      });
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::exp: return unary(c, [](auto x) { return x.exp(); });
    case ir::Op::log: return unary(c, [](auto x) { return x.log(); });
    case ir::Op::sqrt: return unary(c, [](auto x) { return x.sqrt(); });
    case ir::Op::abs: return unary(c, [](auto x) { return x.abs(); });
    case ir::Op::square: return unary(c, [](auto x) { return x.square(); });
    case ir::Op::cube: return unary(c, [](auto x) { return x.cube(); });
    case ir::Op::softsign: return unary(c, [](auto x) { return x / (x.abs() + 1.0f); });
    case ir::Op::silu: return unary(c, [](auto x) { return x * x.logistic(); });
    case ir::Op::elu: {
      const float alpha = node.attrs.constant;
      return unary(c, [alpha](auto x) { return x.unaryExpr([alpha](float v) { return v > 0 ? v : alpha * std::expm1(v); }); });
    }
    case ir::Op::selu:
      return unary(c, [](auto x) {
        return x.unaryExpr([](float v) { return ir::kSeluLambda * (v > 0 ? v : ir::kSeluAlpha * std::expm1(v)); });
      });
    case ir::Op::log_sigmoid:
      return unary(c, [](auto x) {
        return x.unaryExpr([](float v) { return std::min(v, 0.0f) - std::log1p(std::exp(-std::fabs(v))); });
      });
    case ir::Op::erf: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::erf(v); }); });
    case ir::Op::sin: return unary(c, [](auto x) { return x.sin(); });
    case ir::Op::cos: return unary(c, [](auto x) { return x.cos(); });
    case ir::Op::sinh: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::sinh(v); }); });
    case ir::Op::cosh: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::cosh(v); }); });
    case ir::Op::round: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::round(v); }); });
    case ir::Op::ceil: return unary(c, [](auto x) { return x.ceil(); });
    case ir::Op::floor: return unary(c, [](auto x) { return x.floor(); });
    case ir::Op::tan: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::tan(v); }); });
    case ir::Op::asinh: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::asinh(v); }); });
    case ir::Op::acosh: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::acosh(v); }); });
    case ir::Op::atanh: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::atanh(v); }); });
    case ir::Op::asin: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::asin(v); }); });
    case ir::Op::acos: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::acos(v); }); });
    case ir::Op::atan: return unary(c, [](auto x) { return x.unaryExpr([](float v) { return std::atan(v); }); });
    case ir::Op::pow:
      return binary(c, [](auto x, auto y) { return x.binaryExpr(y, [](float a, float b) { return std::pow(a, b); }); });
    case ir::Op::div: return binary(c, [](auto x, auto y) { return x / y; });
    case ir::Op::max: return binary(c, [](auto x, auto y) { return x.binaryExpr(y, [](float a, float b) { return ir::max_of(a, b); }); });
    case ir::Op::min: return binary(c, [](auto x, auto y) { return x.binaryExpr(y, [](float a, float b) { return ir::min_of(a, b); }); });
    case ir::Op::sum_elements:
    case ir::Op::mean_elements:
    case ir::Op::transpose: return run_per_member(c);
    case ir::Op::argmax:
    case ir::Op::kmax_pooling:
    case ir::Op::kmax_pooling_grad: return run_selection(c);
    case ir::Op::matmul_tn: return run_matmul_tn(c);
    case ir::Op::matmul_nt:
    case ir::Op::matmul_nt_rows: return run_matmul_nt(c, c.weight_gradients);
    case ir::Op::tanh_grad: return binary(c, [](auto y, auto dy) { return dy * (1.0f - y.square()); });
    case ir::Op::sigmoid_grad: return binary(c, [](auto y, auto dy) { return dy * y * (1.0f - y); });
    case ir::Op::relu_grad: return binary(c, [](auto y, auto dy) { return (y > 0.0f).select(dy, 0.0f); });
    case ir::Op::softmax_grad: {
      const StridedConst y = c.matrix(c.operand(0)), dy = c.matrix(c.operand(1));
      const Eigen::RowVectorXf dot = y.cwiseProduct(dy).colwise().sum();
      c.output() = y.cwiseProduct(dy - dot.replicate(y.rows(), 1));
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::log_softmax_grad: {
      const StridedConst y = c.matrix(c.operand(0)), dy = c.matrix(c.operand(1));
      c.output() = dy - (y.array().exp().rowwise() * dy.colwise().sum().array()).matrix();
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::pick_neg_log_softmax_grad: {  // members are columns, as in the forward op
      const StridedConst x = c.matrix(c.operand(0)), dl = c.matrix(c.operand(1));
      Matrix out = c.output();
      by_columns(c, x, [&](int64_t b, int64_t e, const Eigen::RowVectorXf& lse) {
        exp_minus(x.middleCols(b, e - b), lse, Matrix(out.data() + b * out.rows(), out.rows(), e - b));
        for (int64_t k = b; k < e; ++k) {
          out(c.index(size_t(k)), k) -= 1.0f;
          out.col(k) *= dl(0, k);
        }
      });
      c.stats.kernel_calls += 1;
      return;
    }
  }
  throw InternalError("batched executor: unknown op");
}

}  // namespace

float* BatchedExecutor::Scratch::allocate(size_t floats) {
  while (used_block_ < blocks_.size()) {
    std::vector<float, Eigen::aligned_allocator<float>>& block = blocks_[used_block_];
    if (block.size() - used_in_block_ >= floats) {
      float* p = block.data() + used_in_block_;
      used_in_block_ += (floats + 15) & ~size_t{15};  // keep 64-byte alignment steps
      return p;
    }
    ++used_block_;
    used_in_block_ = 0;
  }
  blocks_.emplace_back(std::max<size_t>(floats + 16, size_t{1} << 20));
  used_block_ = blocks_.size() - 1;
  used_in_block_ = (floats + 15) & ~size_t{15};
  return blocks_.back().data();
}

size_t BatchedExecutor::Scratch::bytes() const {
  size_t total = 0;
  for (const auto& block : blocks_) total += block.capacity() * sizeof(float);
  return total;
}

void BatchedExecutor::Scratch::trim(size_t max_bytes) {
  if (bytes() <= max_bytes) return;
  blocks_.clear();
  blocks_.shrink_to_fit();
  reset();
  ++trims_;
}

const float** BatchedExecutor::Scratch::allocate_pointers(size_t count) {
  constexpr size_t kFloatsPerPointer = sizeof(uintptr_t) / sizeof(float);
  static_assert(sizeof(uintptr_t) == sizeof(float*) && sizeof(uintptr_t) % sizeof(float) == 0);
  return reinterpret_cast<const float**>(allocate(count * kFloatsPerPointer));
}

std::atomic<int> BatchedExecutor::side_by_side_override{-1};

namespace {
// EDB_SIDE_BY_SIDE=1 turns side by side on, 0 or unset leaves it off (the default while its
// measurements are under way).
bool side_by_side_from_environment() {
  const char* value = std::getenv("EDB_SIDE_BY_SIDE");
  if (!value || std::string_view(value) == "0") return false;
  if (std::string_view(value) == "1") return true;
  throw UsageError(std::string("edbatch: EDB_SIDE_BY_SIDE must be 0 or 1, not '") + value + "'");
}
}  // namespace

BatchedExecutor::BatchedExecutor(int threads)
    : pool_(threads),
      calls_(std::make_unique<CallExpansion>()),
      weight_gradients_(std::make_unique<WeightGradients>()),
      side_(std::make_unique<SideBySide>()),
      side_by_side_here_(side_by_side_from_environment()) {}

BatchedExecutor::~BatchedExecutor() = default;

void BatchedExecutor::set_cache_entries(size_t entries) { calls_->set_capacity(entries); }

void BatchedExecutor::forget_cells() { calls_->clear(); }

void BatchedExecutor::cache_sizes(CacheSizes& sizes) const {
  sizes.scratch = CacheSize{int64_t(scratch_.blocks()), int64_t(scratch_.bytes()), 0, int64_t(Scratch::kMaxBytes),
                            scratch_.trims()};
  sizes.call_expansions = calls_->sizes();
}

void BatchedExecutor::check_consecutive(const Values& values, std::span<const ir::NodeId> members, size_t b) {
  const int64_t size = values.graph.node(members[0]).shape.size();
  for (size_t k = 1; k < members.size(); ++k)
    if (values.plan.offset[members[k]] != values.plan.offset[members[0]] + int64_t(k) * size)
      throw InternalError("batched executor: batch " + std::to_string(b) +
                          "'s outputs are not consecutive in member order (plan contract C1)");
}

BatchContext BatchedExecutor::context(const scheduler::Schedule& schedule, const Values& values, size_t b,
                                      Stats& stats) {
  const std::span<const ir::NodeId> members = schedule.batch(b);
  const ir::Node& first = values.graph.node(members[0]);
  if (ir::is_node_batch(first)) return node_batches(members, values, stats);
  check_consecutive(values, members, b);
  BatchContext c{values, members, first, values.out(members[0]), scratch_, pool_, stats};
  if (depth_ == 1 && weight_gradients_->active()) c.weight_gradients = weight_gradients_.get();
  return c;
}

BatchContext BatchedExecutor::node_batches(std::span<const ir::NodeId> nodes, const Values& values, Stats& stats) {
  if (!table_) table_ = std::make_unique<MemberTable>();
  MemberTable& t = *table_;
  const ir::Graph& graph = values.graph;
  const ir::Node& lead = graph.node(nodes[0]);
  if (!ir::batches_members(lead.op))
    throw InternalError("batched executor: a batch node of " + std::string(ir::op_name(lead.op)));
  const ir::NodeBatch first_batch = ir::node_batch(graph, nodes[0]);
  const size_t slots = first_batch.slots();
  t.first = lead;
  t.first.shape = ir::member_shape(lead);
  t.first.arg_count = uint32_t(slots);
  t.first.attrs.members = 0;
  t.shapes = first_batch.shapes;
  t.parameters.assign(slots, nullptr);
  for (size_t s = 0; s < slots; ++s)
    if (const ir::Node& a = graph.node(graph.args(nodes[0])[s]);
        a.op == ir::Op::parameter && a.shape == t.shapes[s] && first_batch.rows[s] == 0)
      t.parameters[s] = &graph.parameter(a.attrs.parameter);
  t.pointers.clear();
  t.in_arena.clear();
  t.labels.clear();
  int64_t expected = values.plan.offset[nodes[0]];
  for (ir::NodeId id : nodes) {
    // Plan contract C1, node by node: each node's members follow the previous node's.
    if (values.plan.offset[id] != expected)
      throw InternalError("batched executor: batch node %" + std::to_string(id) +
                          "'s members do not follow the previous node's (plan contract C1)");
    expected += graph.node(id).shape.size();
    const ir::NodeBatch batch = ir::node_batch(graph, id);
    if (batch.slots() != slots || batch.shapes != t.shapes)
      throw InternalError("batched executor: batch nodes of one batch read arguments of different shapes");
    const auto args = graph.args(id);
    for (size_t i = 0; i < args.size(); ++i) {
      t.pointers.push_back(values.row(args[i], batch.rows[i]));
      t.in_arena.push_back(values.plan.offset[args[i]] >= 0);
    }
    t.labels.insert(t.labels.end(), batch.labels.begin(), batch.labels.end());
  }
  t.members = int64_t(t.pointers.size() / slots);
  BatchContext c{values, nodes, t.first, values.out(nodes[0]), scratch_, pool_, stats};
  c.table = &t;
  return c;
}

void BatchedExecutor::execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) {
  // A batch of calls run by their bodies executes them here again, inside this evaluation: only the
  // outermost one starts its weight gradients early, tells them which batches ran, and runs
  // independent batches side by side.
  const bool outermost = depth_++ == 0;
  struct Leave {
    BatchedExecutor& e;
    Stats& stats;
    bool outermost;
    ~Leave() {
      --e.depth_;
      if (outermost) stats.early_gradient_blocks += e.weight_gradients_->stop();
    }
  } leave{*this, stats, outermost};
  const int forced = side_by_side_override.load(std::memory_order_relaxed);
  const bool side_by_side = outermost && pool_.size() > 1 && (forced >= 0 ? forced == 1 : side_by_side_here_);
  if (outermost) weight_gradients_->start(schedule, values, pool_);
  if (side_by_side) side_->start(schedule, values, pool_.size());
  const auto beside = [&](size_t i) { return runs_beside(schedule, values, i); };
  for (size_t b = 0; b < schedule.batch_count();) {
    // Windows do not depend on which threads are there at the moment (a batch run whole may round
    // apart from the same batch cut, and two runs must give the same bits).
    size_t end = side_by_side ? side_->window(b, beside) : b + 1;
    if (end - b > 1) run_window(schedule, values, b, end, stats);
    else end = run_alone(schedule, values, b, stats);
    for (; b < end; ++b)
      if (outermost) weight_gradients_->ran(b);
  }
  scratch_.trim(Scratch::kMaxBytes);
  if (side_by_side) side_->trim(Scratch::kMaxBytes);
}

size_t BatchedExecutor::run_alone(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats) {
  if (const size_t end = run_compiled(schedule, values, b, stats); end > b) return end;
  if (values.plan.is_view(schedule.batch(b)[0])) return b + 1;  // the planner made the whole batch a view
  if (values.graph.node(schedule.batch(b)[0]).op == ir::Op::call) {  // a batch of calls: the body's batches
    calls_->run(*this, schedule.batch(b), values, stats, schedule.node_by_node);
    return b + 1;
  }
  scratch_.reset();
  run_batch(context(schedule, values, b, stats));
  return b + 1;
}

void BatchedExecutor::run_window(const scheduler::Schedule& schedule, const Values& values, size_t begin, size_t end,
                                 Stats& stats) {
  // Prepared in order on this thread, then run as one job: views run nothing.
  std::vector<size_t>& runs = window_;
  runs.clear();
  for (size_t b = begin; b < end; ++b) {
    if (values.plan.is_view(schedule.batch(b)[0])) continue;
    Lane& lane = side_->lane(runs.size());  // made here, before the threads read them
    lane.scratch.reset();
    lane.stats = Stats{};  // what a window that threw left there
    prepare_beside(schedule, values, b, runs.size(), lane, stats);
    runs.push_back(b);
  }
  if (SideBySide::verify_windows.load(std::memory_order_relaxed)) side_->verify(runs);
  const std::function<void(int)> task = [&](int k) {
    run_beside(schedule, values, runs[size_t(k)], size_t(k), side_->lane(size_t(k)));
  };
  pool_.parallel_for(int(runs.size()), task);
  for (size_t k = 0; k < runs.size(); ++k) stats += side_->lane(k).stats;
  stats.side_by_side_batches += int64_t(runs.size());
}

bool BatchedExecutor::runs_beside(const scheduler::Schedule& schedule, const Values& values, size_t b) const {
  const ir::NodeId lead = schedule.batch(b)[0];
  if (values.plan.is_view(lead)) return true;
  const ir::Node& first = values.graph.node(lead);
  // Calls re-enter execute(), a batch of batch nodes reads through the executor's one table, and a
  // weight's contraction may have blocks the evaluation runs early (weight_gradients.h).
  return first.op != ir::Op::call && !ir::is_node_batch(first) && first.op != ir::Op::matmul_nt &&
         first.op != ir::Op::matmul_nt_rows;
}

void BatchedExecutor::run_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k,
                                 Lane& lane) {
  (void)k;
  run_batch(lane_context(schedule, values, b, lane));
}

BatchContext BatchedExecutor::lane_context(const scheduler::Schedule& schedule, const Values& values, size_t b,
                                           Lane& lane) {
  const std::span<const ir::NodeId> members = schedule.batch(b);
  check_consecutive(values, members, b);
  return BatchContext{values, members, values.graph.node(members[0]), values.out(members[0]),
                      lane.scratch, lane.pool, lane.stats};
}

}  // namespace edb::runtime
