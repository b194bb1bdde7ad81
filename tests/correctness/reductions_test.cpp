// The reductions, distances, losses, selections and normalisations of issue 46, by table: each
// against its formula in double on small shapes (values to 1e-5 relative) and its gradient against
// central differences of that formula in double (1e-4), under every executor, alone and inside a
// cell, over a batch of calls with different inputs (gradient_test.cpp checks each against finite
// differences of the engine); then dropout_dim, block_dropout and noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;
using Values = std::vector<double>;  // column-major

struct ReductionCase {
  std::string name;
  int rows, cols;    // every argument's shape
  int arguments;     // 1, 2 or 3
  int out_rows, out_cols;
  std::function<Expr(std::span<const Expr>)> op;
  std::function<Values(const std::vector<Values>&)> value;  // in double
  double low = -2, high = 2;                                  // the arguments' range
  // Where the gradient is a documented choice, not the formula's slope (argmax's straight-through):
  // argument a's gradient of the loss (each output element k weighed by loss_weight(k)).
  std::function<Values(const std::vector<Values>&, int a)> gradient = nullptr;
};

double at(const Values& v, int rows, int r, int c) { return v[size_t(c * rows + r)]; }

Values sum_dim_of(const Values& x, int rows, int cols, int dim, double weight) {
  Values out(size_t(dim == 0 ? cols : rows), 0.0);
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) out[size_t(dim == 0 ? c : r)] += weight * at(x, rows, r, c);
  return out;
}

Values std_dim_of(const Values& x, int rows, int cols, int dim) {
  const int n = dim == 0 ? rows : cols;
  const Values mean = sum_dim_of(x, rows, cols, dim, 1.0 / n);
  Values out(mean.size(), 0.0);
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) {
      const size_t k = size_t(dim == 0 ? c : r);
      const double d = at(x, rows, r, c) - mean[k];
      out[k] += d * d / n;
    }
  for (double& v : out) v = std::sqrt(v);
  return out;
}

Values logsumexp_dim_of(const Values& x, int rows, int cols, int dim) {
  Values out(size_t(dim == 0 ? cols : rows), 0.0);
  for (size_t k = 0; k < out.size(); ++k) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < (dim == 0 ? rows : cols); ++j) m = std::max(m, dim == 0 ? at(x, rows, j, int(k)) : at(x, rows, int(k), j));
    for (int j = 0; j < (dim == 0 ? rows : cols); ++j) s += std::exp((dim == 0 ? at(x, rows, j, int(k)) : at(x, rows, int(k), j)) - m);
    out[k] = m + std::log(s);
  }
  return out;
}

Values elementwise_sum(const std::vector<Values>& xs, const std::function<double(const std::vector<double>&)>& f) {
  double total = 0;
  for (size_t i = 0; i < xs[0].size(); ++i) {
    std::vector<double> point;
    for (const Values& x : xs) point.push_back(x[i]);
    total += f(point);
  }
  return {total};
}

// The weight of output element k in the loss, so each element's gradient differs.
double loss_weight(int k) { return 0.7 - 0.45 * (k % 4) + 0.1 * k; }

// x where it is its column's largest (the first at ties), 0 elsewhere.
Values argmax_times_x(const Values& x, int rows, int cols) {
  Values out(x.size(), 0.0);
  for (int c = 0; c < cols; ++c) {
    int best = 0;
    for (int r = 1; r < rows; ++r)
      if (at(x, rows, r, c) > at(x, rows, best, c)) best = r;
    out[size_t(c * rows + best)] = at(x, rows, best, c);
  }
  return out;
}

// Per row the k largest values in their column order (of equal values the earlier ones).
Values kmax_of(const Values& x, int rows, int cols, int k) {
  Values out(size_t(rows * k));
  for (int r = 0; r < rows; ++r) {
    std::vector<int> kept;
    for (int c = 0; c < cols; ++c) {
      int above = 0;  // values ranked before column c: larger, or equal and earlier
      for (int o = 0; o < cols; ++o)
        above += at(x, rows, r, o) > at(x, rows, r, c) || (at(x, rows, r, o) == at(x, rows, r, c) && o < c);
      if (above < k) kept.push_back(c);
    }
    for (int j = 0; j < k; ++j) out[size_t(j * rows + r)] = at(x, rows, r, kept[size_t(j)]);
  }
  return out;
}

// softmax (or log_softmax) of each column.
Values column_softmax(const Values& x, int rows, int cols, bool log) {
  Values out(x.size());
  for (int c = 0; c < cols; ++c) {
    double m = -INFINITY, s = 0;
    for (int r = 0; r < rows; ++r) m = std::max(m, at(x, rows, r, c));
    for (int r = 0; r < rows; ++r) s += std::exp(at(x, rows, r, c) - m);
    for (int r = 0; r < rows; ++r) {
      const double l = at(x, rows, r, c) - m - std::log(s);
      out[size_t(c * rows + r)] = log ? l : std::exp(l);
    }
  }
  return out;
}

