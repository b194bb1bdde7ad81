// The reductions, distances, losses, selections, normalisations, 1-D convolutions and max
// pooling of DyNet's list (issue 46), composed from batched ops when recorded: each checks its
// arguments under its own name, then records the ops that compute it (their backward rules give
// its gradient). docs/guide.md says which ops each one records.
#include <bit>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "trace/state.h"

namespace edb {

using detail::TraceState;

namespace {

std::string shape_text(const Expr& x) { return std::to_string(x.rows()) + "x" + std::to_string(x.cols()); }

// Checks that every expression is recorded and live (empty ones are refused by `function`'s name)
// and that all have x[0]'s shape; returns x[0]'s trace.
TraceState& same_shapes(const char* function, std::span<const Expr> xs) {
  if (xs.empty()) throw UsageError(std::string(function) + ": needs at least one expression");
  TraceState& s = TraceState::of(xs[0], function);
  for (size_t i = 1; i < xs.size(); ++i) {
    TraceState::of(xs[i], function);
    if (xs[i].rows() != xs[0].rows() || xs[i].cols() != xs[0].cols())
      throw UsageError(std::string(function) + ": argument " + std::to_string(i + 1) + " is " + shape_text(xs[i]) +
                       " but argument 1 is " + shape_text(xs[0]));
  }
  return s;
}

void check_dim(const char* function, int dim) {
  if (dim != 0 && dim != 1)
    throw UsageError(std::string(function) + ": dim is " + std::to_string(dim) +
                     "; expected 0 (over the rows) or 1 (over the columns)");
}

using detail::constant;
using detail::filled;
using detail::selection;

// The sum over one dimension with each term weighted by `weight`: a product with a row or a
// column of that weight (dim 0: 1 x rows times x, 1 x cols; dim 1: x times cols x 1, rows x 1).
Expr weighted_sum_dim(TraceState& s, const Expr& x, int dim, float weight) {
  return dim == 0 ? matmul(filled(s, 1, x.rows(), weight), x) : matmul(x, filled(s, x.cols(), 1, weight));
}

// A 1 x cols (dim 0) or rows x 1 (dim 1) reduction spread back over x's shape.
Expr spread(TraceState& s, const Expr& reduced, const Expr& x, int dim) {
  return dim == 0 ? matmul(filled(s, x.rows(), 1, 1.0f), reduced) : matmul(reduced, filled(s, 1, x.cols(), 1.0f));
}

}  // namespace

Expr detail::constant(TraceState& s, int rows, int cols, std::span<const float> values) {
  ir::Attributes attrs;
  attrs.index = s.data.graph.add_constants(values);
  return s.add(ir::Op::input, {}, ir::Shape{rows, cols}, attrs);
}

namespace {

// The trace's one node of a constant (TraceState::filled_nodes' key), its values made on first use.
template <typename Values>
Expr shared_constant(TraceState& s, int rows, int cols, uint32_t value, int begin, int step, Values&& values) {
  const auto key = std::make_tuple(rows, cols, value, begin, step);
  if (const auto it = s.filled_nodes.find(key); it != s.filled_nodes.end()) return s.make(it->second);
  const Expr made = detail::constant(s, rows, cols, values());
  s.filled_nodes.emplace(key, made.node_id());
  return made;
}

}  // namespace

Expr detail::filled(TraceState& s, int rows, int cols, float value) {
  return shared_constant(s, rows, cols, std::bit_cast<uint32_t>(value), INT32_MIN, INT32_MIN,
                         [&] { return std::vector<float>(size_t(rows) * size_t(cols), value); });
}

Expr detail::selection(TraceState& s, int rows, int cols, int begin, int step) {
  return shared_constant(s, rows, cols, std::bit_cast<uint32_t>(1.0f), begin, step, [&] {
    std::vector<float> values(size_t(rows) * size_t(cols), 0.0f);
    for (int j = 0; j < cols; ++j)
      if (const int row = begin + j * step; row >= 0 && row < rows) values[size_t(j) * size_t(rows) + size_t(row)] = 1.0f;
    return values;
  });
}

Expr concat_cols(std::span<const Expr> xs) {
  const char* function = "edb::concat_cols()";
  if (xs.empty()) throw UsageError(std::string(function) + ": needs at least one expression");
  TraceState::of(xs[0], function);
  int cols = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    TraceState::of(xs[i], function);
    if (xs[i].rows() != xs[0].rows())
      throw UsageError(std::string(function) + ": argument " + std::to_string(i + 1) + " is " + shape_text(xs[i]) +
                       " but argument 1 is " + shape_text(xs[0]) + "; every argument needs as many rows");
    cols += xs[i].cols();
  }
  if (xs.size() == 1) return xs[0];
  // Column-major: the columns side by side are the arguments' values one after another.
  std::vector<Expr> flat;
  for (const Expr& x : xs) flat.push_back(x.cols() == 1 ? x : reshape(x, x.rows() * x.cols(), 1));
  return reshape(concat(flat), xs[0].rows(), cols);
}
Expr concat_cols(std::initializer_list<Expr> xs) { return concat_cols(std::span<const Expr>(xs.begin(), xs.size())); }

