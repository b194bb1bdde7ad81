// The ops added for model authors: exp, log, div, max, min, sum_elements, mean_elements,
// transpose and dropout. Values against direct formulas, every policy, executor, cells and
// memplan setting against the reference executor (forward and gradients, with the elementwise ones
// inside a compiled cell), shape errors at record time, and dropout's masks.
// (Each op's gradient against finite differences is in gradient_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;
using testing::usage_error;

constexpr int kInstances = 24;

// Instance i's inputs: x and y (4x1, y never 0 and y + 3 > 0) and M (3x2).
std::vector<float> x_of(int i) { return {0.1f * float(i % 7) - 0.3f, 1.5f, -0.25f * float(i % 3), 0.7f}; }
std::vector<float> y_of(int i) { return {0.6f, -0.2f * float(i % 5) - 0.1f, 0.4f, 0.05f * float(i % 4) + 0.7f}; }
std::vector<float> m_of(int i) { return {float(i), -1.0f, 0.5f, 2.0f, float(i % 3) - 1.0f, 0.25f}; }

// The elementwise ops in one body: exp, log, div, max and min, so a compiled cell runs them.
Cell gate_cell() {
  return Cell("gate", {{4, 1}, {4, 1}}, [](Trace&, std::span<const Expr> in) {
    const Expr e = exp(in[0] * 0.5f), l = log(cmult(in[1], in[1]) + 0.1f);
    return std::vector<Expr>{div(max(e, l), in[1] + 3.0f) + min(in[0], in[1])};
  });
}

float gate(float x, float y) {
  const float e = std::exp(0.5f * x), l = std::log(y * y + 0.1f);
  return std::max(e, l) / (y + 3.0f) + std::min(x, y);
}

// Per instance: the gate cell's output, each op alone, and the reductions and transposes of M.
std::vector<Expr> record_instance(Trace& t, const Cell& cell, int i) {
  const Expr x = t.input(x_of(i)), y = t.input(y_of(i)), m = t.input(3, 2, m_of(i));
  return {cell(t, {x, y})[0], exp(x), log(y + 3.0f), div(x, y), max(x, y), min(x, y),
          sum_elements(m), mean_elements(m), transpose(m), transpose(x), sum_elements(cmult(x, y))};
}

std::vector<Tensor> run_all(const EngineOptions& options) {
  EngineOptions checked = options;
  checked.verify = true;
  Engine engine(checked);
  Trace trace(engine);
  const Cell cell = gate_cell();
  std::vector<Expr> outputs;
  for (int i = 0; i < kInstances; ++i)
    for (const Expr& e : record_instance(trace, cell, i)) outputs.push_back(e);
  std::vector<Tensor> values;
  for (const Expr& e : outputs) values.push_back(e.value());
  return values;
}

Tensor column(const std::vector<float>& v) { return Tensor{int(v.size()), 1, v}; }

TEST(ModelAuthorOps, ValuesMatchDirectFormulas) {
  EngineOptions options;
  options.executor = "reference";
  const std::vector<Tensor> values = run_all(options);
  ASSERT_EQ(values.size(), size_t(kInstances) * 11);
  for (int i = 0; i < kInstances; ++i) {
    const std::vector<float> x = x_of(i), y = y_of(i), m = m_of(i);
    const Tensor* v = &values[size_t(i) * 11];
    std::vector<float> gated, e, l, d, mx, mn;
    float dot = 0;
    for (size_t r = 0; r < 4; ++r) {
      gated.push_back(gate(x[r], y[r]));
      e.push_back(std::exp(x[r]));
      l.push_back(std::log(y[r] + 3.0f));
      d.push_back(x[r] / y[r]);
      mx.push_back(std::max(x[r], y[r]));
      mn.push_back(std::min(x[r], y[r]));
      dot += x[r] * y[r];
    }
    float sum = 0;
    for (float value : m) sum += value;
    EXPECT_TRUE(near_relative(v[0], column(gated))) << i;
    EXPECT_TRUE(near_relative(v[1], column(e))) << i;
    EXPECT_TRUE(near_relative(v[2], column(l))) << i;
    EXPECT_TRUE(near_relative(v[3], column(d))) << i;
    EXPECT_TRUE(near_relative(v[4], column(mx))) << i;
    EXPECT_TRUE(near_relative(v[5], column(mn))) << i;
    EXPECT_TRUE(near_relative(v[6], Tensor{1, 1, {sum}})) << i;
    EXPECT_TRUE(near_relative(v[7], Tensor{1, 1, {sum / 6.0f}})) << i;
    // M^T of the column-major 3x2 M: 2x3, (r, c) = M(c, r).
    EXPECT_TRUE(near_relative(v[8], Tensor{2, 3, {m[0], m[3], m[1], m[4], m[2], m[5]}})) << i;
    EXPECT_TRUE(near_relative(v[9], Tensor{1, 4, x})) << i;
    EXPECT_TRUE(near_relative(v[10], Tensor{1, 1, {dot}})) << i;
  }
}