// y[i][j] = sum_k x[i][j + k] f[i][k], x (rows x cols) padded with m - 1 zero columns each side
// when wide; f the first m columns of `filter` (rows x cols too).
Values conv1d_of(const Values& x, const Values& filter, int rows, int cols, int m, bool wide) {
  const int pad = wide ? m - 1 : 0, out = cols + 2 * pad - m + 1;
  Values y(size_t(rows * out), 0.0);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < out; ++j)
      for (int k = 0; k < m; ++k) {
        const int column = j + k - pad;
        if (column >= 0 && column < cols) y[size_t(j * rows + i)] += at(x, rows, i, column) * at(filter, rows, i, k);
      }
  return y;
}

Values maxpool_of(const Values& x, int rows, int cols, int window, int stride) {
  const int out = (cols - window) / stride + 1;
  Values y(size_t(rows * out), -INFINITY);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < out; ++j)
      for (int w = 0; w < window; ++w) y[size_t(j * rows + i)] = std::max(y[size_t(j * rows + i)], at(x, rows, i, j * stride + w));
  return y;
}

double huber(double d, double c) {
  const double e = std::fabs(d);
  return e < c ? e * e : c * (2 * e - c);
}

const std::vector<ReductionCase>& reduction_cases() {
  static const std::vector<ReductionCase> cases = [] {
    std::vector<ReductionCase> c;
    c.push_back({"logsumexp of 3", 3, 2, 3, 3, 2, [](std::span<const Expr> x) { return logsumexp({x[0], x[1], x[2]}); },
                 [](const std::vector<Values>& x) {
                   Values out(x[0].size());
                   for (size_t i = 0; i < out.size(); ++i)
                     out[i] = std::log(std::exp(x[0][i]) + std::exp(x[1][i]) + std::exp(x[2][i]));
                   return out;
                 }, -4, 4});
    for (int dim : {0, 1}) {
      const std::string d = " dim " + std::to_string(dim);
      const int out_rows = dim == 0 ? 1 : 3, out_cols = dim == 0 ? 4 : 1;
      c.push_back({"logsumexp_dim" + d, 3, 4, 1, out_rows, out_cols, [dim](std::span<const Expr> x) { return logsumexp_dim(x[0], dim); },
                   [dim](const std::vector<Values>& x) { return logsumexp_dim_of(x[0], 3, 4, dim); }, -4, 4});
      c.push_back({"sum_dim" + d, 3, 4, 1, out_rows, out_cols, [dim](std::span<const Expr> x) { return sum_dim(x[0], dim); },
                   [dim](const std::vector<Values>& x) { return sum_dim_of(x[0], 3, 4, dim, 1.0); }});
      c.push_back({"mean_dim" + d, 3, 4, 1, out_rows, out_cols, [dim](std::span<const Expr> x) { return mean_dim(x[0], dim); },
                   [dim](const std::vector<Values>& x) { return sum_dim_of(x[0], 3, 4, dim, dim == 0 ? 1.0 / 3 : 0.25); }});
      c.push_back({"std_dim" + d, 3, 4, 1, out_rows, out_cols, [dim](std::span<const Expr> x) { return std_dim(x[0], dim); },
                   [dim](const std::vector<Values>& x) { return std_dim_of(x[0], 3, 4, dim); }});
    }
    c.push_back({"average of 3", 4, 1, 3, 4, 1, [](std::span<const Expr> x) { return average({x[0], x[1], x[2]}); },
                 [](const std::vector<Values>& x) {
                   Values out(x[0].size());
                   for (size_t i = 0; i < out.size(); ++i) out[i] = (x[0][i] + x[1][i] + x[2][i]) / 3;
                   return out;
                 }});
    c.push_back({"dot_product", 5, 1, 2, 1, 1, [](std::span<const Expr> x) { return dot_product(x[0], x[1]); },
                 [](const std::vector<Values>& x) { return elementwise_sum(x, [](const std::vector<double>& p) { return p[0] * p[1]; }); }});
    c.push_back({"squared_norm", 5, 1, 1, 1, 1, [](std::span<const Expr> x) { return squared_norm(x[0]); },
                 [](const std::vector<Values>& x) { return elementwise_sum(x, [](const std::vector<double>& p) { return p[0] * p[0]; }); }});
    c.push_back({"l2_norm", 3, 2, 1, 1, 1, [](std::span<const Expr> x) { return l2_norm(x[0]); },
                 [](const std::vector<Values>& x) {
                   return Values{std::sqrt(elementwise_sum(x, [](const std::vector<double>& p) { return p[0] * p[0]; })[0])};
                 }});
    c.push_back({"squared_distance", 5, 1, 2, 1, 1, [](std::span<const Expr> x) { return squared_distance(x[0], x[1]); },
                 [](const std::vector<Values>& x) {
                   return elementwise_sum(x, [](const std::vector<double>& p) { return (p[0] - p[1]) * (p[0] - p[1]); });
                 }});
    c.push_back({"l1_distance", 5, 1, 2, 1, 1, [](std::span<const Expr> x) { return l1_distance(x[0], x[1]); },
                 [](const std::vector<Values>& x) {
                   return elementwise_sum(x, [](const std::vector<double>& p) { return std::fabs(p[0] - p[1]); });
                 }});
    c.push_back({"huber_distance", 6, 1, 2, 1, 1, [](std::span<const Expr> x) { return huber_distance(x[0], x[1]); },
                 [](const std::vector<Values>& x) {
                   return elementwise_sum(x, [](const std::vector<double>& p) { return huber(p[0] - p[1], 1.345); });
                 }});
    c.push_back({"huber_distance with c 0.5", 6, 1, 2, 1, 1, [](std::span<const Expr> x) { return huber_distance(x[0], x[1], 0.5f); },
                 [](const std::vector<Values>& x) {
                   return elementwise_sum(x, [](const std::vector<double>& p) { return huber(p[0] - p[1], 0.5); });
                 }});
    c.push_back({"hinge", 5, 1, 1, 1, 1, [](std::span<const Expr> x) { return hinge(x[0], 2); },
                 [](const std::vector<Values>& x) {
                   double total = 0;
                   for (int i = 0; i < 5; ++i)
                     if (i != 2) total += std::max(0.0, 1.0 - x[0][2] + x[0][size_t(i)]);
                   return Values{total};
                 }});
    c.push_back({"hinge with margin 0.5", 4, 1, 1, 1, 1, [](std::span<const Expr> x) { return hinge(x[0], 0, 0.5f); },
                 [](const std::vector<Values>& x) {
                   double total = 0;
                   for (int i = 1; i < 4; ++i) total += std::max(0.0, 0.5 - x[0][0] + x[0][size_t(i)]);
                   return Values{total};
                 }});
    // binary_log_loss of probabilities: sigmoid of the arguments.
    c.push_back({"binary_log_loss", 2, 3, 2, 1, 1,
                 [](std::span<const Expr> x) { return binary_log_loss(sigmoid(x[0]), sigmoid(x[1])); },
                 [](const std::vector<Values>& x) {
                   return elementwise_sum(x, [](const std::vector<double>& p) {
                     const double q = 1 / (1 + std::exp(-p[0])), y = 1 / (1 + std::exp(-p[1]));
                     return -(y * std::log(q) + (1 - y) * std::log(1 - q));
                   });
                 }, -3, 3});
    c.push_back({"pairwise_rank_loss", 4, 1, 2, 4, 1, [](std::span<const Expr> x) { return pairwise_rank_loss(x[0], x[1]); },
                 [](const std::vector<Values>& x) {
                   Values out(x[0].size());
                   for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(0.0, 1.0 - x[0][i] + x[1][i]);
                   return out;
                 }});
    c.push_back({"pairwise_rank_loss with margin 0.25", 4, 1, 2, 4, 1,
                 [](std::span<const Expr> x) { return pairwise_rank_loss(x[0], x[1], 0.25f); },
                 [](const std::vector<Values>& x) {
                   Values out(x[0].size());
                   for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(0.0, 0.25 - x[0][i] + x[1][i]);
                   return out;
                 }});
    c.push_back({"poisson_loss", 1, 1, 1, 1, 1, [](std::span<const Expr> x) { return poisson_loss(x[0], 3); },
                 [](const std::vector<Values>& x) { return Values{std::exp(x[0][0]) - 3 * x[0][0] + std::lgamma(4.0)}; }});
    // Issue 46's selections and normalisations.
    c.push_back({"select_rows", 3, 4, 1, 3, 4, [](std::span<const Expr> x) { return select_rows(x[0], {2, 0, 2}); },
                 [](const std::vector<Values>& x) {
                   Values out;
                   for (int col = 0; col < 4; ++col)
                     for (int r : {2, 0, 2}) out.push_back(at(x[0], 3, r, col));
                   return out;
                 }});
    c.push_back({"select_cols", 3, 4, 1, 3, 2, [](std::span<const Expr> x) { return select_cols(x[0], {3, 1}); },
                 [](const std::vector<Values>& x) {
                   Values out;
                   for (int col : {3, 1})
                     for (int r = 0; r < 3; ++r) out.push_back(at(x[0], 3, r, col));
                   return out;
                 }});
    c.push_back({"pick of a column", 4, 1, 1, 1, 1, [](std::span<const Expr> x) { return pick(x[0], 1); },
                 [](const std::vector<Values>& x) { return Values{x[0][1]}; }});
    c.push_back({"pick of a matrix's row", 3, 4, 1, 1, 4, [](std::span<const Expr> x) { return pick(x[0], 2); },
                 [](const std::vector<Values>& x) {
                   Values out;
                   for (int col = 0; col < 4; ++col) out.push_back(at(x[0], 3, 2, col));
                   return out;
                 }});
    c.push_back({"layer_norm", 5, 1, 3, 5, 1, [](std::span<const Expr> x) { return layer_norm(x[0], x[1], x[2]); },
                 [](const std::vector<Values>& x) {
                   const Values mean = sum_dim_of(x[0], 5, 1, 0, 0.2), std = std_dim_of(x[0], 5, 1, 0);
                   Values out;
                   for (int r = 0; r < 5; ++r) out.push_back(x[1][size_t(r)] * (x[0][size_t(r)] - mean[0]) / (std[0] + 1e-8) + x[2][size_t(r)]);
                   return out;
                 }});
    // weight_norm's g (1x1) from the second argument: the sum of its values.
    c.push_back({"weight_norm", 3, 2, 2, 3, 2,
                 [](std::span<const Expr> x) { return weight_norm(x[0], sum_elements(x[1])); },
                 [](const std::vector<Values>& x) {
                   double norm = 0, g = 0;
                   for (size_t i = 0; i < x[0].size(); ++i) {
                     norm += x[0][i] * x[0][i];
                     g += x[1][i];
                   }
                   Values out;
                   for (double w : x[0]) out.push_back(w * g / std::sqrt(norm));
                   return out;
                 }});
    // Issue 46's selections of their own: argmax (times x, so the taken values are seen; its
    // gradient 0, the formula's away from ties) and kmax_pooling (per row, in column order).
    c.push_back({"argmax times x", 4, 3, 1, 4, 3, [](std::span<const Expr> x) { return cmult(argmax(x[0]), x[0]); },
                 [](const std::vector<Values>& x) { return argmax_times_x(x[0], 4, 3); }});
    c.push_back({"argmax straight-through times x", 4, 3, 1, 4, 3,
                 [](std::span<const Expr> x) { return cmult(argmax(x[0], ArgmaxGradient::straight_through), x[0]); },
                 [](const std::vector<Values>& x) { return argmax_times_x(x[0], 4, 3); }, -2, 2,
                 // d(a x)/dx with the gradient a receives (w x) passed on to x as is: w a + w x.
                 [](const std::vector<Values>& x, int) {
                   const Values taken = argmax_times_x(x[0], 4, 3);
                   Values g;
                   for (size_t k = 0; k < x[0].size(); ++k)
                     g.push_back(loss_weight(int(k)) * ((taken[k] != 0 ? 1.0 : 0.0) + x[0][k]));
                   return g;
                 }});
    c.push_back({"kmax_pooling k 3 of 5", 3, 5, 1, 3, 3, [](std::span<const Expr> x) { return kmax_pooling(x[0], 3); },
                 [](const std::vector<Values>& x) { return kmax_of(x[0], 3, 5, 3); }});
    c.push_back({"kmax_pooling k 1 of 4", 2, 4, 1, 2, 1, [](std::span<const Expr> x) { return kmax_pooling(x[0], 1); },
                 [](const std::vector<Values>& x) { return kmax_of(x[0], 2, 4, 1); }});
    // softmax and log_softmax of a matrix: each column on its own (as DyNet's).
    c.push_back({"softmax of a matrix", 3, 4, 1, 3, 4, [](std::span<const Expr> x) { return softmax(x[0]); },
                 [](const std::vector<Values>& x) { return column_softmax(x[0], 3, 4, false); }, -4, 4});
    c.push_back({"log_softmax of a matrix", 3, 4, 1, 3, 4, [](std::span<const Expr> x) { return log_softmax(x[0]); },
                 [](const std::vector<Values>& x) { return column_softmax(x[0], 3, 4, true); }, -4, 4});
    // conv1d and maxpool1d. The table gives every argument one shape, so a filter of m columns is
    // the first m columns of the second argument (its other columns get no gradient, as the
    // central differences say).
    auto filter = [](const Expr& f, int m) {
      std::vector<int> first;
      for (int k = 0; k < m; ++k) first.push_back(k);
      return m == f.cols() ? f : select_cols(f, first);
    };
    for (int m : {3, 1}) {
      const std::string name = "conv1d_narrow m " + std::to_string(m);
      c.push_back({name, 3, 5, 2, 3, 6 - m, [=](std::span<const Expr> x) { return conv1d_narrow(x[0], filter(x[1], m)); },
                   [=](const std::vector<Values>& x) { return conv1d_of(x[0], x[1], 3, 5, m, false); }});
    }
    c.push_back({"conv1d_wide m 3", 3, 4, 2, 3, 6, [=](std::span<const Expr> x) { return conv1d_wide(x[0], filter(x[1], 3)); },
                 [](const std::vector<Values>& x) { return conv1d_of(x[0], x[1], 3, 4, 3, true); }});
    c.push_back({"conv1d_wide m = n", 2, 3, 2, 2, 5, [](std::span<const Expr> x) { return conv1d_wide(x[0], x[1]); },
                 [](const std::vector<Values>& x) { return conv1d_of(x[0], x[1], 2, 3, 3, true); }});
    c.push_back({"conv1d_narrow m = n", 2, 3, 2, 2, 1, [](std::span<const Expr> x) { return conv1d_narrow(x[0], x[1]); },
                 [](const std::vector<Values>& x) { return conv1d_of(x[0], x[1], 2, 3, 3, false); }});
    for (auto [rows, cols, window, stride] : {std::tuple{3, 7, 3, 2}, {2, 5, 2, 1}, {2, 6, 3, 3}, {2, 4, 1, 1}}) {
      const int out = (cols - window) / stride + 1;
      c.push_back({"maxpool1d " + std::to_string(rows) + "x" + std::to_string(cols) + " window " + std::to_string(window) +
                       " stride " + std::to_string(stride),
                   rows, cols, 1, rows, out, [=](std::span<const Expr> x) { return maxpool1d(x[0], window, stride); },
                   [=](const std::vector<Values>& x) { return maxpool_of(x[0], rows, cols, window, stride); }});
    }
    return c;
  }();
  return cases;
}