Expr logsumexp(std::span<const Expr> xs) {
  same_shapes("edb::logsumexp()", xs);
  if (xs.size() == 1) return xs[0];
  // m + log(sum_i e^(x_i - m)) with m the elementwise maximum: no term overflows.
  Expr m = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) m = max(m, xs[i]);
  std::vector<Expr> terms;
  for (const Expr& x : xs) terms.push_back(exp(x - m));
  return m + log(sum(terms));
}
Expr logsumexp(std::initializer_list<Expr> xs) { return logsumexp(std::span<const Expr>(xs.begin(), xs.size())); }

Expr logsumexp_dim(const Expr& x, int dim) {
  TraceState::of(x, "edb::logsumexp_dim()");
  check_dim("edb::logsumexp_dim()", dim);
  if (dim == 1) return transpose(logsumexp_dim(transpose(x), 0));
  // Per column, x_r - log_softmax(x)_r is the log-sum-exp for every row r: their mean weighted by
  // softmax(x) takes it where the terms are largest, so no row far below the maximum loses digits.
  return sum_dim(cmult(softmax(x), x - log_softmax(x)), 0);
}

Expr sum_dim(const Expr& x, int dim) {
  TraceState& s = TraceState::of(x, "edb::sum_dim()");
  check_dim("edb::sum_dim()", dim);
  return weighted_sum_dim(s, x, dim, 1.0f);
}

Expr mean_dim(const Expr& x, int dim) {
  TraceState& s = TraceState::of(x, "edb::mean_dim()");
  check_dim("edb::mean_dim()", dim);
  return weighted_sum_dim(s, x, dim, 1.0f / float(dim == 0 ? x.rows() : x.cols()));
}

Expr std_dim(const Expr& x, int dim) {
  TraceState& s = TraceState::of(x, "edb::std_dim()");
  check_dim("edb::std_dim()", dim);
  const float weight = 1.0f / float(dim == 0 ? x.rows() : x.cols());
  const Expr deviation = x - spread(s, weighted_sum_dim(s, x, dim, weight), x, dim);
  return sqrt(weighted_sum_dim(s, square(deviation), dim, weight));
}

Expr average(std::span<const Expr> xs) {
  same_shapes("edb::average()", xs);
  if (xs.size() == 1) return xs[0];
  return sum(xs) * (1.0f / float(xs.size()));
}
Expr average(std::initializer_list<Expr> xs) { return average(std::span<const Expr>(xs.begin(), xs.size())); }

Expr dot_product(const Expr& a, const Expr& b) {
  const Expr args[] = {a, b};
  same_shapes("edb::dot_product()", args);
  return sum_elements(cmult(a, b));
}

Expr squared_norm(const Expr& x) {
  TraceState::of(x, "edb::squared_norm()");
  return sum_elements(square(x));
}

Expr l2_norm(const Expr& x) {
  TraceState::of(x, "edb::l2_norm()");
  return sqrt(sum_elements(square(x)));
}

Expr squared_distance(const Expr& a, const Expr& b) {
  const Expr args[] = {a, b};
  same_shapes("edb::squared_distance()", args);
  return sum_elements(square(a - b));
}

Expr l1_distance(const Expr& a, const Expr& b) {
  const Expr args[] = {a, b};
  same_shapes("edb::l1_distance()", args);
  return sum_elements(abs(a - b));
}

Expr huber_distance(const Expr& a, const Expr& b, float c) {
  const Expr args[] = {a, b};
  same_shapes("edb::huber_distance()", args);
  if (!(c > 0.0f) || !std::isfinite(c))
    throw UsageError("edb::huber_distance(): c is " + std::to_string(c) + "; expected a finite number above 0");
  // DyNet's: per element e = |a - b|, e^2 below c, c (2 e - c) from c on; with m = min(e, c) =
  // c - relu(c - e) both are m (2 e - m).
  const Expr e = abs(a - b);
  const Expr m = c - relu(c - e);
  return sum_elements(cmult(m, e * 2.0f - m));
}