TEST(ModelAuthorOps, EveryPolicyExecutorCellsAndMemplanEqualTheReference) {
  EngineOptions reference;
  reference.executor = "reference";
  reference.policy = "sequential";
  reference.cells = false;
  const std::vector<Tensor> expected = run_all(reference);
  testing::TempDir cache;
  for (const char* policy : {"sequential", "depth", "agenda", "greedy"})
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true})
        for (bool memplan : {false, true}) {
          EngineOptions options;
          options.policy = policy;
          options.executor = executor;
          options.cells = cells;
          options.memplan = memplan;
          options.cache_directory = cache.path();
          const std::vector<Tensor> actual = run_all(options);
          ASSERT_EQ(actual.size(), expected.size());
          for (size_t k = 0; k < actual.size(); ++k)
            ASSERT_TRUE(near_relative(actual[k], expected[k])) << policy << "/" << executor << "/cells " << cells
                                                               << "/memplan " << memplan << ": value " << k;
        }
}

// The gate cell between parameters: its compiled kernel must keep what the backward rules of
// exp, log, div, max and min read (runtime/cell_kernels.cpp), so the jit's gradients through the
// cell equal the reference's node by node.
Gradients cell_gradients(const EngineOptions& options, Model& model) {
  EngineOptions checked = options;
  checked.verify = true;
  Engine engine(checked);
  Trace trace(engine);
  const Cell cell = gate_cell();
  const Parameter W = model.parameter("W"), b = model.parameter("b");
  std::vector<Expr> losses;
  for (int i = 0; i < kInstances; ++i) {
    const Expr x = affine({trace.param(b), trace.param(W), trace.input(x_of(i))});
    const Expr out = cell(trace, {x, trace.input(y_of(i))})[0];
    losses.push_back(sum_elements(cmult(out, trace.input(x_of(i + 1)))) + mean_elements(transpose(x)));
  }
  return trace.backward(sum(losses));
}

// Scalar arithmetic on Expr, as Python has it: c - x, x - c, c + x, x + c, c * x, x * c, x / c, -x,
// in a cell body (compiled under the jit) and outside one.
Cell scalar_cell() {
  return Cell("scalars", {{4, 1}}, [](Trace&, std::span<const Expr> in) {
    const Expr& x = in[0];
    return std::vector<Expr>{tanh(1.5f - x), sigmoid(x - 0.25f), 2.0f + x, x + -3.0f, 0.5f * x, x * 4.0f, x / 8.0f, -x};
  });
}

Gradients scalar_gradients(const EngineOptions& options, Model& model, std::vector<Tensor>* values) {
  EngineOptions checked = options;
  checked.verify = true;
  Engine engine(checked);
  Trace trace(engine);
  const Cell cell = scalar_cell();
  std::vector<Expr> losses, outputs;
  for (int i = 0; i < kInstances; ++i) {
    const Expr x = affine({trace.param(model.parameter("b")), trace.param(model.parameter("W")), trace.input(x_of(i))});
    for (const Expr& out : cell(trace, {x})) {
      outputs.push_back(out);
      losses.push_back(sum_elements(cmult(out, trace.input(y_of(i)))));
    }
    outputs.push_back(2.0f - x / 4.0f);
    losses.push_back(sum_elements(cmult(outputs.back(), trace.input(y_of(i + 1)))));
  }
  const Gradients g = trace.backward(sum(losses));
  if (values)
    for (const Expr& e : outputs) values->push_back(e.value());
  return g;
}

