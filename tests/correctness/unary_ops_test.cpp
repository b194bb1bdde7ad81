// The unary elementwise ops of issue 46, by table: values against each op's formula in double on
// small shapes (1e-5 relative), and gradients against its derivative in double, under every
// executor, alone and inside a cell, over a batch of calls with different inputs (each op's
// gradient against finite differences is in gradient_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;

struct UnaryCase {
  const char* name;
  Expr (*op)(const Expr&);
  double (*value)(double);
  double (*derivative)(double);
  double low, high;  // the inputs' range: inside the op's domain, never within 0.02 of a kink
};

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }
constexpr double kLambda = 1.0507009873554804934, kAlpha = 1.6732632423543772848;  // selu's

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"sqrt", edb::sqrt, [](double x) { return std::sqrt(x); }, [](double x) { return 0.5 / std::sqrt(x); }, 0.05, 4},
      {"abs", edb::abs, [](double x) { return std::fabs(x); }, [](double x) { return x > 0 ? 1.0 : -1.0; }, -2, 2},
      {"square", edb::square, [](double x) { return x * x; }, [](double x) { return 2 * x; }, -2, 2},
      {"cube", edb::cube, [](double x) { return x * x * x; }, [](double x) { return 3 * x * x; }, -2, 2},
      {"softsign", edb::softsign, [](double x) { return x / (1 + std::fabs(x)); },
       [](double x) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); }, -4, 4},
      {"silu", edb::silu, [](double x) { return x * sigmoid_of(x); },
       [](double x) { return sigmoid_of(x) * (1 + x * (1 - sigmoid_of(x))); }, -6, 6},
      {"elu", [](const Expr& x) { return edb::elu(x); }, [](double x) { return x > 0 ? x : std::expm1(x); },
       [](double x) { return x > 0 ? 1 : std::exp(x); }, -4, 3},
      {"elu", [](const Expr& x) { return edb::elu(x, 0.5f); }, [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); },
       [](double x) { return x > 0 ? 1 : 0.5 * std::exp(x); }, -4, 3},
      {"selu", edb::selu, [](double x) { return kLambda * (x > 0 ? x : kAlpha * std::expm1(x)); },
       [](double x) { return kLambda * (x > 0 ? 1 : kAlpha * std::exp(x)); }, -4, 3},
      {"log_sigmoid", edb::log_sigmoid, [](double x) { return -std::log1p(std::exp(-x)); },
       [](double x) { return sigmoid_of(-x); }, -30, 30},
      {"erf", edb::erf, [](double x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); }, -4, 4},
      {"sin", edb::sin, [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); }, -10, 10},
      {"cos", edb::cos, [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); }, -10, 10},
      {"sinh", edb::sinh, [](double x) { return std::sinh(x); }, [](double x) { return std::cosh(x); }, -5, 5},
      {"cosh", edb::cosh, [](double x) { return std::cosh(x); }, [](double x) { return std::sinh(x); }, -5, 5},
      {"round", edb::round, [](double x) { return std::round(x); }, [](double) { return 0.0; }, -3, 3},
      {"ceil", edb::ceil, [](double x) { return std::ceil(x); }, [](double) { return 0.0; }, -3, 3},
      {"floor", edb::floor, [](double x) { return std::floor(x); }, [](double) { return 0.0; }, -3, 3},
      {"tan", edb::tan, [](double x) { return std::tan(x); }, [](double x) { return 1 + std::tan(x) * std::tan(x); },
       -1.4, 1.4},
      {"asinh", edb::asinh, [](double x) { return std::asinh(x); }, [](double x) { return 1 / std::sqrt(x * x + 1); },
       -6, 6},
      {"acosh", edb::acosh, [](double x) { return std::acosh(x); }, [](double x) { return 1 / std::sqrt(x * x - 1); },
       1.05, 6},
      {"atanh", edb::atanh, [](double x) { return std::atanh(x); }, [](double x) { return 1 / (1 - x * x); }, -0.95,
       0.95},
      {"asin", edb::asin, [](double x) { return std::asin(x); }, [](double x) { return 1 / std::sqrt(1 - x * x); },
       -0.97, 0.97},
      {"acos", edb::acos, [](double x) { return std::acos(x); }, [](double x) { return -1 / std::sqrt(1 - x * x); },
       -0.97, 0.97},
      {"atan", edb::atan, [](double x) { return std::atan(x); }, [](double x) { return 1 / (1 + x * x); }, -12, 12},
  };
  return cases;
}

constexpr int kCalls = 8, kRows = 4;

// Call i's input, row r: spread over [low, high] (a golden-ratio sequence), kept 0.02 from 0.
float input_value(const UnaryCase& c, int i, int r) {
  const double u = std::fmod(0.137 + 0.6180339887 * double(i * kRows + r), 1.0);
  double x = c.low + (c.high - c.low) * u;
  if (std::fabs(x) < 0.02) x = 0.02;
  return float(x);
}