Expr hinge(const Expr& x, int64_t index, float margin) {
  TraceState& s = TraceState::of(x, "edb::hinge()");
  if (x.cols() != 1) throw UsageError("edb::hinge(): x is " + shape_text(x) + "; expected a column (rows x 1)");
  if (index < 0 || index >= x.rows())
    throw UsageError("edb::hinge(): index " + std::to_string(index) + " is outside x's " + std::to_string(x.rows()) +
                     " rows");
  if (!std::isfinite(margin))
    throw UsageError("edb::hinge(): margin is " + std::to_string(margin) + "; expected a finite number");
  // (I - 1 e_index^T) x is x_i - x_index for every row; a row of ones but at index sums the rest.
  const int rows = x.rows();
  std::vector<float> differences(size_t(rows) * size_t(rows), 0.0f), others(size_t(rows), 1.0f);
  for (int r = 0; r < rows; ++r) {
    differences[size_t(r) * size_t(rows) + size_t(r)] += 1.0f;           // column r, row r
    differences[size_t(index) * size_t(rows) + size_t(r)] -= 1.0f;       // column index, row r
  }
  others[size_t(index)] = 0.0f;
  return matmul(constant(s, 1, rows, others), relu(matmul(constant(s, rows, rows, differences), x) + margin));
}

Expr binary_log_loss(const Expr& x, const Expr& y) {
  const Expr args[] = {x, y};
  same_shapes("edb::binary_log_loss()", args);
  return sum_elements(cmult(y, log(x)) + cmult(1.0f - y, log(1.0f - x))) * -1.0f;
}

Expr pairwise_rank_loss(const Expr& x, const Expr& y, float margin) {
  const Expr args[] = {x, y};
  same_shapes("edb::pairwise_rank_loss()", args);
  if (!std::isfinite(margin))
    throw UsageError("edb::pairwise_rank_loss(): margin is " + std::to_string(margin) + "; expected a finite number");
  return relu((margin - x) + y);
}

Expr poisson_loss(const Expr& log_lambda, unsigned count) {
  TraceState::of(log_lambda, "edb::poisson_loss()");
  if (log_lambda.rows() != 1 || log_lambda.cols() != 1)
    throw UsageError("edb::poisson_loss(): log_lambda is " + shape_text(log_lambda) + "; expected 1x1");
  // -log(lambda^k e^-lambda / k!) = e^x - k x + log(k!), x = log(lambda).
  return (exp(log_lambda) + log_lambda * -float(count)) + float(std::lgamma(double(count) + 1.0));
}

namespace {

// The rows `rows` of x, in that order: a constant k x rows selection matrix times x.
Expr selected_rows(const char* function, const Expr& x, std::span<const int> rows) {
  TraceState& s = TraceState::of(x, function);
  if (rows.empty()) throw UsageError(std::string(function) + ": needs at least one row");
  const size_t k = rows.size();
  std::vector<float> selection(k * size_t(x.rows()), 0.0f);
  for (size_t j = 0; j < k; ++j) {
    if (rows[j] < 0 || rows[j] >= x.rows())
      throw UsageError(std::string(function) + ": row " + std::to_string(rows[j]) + " is outside x's " +
                       std::to_string(x.rows()) + " rows");
    selection[size_t(rows[j]) * k + j] = 1.0f;
  }
  return matmul(constant(s, int(k), x.rows(), selection), x);
}

// A 1x1 value spread over rows x cols (a product with constant ones on each side needed).
Expr spread_scalar(TraceState& s, const Expr& scalar, int rows, int cols) {
  Expr out = rows > 1 ? matmul(filled(s, rows, 1, 1.0f), scalar) : scalar;
  return cols > 1 ? matmul(out, filled(s, 1, cols, 1.0f)) : out;
}

}  // namespace

Expr select_rows(const Expr& x, std::span<const int> rows) { return selected_rows("edb::select_rows()", x, rows); }
Expr select_rows(const Expr& x, std::initializer_list<int> rows) {
  return selected_rows("edb::select_rows()", x, std::span<const int>(rows.begin(), rows.size()));
}

Expr select_cols(const Expr& x, std::span<const int> cols) {
  TraceState& s = TraceState::of(x, "edb::select_cols()");
  if (cols.empty()) throw UsageError("edb::select_cols(): needs at least one column");
  const size_t n = size_t(x.cols());
  std::vector<float> selection(n * cols.size(), 0.0f);
  for (size_t j = 0; j < cols.size(); ++j) {
    if (cols[j] < 0 || cols[j] >= x.cols())
      throw UsageError("edb::select_cols(): column " + std::to_string(cols[j]) + " is outside x's " +
                       std::to_string(x.cols()) + " columns");
    selection[j * n + size_t(cols[j])] = 1.0f;
  }
  return matmul(x, constant(s, x.cols(), int(cols.size()), selection));
}
Expr select_cols(const Expr& x, std::initializer_list<int> cols) {
  return select_cols(x, std::span<const int>(cols.begin(), cols.size()));
}