TEST(ModelAuthorOps, ScalarArithmeticOnExprEqualsItsFormulaAndTheReference) {
  Model model("scalars", 4);
  model.add_parameter("W", 4, 4);
  model.add_parameter("b", 4, 1);
  EngineOptions reference;
  reference.executor = "reference";
  reference.policy = "sequential";
  reference.cells = false;
  std::vector<Tensor> expected_values;
  const Gradients expected = scalar_gradients(reference, model, &expected_values);
  // The formulas, from instance 0's x = b + W x_0 (the first value is tanh(1.5 - x)).
  {
    Engine engine(reference);
    Trace trace(engine);
    const Tensor x = affine({trace.param(model.parameter("b")), trace.param(model.parameter("W")), trace.input(x_of(0))}).value();
    const std::vector<float (*)(float)> formulas = {
        [](float v) { return std::tanh(1.5f - v); }, [](float v) { return 1.0f / (1.0f + std::exp(-(v - 0.25f))); },
        [](float v) { return 2.0f + v; },  [](float v) { return v - 3.0f; }, [](float v) { return 0.5f * v; },
        [](float v) { return 4.0f * v; },  [](float v) { return v / 8.0f; }, [](float v) { return -v; },
        [](float v) { return 2.0f - v / 4.0f; }};
    for (size_t k = 0; k < formulas.size(); ++k)
      for (int r = 0; r < 4; ++r)
        EXPECT_NEAR(expected_values[k](r), formulas[k](x(r)), 1e-5f * (1.0f + std::fabs(formulas[k](x(r))))) << "output " << k;
  }
  EXPECT_EQ(usage_error([&] {
    Engine engine;
    Trace trace(engine);
    (void)(trace.input({1.0f}) / 0.0f);
  }), "edb::operator/(Expr, float): division by zero");
  testing::TempDir cache;
  for (const char* policy : {"sequential", "greedy", "agenda"})
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true}) {
        EngineOptions options;
        options.policy = policy;
        options.executor = executor;
        options.cells = cells;
        options.cache_directory = cache.path();
        std::vector<Tensor> values;
        const Gradients actual = scalar_gradients(options, model, &values);
        const std::string where = std::string(policy) + "/" + executor + (cells ? "/cells on" : "/cells off");
        ASSERT_EQ(values.size(), expected_values.size());
        for (size_t k = 0; k < values.size(); ++k) EXPECT_TRUE(near_relative(values[k], expected_values[k])) << where << ": value " << k;
        EXPECT_TRUE(near_relative(actual.loss, expected.loss)) << where;
        for (const char* name : {"W", "b"})
          EXPECT_TRUE(near_relative(*actual.of(model.parameter(name)), *expected.of(model.parameter(name)), 1e-4)) << where << ": " << name;
      }
}

TEST(ModelAuthorOps, GradientsThroughACompiledCellEqualTheReference) {
  Model model("gates", 3);
  model.add_parameter("W", 4, 4);
  model.add_parameter("b", 4, 1);
  EngineOptions reference;
  reference.executor = "reference";
  reference.cells = false;
  const Gradients expected = cell_gradients(reference, model);
  testing::TempDir cache;
  for (const char* executor : {"batched", "jit"})
    for (bool cells : {false, true}) {
      EngineOptions options;
      options.executor = executor;
      options.cells = cells;
      options.cache_directory = cache.path();
      const Gradients actual = cell_gradients(options, model);
      EXPECT_TRUE(near_relative(actual.loss, expected.loss)) << executor << " cells " << cells;
      for (const char* name : {"W", "b"}) {
        const Tensor* mine = actual.of(model.parameter(name));
        ASSERT_NE(mine, nullptr) << name;
        EXPECT_TRUE(near_relative(*mine, *expected.of(model.parameter(name)), 1e-4)) << executor << " cells " << cells << ": " << name;
      }
    }
}

TEST(ModelAuthorOps, ShapeErrorsAreRaisedWhenRecordedAndNameTheOp) {
  Engine engine;
  Trace t(engine);
  const Expr a = t.input({1.0f, 2.0f, 3.0f}), b = t.input({1.0f, 2.0f});
  EXPECT_EQ(usage_error([&] { div(a, b); }), "edb::div(): argument 2 is 2x1 but argument 1 is 3x1");
  EXPECT_EQ(usage_error([&] { max(a, b); }), "edb::max(): argument 2 is 2x1 but argument 1 is 3x1");
  EXPECT_EQ(usage_error([&] { min(b, a); }), "edb::min(): argument 2 is 3x1 but argument 1 is 2x1");
  EXPECT_EQ(usage_error([&] { dropout(a, 1.0f, {}); }),
            "edb::dropout(): p is 1; expected a probability with 0 <= p < 1");
  EXPECT_EQ(usage_error([&] { dropout(a, -0.5f, {.training = true}); }),
            "edb::dropout(): p is -0.5; expected a probability with 0 <= p < 1");
  EXPECT_EQ(usage_error([&] { dropout(a, std::numeric_limits<float>::quiet_NaN(), {}); }),
            "edb::dropout(): p is nan; expected a probability with 0 <= p < 1");
  EXPECT_EQ(usage_error([&] { exp(Expr()); }), "edb::exp(): the expression is empty (default-constructed)");
  EXPECT_EQ(usage_error([&] { dropout(Expr(), 0.5f, {}); }), "edb::dropout(): the expression is empty (default-constructed)");
  Trace other(engine);
  EXPECT_EQ(usage_error([&] { div(a, other.input({1.0f, 2.0f, 3.0f})); }),
            "edb::div(): argument 2 belongs to a different trace than argument 1");
  EXPECT_EQ(transpose(t.input(2, 3, std::vector<float>(6, 1.0f))).rows(), 3);
  EXPECT_EQ(sum_elements(t.input(2, 3, std::vector<float>(6, 1.0f))).cols(), 1);
}

