// DyNet's broadcasting in the elementwise ops of two arguments (+, -, cmult, div, max, min, pow)
// and concat_cols, by table: each against its definition in double on small shapes (values to
// 1e-5 relative) and its gradients against central differences of that definition (1e-4), under
// every executor, alone and inside a cell, over a batch of calls with different inputs
// (gradient_test.cpp checks them against finite differences of the engine too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;
using Values = std::vector<double>;  // column-major

struct Shape {
  int rows, cols;
  int size() const { return rows * cols; }
};

struct BroadcastCase {
  std::string name;
  Shape a, b, out;
  std::function<Expr(const Expr&, const Expr&)> op;
  std::function<Values(const Values&, const Values&)> value;  // in double
  double b_low = -2, b_high = 2;                              // b's range (a's is [-2, 2])
};

// a op b elementwise over `out`, a dimension of 1 in either read at its index 0.
Values broadcast_of(const Values& a, Shape sa, const Values& b, Shape sb, Shape out,
                    const std::function<double(double, double)>& f) {
  Values y(size_t(out.size()));
  for (int c = 0; c < out.cols; ++c)
    for (int r = 0; r < out.rows; ++r) {
      const double x = a[size_t((sa.cols == 1 ? 0 : c) * sa.rows + (sa.rows == 1 ? 0 : r))];
      const double z = b[size_t((sb.cols == 1 ? 0 : c) * sb.rows + (sb.rows == 1 ? 0 : r))];
      y[size_t(c * out.rows + r)] = f(x, z);
    }
  return y;
}