constexpr int kCalls = 6;

// Argument a of call i, element k: spread over [low, high] (a golden-ratio sequence per argument).
float argument_value(const ReductionCase& c, int a, int i, int k) {
  const int size = c.rows * c.cols;
  const double u = std::fmod(0.137 + 0.31 * a + 0.6180339887 * double((i * c.arguments + a) * size + k), 1.0);
  return float(c.low + (c.high - c.low) * u);
}

std::vector<Values> arguments_of(const ReductionCase& c, int i) {
  std::vector<Values> x(size_t(c.arguments));
  for (int a = 0; a < c.arguments; ++a)
    for (int k = 0; k < c.rows * c.cols; ++k) x[size_t(a)].push_back(argument_value(c, a, i, k));
  return x;
}

double loss_of(const ReductionCase& c, const std::vector<Values>& x) {
  const Values y = c.value(x);
  double loss = 0;
  for (size_t k = 0; k < y.size(); ++k) loss += loss_weight(int(k)) * y[k];
  return loss;
}

// Call i's arguments are lookups (entry i for the plain op, kCalls + i for the cell's call), each
// reshaped to rows x cols; each output is weighed into the loss.
testing::WeighedRun run(const ReductionCase& c, const std::string& executor, bool cells, const std::vector<LookupTable>& tables) {
  EngineOptions options = testing::checked_options(executor);
  options.cells = cells;
  Engine engine(options);
  const int size = c.rows * c.cols, out_size = c.out_rows * c.out_cols;
  const std::vector<std::pair<int, int>> shapes(size_t(c.arguments), {size, 1});
  const Cell cell("reduction_" + c.name, shapes, [&c, out_size](Trace&, std::span<const Expr> in) {
    std::vector<Expr> x;
    for (const Expr& e : in) x.push_back(reshape(e, c.rows, c.cols));
    return std::vector<Expr>{reshape(c.op(x), out_size, 1) * 1.0f};
  });
  std::vector<float> weights;
  for (int k = 0; k < out_size; ++k) weights.push_back(float(loss_weight(k)));
  Trace trace(engine);
  std::vector<Expr> plain, celled;
  for (int i = 0; i < kCalls; ++i) {
    std::vector<Expr> x, y;
    for (int a = 0; a < c.arguments; ++a) {
      x.push_back(reshape(trace.lookup(tables[size_t(a)], i), c.rows, c.cols));
      y.push_back(trace.lookup(tables[size_t(a)], kCalls + i));
    }
    plain.push_back(reshape(c.op(x), out_size, 1));
    celled.push_back(cell(trace, y)[0]);
  }
  return testing::weigh_and_backward(trace, trace.input(1, out_size, weights), plain, celled);
}