// Loss weights per row, so each row's gradient differs.
constexpr float kWeights[kRows] = {0.7f, -1.3f, 0.4f, 1.1f};

// The op of call i alone (from a lookup, so gradients reach the table) and through a cell whose
// body is op(x) * 1 (fused with the scale), each weighed into the loss.
struct Outcome {
  std::vector<Tensor> plain, celled;
  Gradients gradients;
};

Outcome run(const UnaryCase& c, const std::string& executor, bool cells, LookupTable table, Model&) {
  EngineOptions options = testing::checked_options(executor);
  options.cells = cells;
  Engine engine(options);
  const Cell cell(std::string("unary_") + c.name, {{kRows, 1}}, [&c](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{c.op(in[0]) * 1.0f};
  });
  Outcome result;
  Trace trace(engine);
  const Expr weights = trace.input(1, kRows, std::vector<float>(kWeights, kWeights + kRows));
  std::vector<Expr> plain, celled, terms;
  for (int i = 0; i < kCalls; ++i) {
    plain.push_back(c.op(trace.lookup(table, i)));
    celled.push_back(cell(trace, {trace.lookup(table, kCalls + i)})[0]);
    terms.push_back(matmul(weights, plain.back()));
    terms.push_back(matmul(weights, celled.back()));
  }
  result.gradients = trace.backward(sum(terms));
  for (int i = 0; i < kCalls; ++i) {
    result.plain.push_back(plain[size_t(i)].value());
    result.celled.push_back(celled[size_t(i)].value());
  }
  return result;
}

TEST(UnaryOps, ValuesAndGradientsMatchDoublePrecisionUnderEveryExecutorInAndOutOfCells) {
  testing::TempDir cache;
  for (const UnaryCase& c : unary_cases()) {
    Model model(std::string("unary_") + c.name);
    LookupTable table = model.add_lookup("E", 2 * kCalls, kRows);
    for (int i = 0; i < 2 * kCalls; ++i)
      for (int r = 0; r < kRows; ++r) table.values()[size_t(i * kRows + r)] = input_value(c, i % kCalls, r);
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true}) {
        const std::string where = std::string(c.name) + " " + executor + (cells ? " cells on" : " cells off");
        const Outcome r = run(c, executor, cells, table, model);
        const Gradients::Rows* rows = r.gradients.of(table);
        ASSERT_NE(rows, nullptr) << where;
        ASSERT_EQ(rows->entries.size(), size_t(2 * kCalls)) << where;
        for (int i = 0; i < kCalls; ++i) {
          Tensor expected{kRows, 1, std::vector<float>(kRows)};
          for (int row = 0; row < kRows; ++row) expected.data[size_t(row)] = float(c.value(input_value(c, i, row)));
          EXPECT_TRUE(near_relative(r.plain[size_t(i)], expected)) << where << " call " << i;
          EXPECT_TRUE(near_relative(r.celled[size_t(i)], expected)) << where << " call " << i << " in the cell";
        }
        for (size_t k = 0; k < rows->entries.size(); ++k) {
          const int call = int(rows->entries[k] % kCalls);
          for (int row = 0; row < kRows; ++row) {
            const double want = kWeights[row] * c.derivative(input_value(c, call, row));
            EXPECT_TRUE(near_relative(rows->gradients[k * kRows + size_t(row)], want, 1e-4))
                << where << " gradient of entry " << rows->entries[k] << " row " << row;
          }
        }
      }
  }
}

// The ops' record-time checks are those of every unary op: an empty expression is refused by name.
TEST(UnaryOps, EmptyExpressionsAreUsageErrorsNamingTheOp) {
  for (const UnaryCase& c : unary_cases())
    EXPECT_EQ(testing::usage_error([&] { c.op(Expr()); }),
              "edb::" + std::string(c.name) + "(): the expression is empty (default-constructed)");
}

// elu's alpha is part of the op (its signature, its kernels): a NaN or an infinity is refused.
TEST(UnaryOps, EluRefusesANonFiniteAlpha) {
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input({1.0f, -1.0f});
  EXPECT_EQ(testing::usage_error([&] { edb::elu(x, std::nanf("")); }), "edb::elu(): alpha is nan; expected a finite number");
  EXPECT_EQ(testing::usage_error([&] { edb::elu(x, INFINITY); }), "edb::elu(): alpha is inf; expected a finite number");
  EXPECT_TRUE(near_relative(edb::elu(x, 2.0f).value().data[1], 2.0 * std::expm1(-1.0)));
}

