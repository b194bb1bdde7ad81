// The reductions, distances and losses of DyNet's list (issue 46), composed from batched ops when
// recorded: each checks its arguments under its own name, then records the ops that compute it
// (their backward rules give its gradient). docs/guide.md says which ops each one records.
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

// A rows x cols input of one value, in x's trace (inside a cell body, a constant of the body).
Expr filled(TraceState& s, int rows, int cols, float value) {
  ir::Attributes attrs;
  attrs.index = s.data.graph.add_constants(std::vector<float>(size_t(rows) * size_t(cols), value));
  return s.add(ir::Op::input, {}, ir::Shape{rows, cols}, attrs);
}

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
  ir::Attributes attrs;
  attrs.index = s.data.graph.add_constants(differences);
  const Expr difference_matrix = s.add(ir::Op::input, {}, ir::Shape{rows, rows}, attrs);
  attrs.index = s.data.graph.add_constants(others);
  const Expr other_rows = s.add(ir::Op::input, {}, ir::Shape{1, rows}, attrs);
  return matmul(other_rows, relu(matmul(difference_matrix, x) + margin));
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

}  // namespace edb