TEST(Reductions, ValuesAndGradientsMatchDoublePrecisionUnderEveryExecutorInAndOutOfCells) {
  testing::TempDir cache;
  for (const ReductionCase& c : reduction_cases()) {
    Model model("reduction");
    std::vector<LookupTable> tables;
    const int size = c.rows * c.cols;
    for (int a = 0; a < c.arguments; ++a) {
      tables.push_back(model.add_lookup("X" + std::to_string(a), 2 * kCalls, size));
      for (int i = 0; i < 2 * kCalls; ++i)
        for (int k = 0; k < size; ++k) tables.back().values()[size_t(i * size + k)] = argument_value(c, a, i % kCalls, k);
    }
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true}) {
        const std::string where = c.name + " " + executor + (cells ? " cells on" : " cells off");
        const testing::WeighedRun r = run(c, executor, cells, tables);
        for (int i = 0; i < kCalls; ++i) {
          const Values want = c.value(arguments_of(c, i));
          Tensor expected{int(want.size()), 1, std::vector<float>(want.begin(), want.end())};
          EXPECT_TRUE(near_relative(r.plain[size_t(i)], expected)) << where << " call " << i;
          EXPECT_TRUE(near_relative(r.celled[size_t(i)], expected)) << where << " call " << i << " in the cell";
        }
        for (int a = 0; a < c.arguments; ++a) {
          const Gradients::Rows* rows = r.gradients.of(tables[size_t(a)]);
          ASSERT_NE(rows, nullptr) << where;
          ASSERT_EQ(rows->entries.size(), size_t(2 * kCalls)) << where;
          for (size_t e = 0; e < rows->entries.size(); ++e) {
            const int call = int(rows->entries[e] % kCalls);
            if (c.gradient) {
              const Values want = c.gradient(arguments_of(c, call), a);
              for (int k = 0; k < size; ++k)
                EXPECT_TRUE(near_relative(rows->gradients[e * size_t(size) + size_t(k)], want[size_t(k)], 1e-4))
                    << where << " argument " << a << " entry " << rows->entries[e] << " element " << k;
              continue;
            }
            for (int k = 0; k < size; ++k) {
              std::vector<Values> x = arguments_of(c, call);
              const double h = 1e-6, v = x[size_t(a)][size_t(k)];
              x[size_t(a)][size_t(k)] = v + h;
              const double up = loss_of(c, x);
              x[size_t(a)][size_t(k)] = v - h;
              const double down = loss_of(c, x);
              EXPECT_TRUE(near_relative(rows->gradients[e * size_t(size) + size_t(k)], (up - down) / (2 * h), 1e-4))
                  << where << " argument " << a << " entry " << rows->entries[e] << " element " << k;
            }
          }
        }
      }
  }
}