// pow(x, y) of two lookups per call (so both get gradients), alone and through a cell, under
// every executor: values against double, gradients y x^(y-1) and x^y log x against double. Bases
// in [0.2, 3], exponents in [-2, 2.5]; then negative bases to whole exponents (the sign of odd
// powers; y's gradient does not exist there, so the exponents are inputs).
TEST(UnaryOps, PowMatchesDoublePrecisionUnderEveryExecutorInAndOutOfCells) {
  testing::TempDir cache;
  Model model("pow");
  LookupTable bases = model.add_lookup("X", 2 * kCalls, kRows), exponents = model.add_lookup("Y", 2 * kCalls, kRows);
  auto base_of = [](int i, int r) { return float(0.2 + 2.8 * std::fmod(0.31 + 0.6180339887 * (i * kRows + r), 1.0)); };
  auto exponent_of = [](int i, int r) { return float(-2 + 4.5 * std::fmod(0.77 + 0.4142135623 * (i * kRows + r), 1.0)); };
  for (int i = 0; i < 2 * kCalls; ++i)
    for (int r = 0; r < kRows; ++r) {
      bases.values()[size_t(i * kRows + r)] = base_of(i % kCalls, r);
      exponents.values()[size_t(i * kRows + r)] = exponent_of(i % kCalls, r);
    }
  for (const char* executor : {"reference", "batched", "jit"})
    for (bool cells : {false, true}) {
      const std::string where = std::string(executor) + (cells ? " cells on" : " cells off");
      EngineOptions options = testing::checked_options(executor);
      options.cells = cells;
      Engine engine(options);
      const Cell cell("pow", {{kRows, 1}, {kRows, 1}}, [](Trace&, std::span<const Expr> in) {
        return std::vector<Expr>{edb::pow(in[0], in[1]) * 1.0f};
      });
      Trace trace(engine);
      const Expr weights = trace.input(1, kRows, std::vector<float>(kWeights, kWeights + kRows));
      std::vector<Expr> plain, celled, terms;
      for (int i = 0; i < kCalls; ++i) {
        plain.push_back(edb::pow(trace.lookup(bases, i), trace.lookup(exponents, i)));
        celled.push_back(cell(trace, {trace.lookup(bases, kCalls + i), trace.lookup(exponents, kCalls + i)})[0]);
        terms.push_back(matmul(weights, plain.back()));
        terms.push_back(matmul(weights, celled.back()));
      }
      const Gradients gradients = trace.backward(sum(terms));
      for (int i = 0; i < kCalls; ++i)
        for (int r = 0; r < kRows; ++r) {
          const double want = std::pow(double(base_of(i, r)), double(exponent_of(i, r)));
          EXPECT_TRUE(near_relative(plain[size_t(i)].value().data[size_t(r)], want)) << where << " call " << i;
          EXPECT_TRUE(near_relative(celled[size_t(i)].value().data[size_t(r)], want)) << where << " call " << i;
        }
      for (LookupTable table : {bases, exponents}) {
        const Gradients::Rows* rows = gradients.of(table);
        ASSERT_NE(rows, nullptr) << where;
        ASSERT_EQ(rows->entries.size(), size_t(2 * kCalls)) << where;
        for (size_t k = 0; k < rows->entries.size(); ++k) {
          const int call = int(rows->entries[k] % kCalls);
          for (int r = 0; r < kRows; ++r) {
            const double x = base_of(call, r), y = exponent_of(call, r);
            const double derivative = table.name() == "X" ? y * std::pow(x, y - 1) : std::pow(x, y) * std::log(x);
            EXPECT_TRUE(near_relative(rows->gradients[k * kRows + size_t(r)], kWeights[r] * derivative, 1e-4))
                << where << " " << table.name() << " entry " << rows->entries[k] << " row " << r;
          }
        }
      }
    }
}

TEST(UnaryOps, PowOfNegativeBasesToWholeExponentsUnderEveryExecutor) {
  testing::TempDir cache;
  const std::vector<float> x = {-2.5f, -1.5f, -0.5f, 0.0f, -3.0f, 2.0f}, y = {3.0f, 2.0f, -1.0f, 2.0f, 0.5f, -2.0f};
  for (const char* executor : {"reference", "batched", "jit"}) {
    Engine engine(testing::checked_options(executor));
    Trace trace(engine);
    const Tensor value = (edb::pow(trace.input(x), trace.input(y)) * 1.0f).value();
    for (size_t k = 0; k < x.size(); ++k) {
      const double want = std::pow(double(x[k]), double(y[k]));
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(value.data[k])) << executor << " " << k;
      else EXPECT_TRUE(near_relative(value.data[k], want)) << executor << " " << k;
    }
  }
}

TEST(UnaryOps, PowChecksShapesWhenRecorded) {
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input({1.0f, 2.0f}), y = trace.input({1.0f, 2.0f, 3.0f});
  EXPECT_NE(testing::usage_error([&] { edb::pow(x, y); }).find("edb::pow()"), std::string::npos);
}

}  // namespace
}  // namespace edb