Expr pick(const Expr& x, int index) {
  const int rows[] = {index};
  return selected_rows("edb::pick()", x, rows);
}

Expr layer_norm(const Expr& x, const Expr& g, const Expr& b) {
  const Expr args[] = {x, g, b};
  TraceState& s = same_shapes("edb::layer_norm()", args);
  if (x.cols() != 1) throw UsageError("edb::layer_norm(): x is " + shape_text(x) + "; expected a column (rows x 1)");
  // DyNet's: g (x - mean) / (std + 1e-8) + b, the mean and the population std over x's rows.
  const int rows = x.rows();
  const Expr centered = x - spread_scalar(s, mean_dim(x, 0), rows, 1);
  const Expr deviation = sqrt(mean_dim(square(centered), 0)) + 1e-8f;
  return cmult(g, div(centered, spread_scalar(s, deviation, rows, 1))) + b;
}

Expr weight_norm(const Expr& w, const Expr& g) {
  TraceState& s = TraceState::of(w, "edb::weight_norm()");
  TraceState::of(g, "edb::weight_norm()");
  if (g.rows() != 1 || g.cols() != 1)
    throw UsageError("edb::weight_norm(): g is " + shape_text(g) + "; expected 1x1");
  return cmult(w, spread_scalar(s, div(g, sqrt(sum_elements(square(w)))), w.rows(), w.cols()));
}

namespace {

void check_columns_filter(const char* function, const Expr& x, const Expr& f) {
  TraceState::of(x, function);
  TraceState::of(f, function);
  if (f.rows() != x.rows())
    throw UsageError(std::string(function) + ": x is " + shape_text(x) + " but f is " + shape_text(f) +
                     "; expected as many rows (each row filtered by its own)");
}

// y[i][j] = sum_k x[i][j + k - pad] f[i][k] for the out columns j of y, x's columns past its ends
// zero: in x's own space, where x keeps its rows (a cell's block height), sum_k (x S_k) .* (f E_k),
// S_k selecting x's columns k - pad ... k - pad + out - 1 (zero columns where those are not x's)
// and E_k spreading f's column k over the out columns: products with constant selections, which
// lower in a compiled cell as products with per-call or parameter matrices.
Expr filtered_columns(TraceState& s, const Expr& x, const Expr& f, int pad) {
  const int m = f.cols(), out = x.cols() + 2 * pad - m + 1;
  std::vector<Expr> terms;
  for (int k = 0; k < m; ++k)
    terms.push_back(cmult(matmul(x, selection(s, x.cols(), out, k - pad, 1)), matmul(f, selection(s, m, out, k, 0))));
  return terms.size() == 1 ? terms[0] : sum(terms);
}

}  // namespace

Expr conv1d_narrow(const Expr& x, const Expr& f) {
  check_columns_filter("edb::conv1d_narrow()", x, f);
  TraceState& s = TraceState::of(x, "edb::conv1d_narrow()");
  if (f.cols() > x.cols())
    throw UsageError("edb::conv1d_narrow(): f is " + shape_text(f) + " but x is " + shape_text(x) +
                     "; expected at most as many columns as x (conv1d_wide pads x)");
  return filtered_columns(s, x, f, 0);
}

Expr conv1d_wide(const Expr& x, const Expr& f) {
  check_columns_filter("edb::conv1d_wide()", x, f);
  TraceState& s = TraceState::of(x, "edb::conv1d_wide()");
  // x's columns padded with m - 1 columns of zeros on each side.
  return filtered_columns(s, x, f, f.cols() - 1);
}

Expr maxpool1d(const Expr& x, int window, int stride) {
  TraceState& s = TraceState::of(x, "edb::maxpool1d()");
  if (window < 1 || window > x.cols())
    throw UsageError("edb::maxpool1d(): window is " + std::to_string(window) + " but x is " + shape_text(x) +
                     "; expected 1 <= window <= " + std::to_string(x.cols()) + " (x's columns)");
  if (stride < 1) throw UsageError("edb::maxpool1d(): stride is " + std::to_string(stride) + "; expected 1 or more");
  // Output column j is the maximum of x's columns j stride + w, w < window: a max over `window`
  // column selections (products with constant selections, in x's own space where x keeps its
  // rows), folded as max(later, earlier) so that at a tie the earlier column (max's b) takes the
  // gradient.
  const int out = (x.cols() - window) / stride + 1;
  Expr best = matmul(x, selection(s, x.cols(), out, 0, stride));
  for (int w = 1; w < window; ++w) best = max(matmul(x, selection(s, x.cols(), out, w, stride)), best);
  return best;
}

}  // namespace edb