TEST(Reductions, ArgumentsAreCheckedWhenRecordedUnderTheFunctionsName) {
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input(2, 3, std::vector<float>(6, 1.0f)), y = trace.input({1.0f, 2.0f});
  EXPECT_EQ(testing::usage_error([&] { sum_dim(x, 2); }), "edb::sum_dim(): dim is 2; expected 0 (over the rows) or 1 (over the columns)");
  EXPECT_EQ(testing::usage_error([&] { std_dim(x, -1); }), "edb::std_dim(): dim is -1; expected 0 (over the rows) or 1 (over the columns)");
  EXPECT_EQ(testing::usage_error([&] { dot_product(x, y); }), "edb::dot_product(): argument 2 is 2x1 but argument 1 is 2x3");
  EXPECT_EQ(testing::usage_error([&] { logsumexp({x, y}); }), "edb::logsumexp(): argument 2 is 2x1 but argument 1 is 2x3");
  EXPECT_EQ(testing::usage_error([&] { average(std::span<const Expr>()); }), "edb::average(): needs at least one expression");
  EXPECT_EQ(testing::usage_error([&] { l1_distance(y, Expr()); }), "edb::l1_distance(): the expression is empty (default-constructed)");
  EXPECT_EQ(testing::usage_error([&] { huber_distance(y, y, 0.0f); }), "edb::huber_distance(): c is 0.000000; expected a finite number above 0");
  EXPECT_EQ(testing::usage_error([&] { squared_norm(Expr()); }), "edb::squared_norm(): the expression is empty (default-constructed)");
  EXPECT_EQ(testing::usage_error([&] { hinge(x, 0); }), "edb::hinge(): x is 2x3; expected a column (rows x 1)");
  EXPECT_EQ(testing::usage_error([&] { hinge(y, 2); }), "edb::hinge(): index 2 is outside x's 2 rows");
  EXPECT_EQ(testing::usage_error([&] { hinge(y, 0, INFINITY); }), "edb::hinge(): margin is inf; expected a finite number");
  EXPECT_EQ(testing::usage_error([&] { binary_log_loss(x, y); }), "edb::binary_log_loss(): argument 2 is 2x1 but argument 1 is 2x3");
  EXPECT_EQ(testing::usage_error([&] { pairwise_rank_loss(y, x); }), "edb::pairwise_rank_loss(): argument 2 is 2x3 but argument 1 is 2x1");
  EXPECT_EQ(testing::usage_error([&] { poisson_loss(y, 2); }), "edb::poisson_loss(): log_lambda is 2x1; expected 1x1");
  EXPECT_EQ(testing::usage_error([&] { select_rows(x, {0, 2}); }), "edb::select_rows(): row 2 is outside x's 2 rows");
  EXPECT_EQ(testing::usage_error([&] { select_rows(x, std::span<const int>()); }), "edb::select_rows(): needs at least one row");
  EXPECT_EQ(testing::usage_error([&] { select_cols(x, {3}); }), "edb::select_cols(): column 3 is outside x's 3 columns");
  EXPECT_EQ(testing::usage_error([&] { pick(y, -1); }), "edb::pick(): row -1 is outside x's 2 rows");
  EXPECT_EQ(testing::usage_error([&] { layer_norm(x, x, x); }), "edb::layer_norm(): x is 2x3; expected a column (rows x 1)");
  EXPECT_EQ(testing::usage_error([&] { layer_norm(y, y, x); }), "edb::layer_norm(): argument 3 is 2x3 but argument 1 is 2x1");
  EXPECT_EQ(testing::usage_error([&] { weight_norm(x, y); }), "edb::weight_norm(): g is 2x1; expected 1x1");
  EXPECT_EQ(testing::usage_error([&] { kmax_pooling(x, 4); }), "edb::kmax_pooling(): k is 4 but x is 2x3; expected 1 <= k <= 3 (x's columns)");
  EXPECT_EQ(testing::usage_error([&] { kmax_pooling(x, 0); }), "edb::kmax_pooling(): k is 0 but x is 2x3; expected 1 <= k <= 3 (x's columns)");
  EXPECT_EQ(testing::usage_error([&] { conv1d_narrow(x, transpose(x)); }), "edb::conv1d_narrow(): x is 2x3 but f is 3x2; expected as many rows (each row filtered by its own)");
  EXPECT_EQ(testing::usage_error([&] { conv1d_narrow(y, x); }), "edb::conv1d_narrow(): f is 2x3 but x is 2x1; expected at most as many columns as x (conv1d_wide pads x)");
  EXPECT_EQ(testing::usage_error([&] { conv1d_wide(x, transpose(x)); }), "edb::conv1d_wide(): x is 2x3 but f is 3x2; expected as many rows (each row filtered by its own)");
  EXPECT_EQ(testing::usage_error([&] { maxpool1d(x, 4, 1); }), "edb::maxpool1d(): window is 4 but x is 2x3; expected 1 <= window <= 3 (x's columns)");
  EXPECT_EQ(testing::usage_error([&] { maxpool1d(x, 2, 0); }), "edb::maxpool1d(): stride is 0; expected 1 or more");
  EXPECT_EQ(testing::usage_error([&] { argmax(Expr()); }), "edb::argmax(): the expression is empty (default-constructed)");
  EXPECT_EQ(testing::usage_error([&] { argmax(x, ArgmaxGradient(7)); }),
            "edb::argmax(): gradient is 7; expected ArgmaxGradient::zero or ArgmaxGradient::straight_through");
}