const std::vector<BroadcastCase>& broadcast_cases() {
  static const std::vector<BroadcastCase> cases = [] {
    struct Op {
      const char* name;
      std::function<Expr(const Expr&, const Expr&)> op;
      std::function<double(double, double)> f;
      double b_low, b_high;
    };
    const std::vector<Op> ops = {
        {"add", [](const Expr& a, const Expr& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2},
        {"sub", [](const Expr& a, const Expr& b) { return a - b; }, [](double a, double b) { return a - b; }, -2, 2},
        {"cmult", [](const Expr& a, const Expr& b) { return cmult(a, b); }, [](double a, double b) { return a * b; }, -2, 2},
        {"div", [](const Expr& a, const Expr& b) { return div(a, b); }, [](double a, double b) { return a / b; }, 0.5, 2},
        {"max", [](const Expr& a, const Expr& b) { return max(a, b); }, [](double a, double b) { return std::max(a, b); }, -2, 2},
        {"min", [](const Expr& a, const Expr& b) { return min(a, b); }, [](double a, double b) { return std::min(a, b); }, -2, 2},
        {"pow", [](const Expr& a, const Expr& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
    };
    // Both orders of a 1x1, a column and a row against a 3x4, a column against a row (both
    // stretch), and a 1x1 against a column.
    const std::vector<std::pair<Shape, Shape>> shapes = {
        {{3, 4}, {1, 1}}, {{1, 1}, {3, 4}}, {{3, 4}, {3, 1}}, {{3, 1}, {3, 4}},
        {{3, 4}, {1, 4}}, {{1, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{3, 1}, {1, 1}},
    };
    std::vector<BroadcastCase> c;
    for (const Op& op : ops)
      for (const auto& [sa, sb] : shapes) {
        const Shape out{std::max(sa.rows, sb.rows), std::max(sa.cols, sb.cols)};
        BroadcastCase k{std::string(op.name) + " " + std::to_string(sa.rows) + "x" + std::to_string(sa.cols) + " with " +
                            std::to_string(sb.rows) + "x" + std::to_string(sb.cols),
                        sa, sb, out, op.op,
                        [=, f = op.f](const Values& a, const Values& b) { return broadcast_of(a, sa, b, sb, out, f); }};
        // pow's base is its first argument: keep it positive (a's range shifted by the op below).
        if (std::string(op.name) == "pow")
          k.op = [](const Expr& a, const Expr& b) { return pow(a + 3.0f, b); },
          k.value = [=, f = op.f](const Values& a, const Values& b) {
            Values shifted = a;
            for (double& v : shifted) v += 3.0;
            return broadcast_of(shifted, sa, b, sb, out, f);
          };
        k.b_low = op.b_low;
        k.b_high = op.b_high;
        c.push_back(k);
      }
    // concat_cols: a 3x1 and a 3x2 side by side, and a 3x2 and a 3x1.
    for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{3, 1}, {3, 2}}, {{3, 2}, {3, 1}}}) {
      const Shape out{3, sa.cols + sb.cols};
      c.push_back({"concat_cols " + std::to_string(sa.cols) + " and " + std::to_string(sb.cols) + " columns", sa, sb, out,
                   [](const Expr& a, const Expr& b) { return concat_cols({a, b}); },
                   [](const Values& a, const Values& b) {
                     Values y = a;
                     y.insert(y.end(), b.begin(), b.end());  // column-major: b's columns follow a's
                     return y;
                   }});
    }
    return c;
  }();
  return cases;
}

constexpr int kCalls = 6;

// Argument a (0 or 1) of call i, element k, spread over its range (a golden-ratio sequence).
double argument_value(const BroadcastCase& c, int a, int i, int k) {
  const double u = std::fmod(0.137 + 0.31 * a + 0.6180339887 * double((i * 2 + a) * 16 + k), 1.0);
  return a == 0 ? -2 + 4 * u : c.b_low + (c.b_high - c.b_low) * u;
}

Values argument_of(const BroadcastCase& c, int a, int i) {
  Values x;
  for (int k = 0; k < (a == 0 ? c.a : c.b).size(); ++k) x.push_back(float(argument_value(c, a, i, k)));
  return x;
}

double loss_weight(int k) { return 0.7 - 0.45 * (k % 4) + 0.1 * k; }

double loss_of(const BroadcastCase& c, const Values& a, const Values& b) {
  const Values y = c.value(a, b);
  double loss = 0;
  for (size_t k = 0; k < y.size(); ++k) loss += loss_weight(int(k)) * y[k];
  return loss;
}

// Call i's arguments are lookups (entry i for the plain op, kCalls + i for the cell's call),
// reshaped to their shapes; each output is weighed into the loss.
testing::WeighedRun run(const BroadcastCase& c, const std::string& executor, bool cells, const LookupTable& ta, const LookupTable& tb) {
  EngineOptions options = testing::checked_options(executor);
  options.cells = cells;
  Engine engine(options);
  const Cell cell("broadcast_" + c.name, {{c.a.size(), 1}, {c.b.size(), 1}}, [&c](Trace&, std::span<const Expr> in) {
    const Expr a = reshape(in[0], c.a.rows, c.a.cols), b = reshape(in[1], c.b.rows, c.b.cols);
    return std::vector<Expr>{reshape(c.op(a, b), c.out.size(), 1) * 1.0f};
  });
  std::vector<float> weights;
  for (int k = 0; k < c.out.size(); ++k) weights.push_back(float(loss_weight(k)));
  Trace trace(engine);
  std::vector<Expr> plain, celled;
  for (int i = 0; i < kCalls; ++i) {
    const Expr a = reshape(trace.lookup(ta, i), c.a.rows, c.a.cols), b = reshape(trace.lookup(tb, i), c.b.rows, c.b.cols);
    plain.push_back(reshape(c.op(a, b), c.out.size(), 1));
    celled.push_back(cell(trace, {trace.lookup(ta, kCalls + i), trace.lookup(tb, kCalls + i)})[0]);
  }
  return testing::weigh_and_backward(trace, trace.input(1, c.out.size(), weights), plain, celled);
}

TEST(Broadcasting, ValuesAndGradientsMatchDoublePrecisionUnderEveryExecutorInAndOutOfCells) {
  for (const BroadcastCase& c : broadcast_cases()) {
    Model model("broadcast");
    const LookupTable ta = model.add_lookup("A", 2 * kCalls, c.a.size());
    const LookupTable tb = model.add_lookup("B", 2 * kCalls, c.b.size());
    for (int i = 0; i < 2 * kCalls; ++i) {
      const Values a = argument_of(c, 0, i % kCalls), b = argument_of(c, 1, i % kCalls);
      for (int k = 0; k < c.a.size(); ++k) ta.values()[size_t(i * c.a.size() + k)] = float(a[size_t(k)]);
      for (int k = 0; k < c.b.size(); ++k) tb.values()[size_t(i * c.b.size() + k)] = float(b[size_t(k)]);
    }
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true}) {
        const std::string where = c.name + " " + executor + (cells ? " cells on" : " cells off");
        const testing::WeighedRun r = run(c, executor, cells, ta, tb);
        for (int i = 0; i < kCalls; ++i) {
          const Values want = c.value(argument_of(c, 0, i), argument_of(c, 1, i));
          const Tensor expected{int(want.size()), 1, std::vector<float>(want.begin(), want.end())};
          EXPECT_TRUE(near_relative(r.plain[size_t(i)], expected)) << where << " call " << i;
          EXPECT_TRUE(near_relative(r.celled[size_t(i)], expected)) << where << " call " << i << " in the cell";
        }
        for (int arg = 0; arg < 2; ++arg) {
          const Gradients::Rows* rows = r.gradients.of(arg == 0 ? ta : tb);
          ASSERT_NE(rows, nullptr) << where;
          ASSERT_EQ(rows->entries.size(), size_t(2 * kCalls)) << where;
          const int size = (arg == 0 ? c.a : c.b).size();
          for (size_t e = 0; e < rows->entries.size(); ++e) {
            const int call = int(rows->entries[e] % kCalls);
            for (int k = 0; k < size; ++k) {
              Values a = argument_of(c, 0, call), b = argument_of(c, 1, call);
              Values& x = arg == 0 ? a : b;
              const double h = 1e-6, v = x[size_t(k)];
              x[size_t(k)] = v + h;
              const double up = loss_of(c, a, b);
              x[size_t(k)] = v - h;
              const double down = loss_of(c, a, b);
              EXPECT_TRUE(near_relative(rows->gradients[e * size_t(size) + size_t(k)], (up - down) / (2 * h), 1e-4))
                  << where << " argument " << arg << " entry " << rows->entries[e] << " element " << k;
            }
          }
        }
      }
  }
}