TEST(ModelAuthorOps, LogOfNegativesIsNaNOnEveryExecutorAndMaxPassesNaNOn) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.cache_directory = cache.path();
    Engine engine(options);
    Trace t(engine);
    std::vector<Expr> logs, maxima;
    for (int i = 0; i < 4; ++i) {  // a batch of four, so the batched and jit kernels run them
      logs.push_back(log(t.input({-1.0f, 0.0f, 1.0f, inf})));
      maxima.push_back(max(t.input({nan, 1.0f, 2.0f}), t.input({1.0f, nan, -2.0f})));
    }
    for (int i = 0; i < 4; ++i) {
      const Tensor l = logs[size_t(i)].value(), m = maxima[size_t(i)].value();
      EXPECT_TRUE(std::isnan(l(0))) << executor;
      EXPECT_EQ(l(1), -inf) << executor;
      EXPECT_EQ(l(2), 0.0f) << executor;
      EXPECT_EQ(l(3), inf) << executor;
      EXPECT_TRUE(std::isnan(m(0)) && std::isnan(m(1))) << executor;
      EXPECT_EQ(m(2), 2.0f) << executor;
    }
  }
}

TEST(ModelAuthorOps, DropoutIsTheIdentityAtInferenceAndASeededMaskInTraining) {
  Engine engine(testing::checked_options("jit"));
  Trace t(engine);
  std::vector<float> ones(10000, 1.0f);
  const Expr x = t.input(int(ones.size()), 1, ones);
  const size_t nodes = t.node_count();
  const Expr same = dropout(x, 0.5f, {});
  EXPECT_EQ(same.node_id(), x.node_id());  // at inference nothing is recorded
  EXPECT_EQ(dropout(x, 0.0f, {.training = true, .seed = 3}).node_id(), x.node_id());
  EXPECT_EQ(t.node_count(), nodes);

  const Tensor dropped = dropout(x, 0.25f, {.training = true, .seed = 3}).value();
  int zeros = 0;
  for (float v : dropped.data) {
    if (v == 0.0f) ++zeros;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_GT(zeros, 2300);  // 2500 expected; the binomial's standard deviation is 43
  EXPECT_LT(zeros, 2700);
  // Another dropout of the same x in the same trace draws another mask.
  EXPECT_NE(dropout(x, 0.25f, {.training = true, .seed = 3}).value().data, dropped.data);

  // The same seed and the same recorded trace give the same masks; another seed, others.
  auto masks = [&](uint64_t seed) {
    Trace again(engine);
    const Expr y = again.input(int(ones.size()), 1, ones);
    const size_t before = again.node_count();
    std::vector<float> mask = dropout(y, 0.25f, {.training = true, .seed = seed}).value().data;
    EXPECT_EQ(again.node_count(), before + 2);  // the mask (an input) and cmult
    return mask;
  };
  EXPECT_EQ(masks(3), dropped.data);
  EXPECT_NE(masks(4), dropped.data);
}

// As edbatch.h says: a body is recorded once with cells on, so its calls share one mask; with
// cells off each call records (and draws) its own.
TEST(ModelAuthorOps, DropoutInsideACellBodyDependsOnTheCellsOption) {
  const Cell cell("dropped", {{64, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{dropout(in[0], 0.5f, {.training = true, .seed = 9})};
  });
  for (bool cells : {true, false}) {
    EngineOptions options = testing::checked_options("jit");
    options.cells = cells;
    Engine engine(options);
    Trace t(engine);
    const Expr x = t.input(64, 1, std::vector<float>(64, 1.0f));
    const Tensor first = cell(t, {x})[0].value(), second = cell(t, {x})[0].value();
    // Every value dropped or kept (scaled by 2): none left unwritten (NaN under verify), so that
    // the two masks below differ in what was drawn.
    for (const Tensor* mask : {&first, &second})
      for (float v : mask->data) EXPECT_TRUE(v == 0.0f || v == 2.0f) << v << " cells " << cells;
    if (cells) EXPECT_EQ(first.data, second.data);
    else EXPECT_NE(first.data, second.data);
  }
}

}  // namespace
}  // namespace edb