// At ties argmax takes the first row, kmax_pooling the earlier columns and maxpool1d's gradient
// the earlier column, and kmax_pooling's gradient goes to the columns it took, under every
// executor, in a batch of calls.
TEST(Selections, TiesTakeTheEarlierPositionUnderEveryExecutor) {
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"}) {
    Engine engine(testing::checked_options(executor));
    Model model("ties");
    // Rows: 1 2 1 2 1 | 0 0 3 0 0 | 5 5 5 5 5 (columns 0 and 1 of the first row tie too).
    const Parameter p = model.add_parameter("X", 3, 5);
    const float rows[3][5] = {{1, 2, 1, 2, 1}, {0, 0, 3, 0, 0}, {5, 5, 5, 5, 5}};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 5; ++c) p.values()[size_t(c * 3 + r)] = rows[r][c];
    // Columns 1 1 0 | 0 2 2 | 4 4 4: argmax takes rows 0, 1 and 0.
    const Parameter q = model.add_parameter("Y", 3, 3);
    const std::vector<float> columns = {1, 1, 0, 0, 2, 2, 4, 4, 4};
    std::copy(columns.begin(), columns.end(), q.values().begin());
    Trace trace(engine);
    std::vector<Expr> pooled, tops, taken, terms;
    for (int call = 0; call < 3; ++call) {
      const Expr x = trace.param(p) * float(call + 1);
      pooled.push_back(kmax_pooling(x, 3));
      // Of the same shape with another k: a batch of its own (its output shape is not its
      // argument's type's), so neither reads nor writes the other's places.
      tops.push_back(kmax_pooling(x, 1));
      taken.push_back(argmax(trace.param(q) * float(call + 1)));
      std::vector<float> weights;
      for (int k = 0; k < 9; ++k) weights.push_back(float(10 * (k + 1) + call));
      terms.push_back(sum_elements(cmult(pooled.back(), trace.input(3, 3, weights))));
    }
    // maxpool1d of the row 1 3 3 0 (window 2, stride 1): 3 3 3, from columns 1, 1 (a tie) and 2.
    const Parameter r = model.add_parameter("R", 1, 4);
    const std::vector<float> row = {1, 3, 3, 0};
    std::copy(row.begin(), row.end(), r.values().begin());
    const Expr maxima = maxpool1d(trace.param(r), 2, 1);
    terms.push_back(sum_elements(cmult(maxima, trace.input(1, 3, std::vector<float>{1.0f, 10.0f, 100.0f}))));
    const Gradients g = trace.backward(sum(terms));
    EXPECT_EQ(maxima.value().data, std::vector<float>({3, 3, 3})) << executor;
    ASSERT_NE(g.of(r), nullptr) << executor;
    EXPECT_EQ(g.of(r)->data, std::vector<float>({0, 11, 100, 0})) << executor;
    for (int call = 0; call < 3; ++call) {
      const float s = float(call + 1);
      EXPECT_EQ(tops[size_t(call)].value().data, std::vector<float>({2 * s, 3 * s, 5 * s})) << executor << " call " << call;
    }
    for (int call = 0; call < 3; ++call) {
      const Tensor y = pooled[size_t(call)].value(), a = taken[size_t(call)].value();
      const float scale = float(call + 1);
      const float want[3][3] = {{1, 2, 2}, {0, 0, 3}, {5, 5, 5}};  // columns {0, 1, 3}, {0, 1, 2}, {0, 1, 2}
      for (int r = 0; r < 3; ++r)
        for (int j = 0; j < 3; ++j) EXPECT_EQ(y(r, j), want[r][j] * scale) << executor << " call " << call;
      const int first_largest[3] = {0, 1, 0};
      for (int c = 0; c < 3; ++c)
        for (int r = 0; r < 3; ++r) EXPECT_EQ(a(r, c), r == first_largest[c] ? 1.0f : 0.0f) << executor << " column " << c;
    }
    // The gradient of row r, column j of a call's pooled value is 10 (3 j + r + 1) + call, summed
    // over the calls (times each call's scale) where that column was taken.
    const Tensor* dx = g.of(p);
    ASSERT_NE(dx, nullptr) << executor;
    const int taken_columns[3][3] = {{0, 1, 3}, {0, 1, 2}, {0, 1, 2}};
    for (int r = 0; r < 3; ++r) {
      float want[5] = {0, 0, 0, 0, 0};
      for (int j = 0; j < 3; ++j)
        for (int call = 0; call < 3; ++call) want[taken_columns[r][j]] += float(call + 1) * float(10 * (3 * j + r + 1) + call);
      for (int c = 0; c < 5; ++c) EXPECT_EQ((*dx)(r, c), want[c]) << executor << " row " << r << " column " << c;
    }
  }
}