// Shapes that do not broadcast (a dimension neither equal nor 1) are the op's own UsageError,
// naming both shapes; concat_cols names the argument whose rows differ.
TEST(Broadcasting, ShapesThatDoNotBroadcastAreUsageErrorsNamingTheFunction) {
  Engine engine;
  Trace trace(engine);
  const Expr m = trace.input(3, 4, std::vector<float>(12, 1.0f));
  const Expr column2 = trace.input({1.0f, 2.0f});
  const Expr row3 = trace.input(1, 3, std::vector<float>{1.0f, 2.0f, 3.0f});
  auto expect_error = [](const std::function<void()>& f, const std::string& function, const std::string& shapes) {
    try {
      f();
      ADD_FAILURE() << function << " accepted " << shapes;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(function), std::string::npos) << what;
      EXPECT_NE(what.find(shapes), std::string::npos) << what;
    }
  };
  expect_error([&] { cmult(m, column2); }, "edb::cmult()", "2x1");
  expect_error([&] { (void)(row3 + m); }, "edb::add()", "1x3");
  expect_error([&] { div(column2, m); }, "edb::div()", "3x4");
  expect_error([&] { concat_cols({m, column2}); }, "edb::concat_cols()", "argument 2 is 2x1");
  EXPECT_THROW(concat_cols(std::vector<Expr>{}), UsageError);
  // What fits still records after the errors, and concat_cols of one argument is that argument.
  EXPECT_EQ(cmult(row3, trace.input(2, 1, std::vector<float>{1.0f, -1.0f})).value().data,
            (std::vector<float>{1.0f, -1.0f, 2.0f, -2.0f, 3.0f, -3.0f}));
  EXPECT_EQ(concat_cols({m}).value().data, m.value().data);
}

}  // namespace
}  // namespace edb