// dropout_dim, block_dropout and noise: x itself at inference; in training a mask shared along its
// dimension (or over all of x) of 0 and 1 / (1 - p), or noise of the stddev asked for, the same
// for the same seed; the gradient is the mask (noise's 1), under every executor.
TEST(DropoutVariants, MasksAndNoiseFollowTheirDefinitionsAndTheirGradientsAreTheMask) {
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"}) {
    Engine engine(testing::checked_options(executor));
    Model model("dropouts");
    const Parameter w = model.add_parameter("W", 6, 8);
    for (float& v : w.values()) v = 1.0f;
    const DropoutMode training{.training = true, .seed = 5};
    {
      Trace trace(engine);
      const Expr x = trace.param(w);
      EXPECT_EQ(dropout_dim(x, 0, 0.5f, {}).node_id(), x.node_id());
      EXPECT_EQ(block_dropout(x, 0.5f, {}).node_id(), x.node_id());
      EXPECT_EQ(noise(x, 0.5f, {}).node_id(), x.node_id());
    }
    for (int dim : {0, 1}) {
      Trace trace(engine);
      const Expr y = dropout_dim(trace.param(w), dim, 0.5f, training);
      const Gradients g = trace.backward(sum_elements(y));
      const Tensor value = y.value();
      int dropped = 0;
      for (int c = 0; c < 8; ++c)
        for (int r = 0; r < 6; ++r) {
          const float v = value(r, c);
          EXPECT_TRUE(v == 0.0f || v == 2.0f) << executor << " dim " << dim;
          EXPECT_EQ(v, dim == 0 ? value(0, c) : value(r, 0)) << executor << " dim " << dim;
          EXPECT_EQ(g.of(w)->data[size_t(c * 6 + r)], v) << executor << " dim " << dim;
          dropped += v == 0.0f;
        }
      EXPECT_GT(dropped, 0) << executor << " dim " << dim;
      EXPECT_LT(dropped, 48) << executor << " dim " << dim;
    }
    {
      Trace trace(engine);
      const Tensor value = block_dropout(trace.param(w), 0.5f, training).value();
      for (float v : value.data) EXPECT_TRUE(v == value.data[0] && (v == 0.0f || v == 2.0f)) << executor;
    }
    std::vector<float> first;
    for (int round = 0; round < 2; ++round) {
      Trace trace(engine);
      const Expr x = trace.input(2000, 1, std::vector<float>(2000, 3.0f));
      const Expr y = noise(x, 0.5f, training);
      const Gradients g = trace.backward(sum_elements(y * 1.0f));
      (void)g;
      const Tensor value = y.value();
      double mean = 0, square = 0;
      for (float v : value.data) {
        mean += (v - 3.0) / 2000;
        square += (v - 3.0) * (v - 3.0) / 2000;
      }
      EXPECT_NEAR(mean, 0.0, 0.05) << executor;
      EXPECT_NEAR(std::sqrt(square - mean * mean), 0.5, 0.05) << executor;
      if (round == 0) first = value.data;
      else EXPECT_EQ(value.data, first) << executor << ": the same seed, the same noise";
    }
    Trace trace(engine);
    EXPECT_EQ(testing::usage_error([&] { dropout_dim(trace.param(w), 2, 0.5f, training); }),
              "edb::dropout_dim(): dim is 2; expected 0 (one draw per column) or 1 (one per row)");
    EXPECT_EQ(testing::usage_error([&] { block_dropout(trace.param(w), 1.0f, training); }),
              "edb::block_dropout(): p is 1; expected a probability with 0 <= p < 1");
    EXPECT_EQ(testing::usage_error([&] { noise(trace.param(w), -1.0f, training); }),
              "edb::noise(): stddev is -1.000000; expected a finite number, 0 or more");
  }
}

}  // namespace
}  // namespace edb
