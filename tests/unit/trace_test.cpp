// Unit tests for trace/ through the public API: every op's value against a hand computation,
// parameter nodes, incremental evaluation, stale and mixed Exprs, Engine options and stats.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::usage_error;

using edb::testing::near_relative;

// Deterministic values in [-2, 2) that differ per seed.
std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(s >> 8) / float(1 << 24) * 4.0f - 2.0f;
  }
  return v;
}

Tensor tensor(int rows, int cols, std::vector<float> data) { return Tensor{rows, cols, std::move(data)}; }

template <typename F>
Tensor map(const Tensor& x, F f) {
  Tensor out = x;
  for (float& v : out.data) v = f(v);
  return out;
}

// out = a * b for column-major a (r x k) and b (k x c).
Tensor product(const Tensor& a, const Tensor& b) {
  Tensor out{a.rows, b.cols, std::vector<float>(size_t(a.rows) * b.cols, 0.0f)};
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < b.cols; ++j) {
      double acc = 0;
      for (int k = 0; k < a.cols; ++k) acc += double(a(i, k)) * b(k, j);
      out.data[size_t(j) * a.rows + i] = float(acc);
    }
  return out;
}

template <typename F>
Tensor zip(const Tensor& a, const Tensor& b, F f) {
  Tensor out = a;
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = f(a.data[i], b.data[i]);
  return out;
}

EngineOptions verifying() {
  EngineOptions o;
  o.policy = "sequential";  // the oracle: these tests pin what each op means
  o.executor = "reference";
  o.verify = true;
  return o;
}

class TraceOps : public ::testing::Test {
 protected:
  Engine engine{verifying()};
  Trace trace{engine};
  Tensor a = tensor(3, 4, values(12, 1)), b = tensor(4, 2, values(8, 2));
  Tensor x = tensor(3, 2, values(6, 3)), y = tensor(3, 2, values(6, 4));
  Expr in(const Tensor& t) { return trace.input(t.rows, t.cols, t.data); }
};

TEST_F(TraceOps, MatrixProducts) {
  EXPECT_TRUE(near_relative(matmul(in(a), in(b)).value(), product(a, b)));
  const Tensor v = tensor(4, 1, values(4, 5));
  EXPECT_TRUE(near_relative(matvec(in(a), in(v)).value(), product(a, v)));

  Model model("m", 3);
  const Parameter bias = model.add_parameter("b", 3, 1), w1 = model.add_parameter("W1", 3, 4),
                  w2 = model.add_parameter("W2", 3, 2);
  auto as_tensor = [](const Parameter& p) {
    return tensor(p.rows(), p.cols(), std::vector<float>(p.values().begin(), p.values().end()));
  };
  const Tensor x1 = tensor(4, 1, values(4, 6)), x2 = tensor(2, 1, values(2, 7));
  const Tensor expected = zip(zip(as_tensor(bias), product(as_tensor(w1), x1), std::plus<float>()),
                              product(as_tensor(w2), x2), std::plus<float>());
  const Expr out = affine({trace.param(bias), trace.param(w1), in(x1), trace.param(w2), in(x2)});
  EXPECT_TRUE(near_relative(out.value(), expected));
  EXPECT_EQ(out.rows(), 3);
  EXPECT_EQ(out.cols(), 1);
}

TEST_F(TraceOps, BinaryElementwise) {
  EXPECT_TRUE(near_relative((in(x) + in(y)).value(), zip(x, y, std::plus<float>())));
  EXPECT_TRUE(near_relative((in(x) - in(y)).value(), zip(x, y, std::minus<float>())));
  EXPECT_TRUE(near_relative(cmult(in(x), in(y)).value(), zip(x, y, std::multiplies<float>())));
  const Tensor z = tensor(3, 2, values(6, 8));
  Tensor expected = zip(zip(x, y, std::plus<float>()), z, std::plus<float>());
  EXPECT_TRUE(near_relative(sum({in(x), in(y), in(z)}).value(), expected));
  EXPECT_TRUE(near_relative(sum({in(x)}).value(), x));
}

TEST_F(TraceOps, ConstantsAndActivations) {
  auto times = [](float c) { return [c](float v) { return v * c; }; };
  auto plus = [](float c) { return [c](float v) { return v + c; }; };
  EXPECT_TRUE(near_relative((in(x) * 2.5f).value(), map(x, times(2.5f))));
  EXPECT_TRUE(near_relative((-0.5f * in(x)).value(), map(x, times(-0.5f))));
  EXPECT_TRUE(near_relative((in(x) + 1.5f).value(), map(x, plus(1.5f))));
  EXPECT_TRUE(near_relative((-3.0f + in(x)).value(), map(x, plus(-3.0f))));
  EXPECT_TRUE(near_relative(tanh(in(x)).value(), map(x, [](float v) { return std::tanh(v); })));
  EXPECT_TRUE(near_relative(sigmoid(in(x)).value(),
                            map(x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); })));
  const Tensor relu_expected = map(x, [](float v) { return v > 0 ? v : 0.0f; });
  ASSERT_NE(relu_expected.data, x.data);  // x has negatives, so relu must change something
  EXPECT_TRUE(near_relative(relu(in(x)).value(), relu_expected));
}

TEST_F(TraceOps, ConcatAndSlice) {
  const Tensor top = tensor(2, 2, {1, 2, 3, 4}), bottom = tensor(1, 2, {5, 6});
  EXPECT_TRUE(near_relative(concat({in(top), in(bottom)}).value(), tensor(3, 2, {1, 2, 5, 3, 4, 6})));
  const Tensor column = tensor(5, 1, {10, 11, 12, 13, 14});
  EXPECT_TRUE(near_relative(slice(in(column), 1, 4).value(), tensor(3, 1, {11, 12, 13})));
  EXPECT_TRUE(near_relative(slice(in(x), 2, 3).value(), tensor(1, 2, {x(2, 0), x(2, 1)})));
}

TEST_F(TraceOps, SoftmaxFamilyPerColumn) {
  Tensor soft = x, log_soft = x;
  for (int j = 0; j < x.cols; ++j) {
    double total = 0;
    for (int i = 0; i < x.rows; ++i) total += std::exp(double(x(i, j)));
    for (int i = 0; i < x.rows; ++i) {
      soft.data[size_t(j) * 3 + i] = float(std::exp(double(x(i, j))) / total);
      log_soft.data[size_t(j) * 3 + i] = float(double(x(i, j)) - std::log(total));
    }
  }
  EXPECT_TRUE(near_relative(softmax(in(x)).value(), soft));
  EXPECT_TRUE(near_relative(log_softmax(in(x)).value(), log_soft));
  const Tensor logits = tensor(4, 1, {1.0f, 2.0f, 3.0f, 1000.0f});  // stable for large values
  const double lse = 1000.0 + std::log(1 + std::exp(-997.0) + std::exp(-998.0) + std::exp(-999.0));
  EXPECT_TRUE(near_relative(pick_neg_log_softmax(in(logits), 1).scalar(), lse - 2.0));
  EXPECT_TRUE(near_relative(pick_neg_log_softmax(in(logits), 3).scalar(), lse - 1000.0));
  const Tensor small = tensor(2, 1, {0.0f, 0.0f});
  EXPECT_TRUE(near_relative(pick_neg_log_softmax(in(small), 0).scalar(), std::log(2.0)));
}

TEST_F(TraceOps, LookupReturnsTheEntry) {
  Model model("m");
  const LookupTable table = model.add_lookup("E", 10, 4);
  const std::span<float> all = table.values();
  EXPECT_EQ(table.entries(), 10);
  EXPECT_EQ(table.dim(), 4);
  ASSERT_EQ(all.size(), 40u);
  for (int entry : {0, 7, 9}) {
    const Tensor expected = tensor(4, 1, std::vector<float>(all.begin() + entry * 4, all.begin() + entry * 4 + 4));
    EXPECT_TRUE(near_relative(trace.lookup(table, entry).value(), expected)) << entry;
  }
  EXPECT_EQ(usage_error([&] { trace.lookup(table, 10); }),
            "edb::Trace::lookup(): entry 10 is outside table 'E' of 10 entries");
  EXPECT_EQ(usage_error([&] { trace.lookup(table, -1); }),
            "edb::Trace::lookup(): entry -1 is outside table 'E' of 10 entries");
}

TEST_F(TraceOps, ParamIsOneNodePerTrace) {
  Model model("m");
  const Parameter w = model.add_parameter("W", 2, 2), u = model.add_parameter("U", 2, 2);
  const Expr first = trace.param(w);
  const size_t count = trace.node_count();
  const Expr again = trace.param(w);
  EXPECT_EQ(first.node_id(), again.node_id());
  EXPECT_EQ(trace.node_count(), count);
  EXPECT_NE(trace.param(u).node_id(), first.node_id());
  EXPECT_EQ(trace.node_count(), count + 1);
  Trace other(engine);  // another trace gets its own node
  EXPECT_EQ(other.param(u).node_id(), 0u);
}

TEST_F(TraceOps, ShapeErrorsAtRecordTimeAddNothing) {
  Model model("m");
  const Parameter w = model.add_parameter("W1", 384, 256), bias = model.add_parameter("b", 384, 1);
  const Expr small = trace.input(std::vector<float>(128, 1.0f));
  const Expr pb = trace.param(bias), pw = trace.param(w);
  const size_t count = trace.node_count();
  EXPECT_EQ(usage_error([&] { affine({pb, pw, small}); }),
            "edb::affine(): W1 is 384x256 but x1 has 128 rows");
  EXPECT_EQ(usage_error([&] { slice(small, 5, 200); }),
            "edb::slice(): rows [5, 200) are not a non-empty range inside 128x1");
  EXPECT_EQ(trace.node_count(), count);
  EXPECT_EQ(usage_error([&] { trace.input(2, 2, values(3, 1)); }),
            "edb::Trace::input(): shape 2x2 does not match 3 values");
  EXPECT_EQ(usage_error([&] { sum(std::span<const Expr>()); }),
            "edb::sum(): needs at least one argument");
}

TEST(TraceEvaluation, IncrementalValuesStayRight) {
  Engine engine(verifying());
  Trace trace(engine);
  const Expr x = trace.input({0.5f, -1.0f});
  const Expr a = tanh(x);
  const Tensor a_expected = tensor(2, 1, {std::tanh(0.5f), std::tanh(-1.0f)});
  EXPECT_TRUE(near_relative(a.value(), a_expected));
  EXPECT_EQ(engine.stats().nodes, 1);
  const Expr y = trace.input({2.0f, 3.0f});
  const Expr b = a * 2.0f + y;
  const Expr c = cmult(b, a);
  const Tensor b_expected = tensor(2, 1, {2 * std::tanh(0.5f) + 2, 2 * std::tanh(-1.0f) + 3});
  EXPECT_TRUE(near_relative(c.value(), zip(b_expected, a_expected, std::multiplies<float>())));
  EXPECT_EQ(engine.stats().nodes, 4);
  EXPECT_TRUE(near_relative(b.value(), b_expected));
  EXPECT_TRUE(near_relative(a.value(), a_expected));
  EXPECT_EQ(engine.stats().nodes, 4);  // nothing evaluated twice
  trace.run();
  EXPECT_EQ(engine.stats().nodes, 4);
  const Expr d = relu(c);
  trace.run();
  EXPECT_EQ(engine.stats().nodes, 5);
  EXPECT_TRUE(near_relative(d.value(), map(c.value(), [](float v) { return v > 0 ? v : 0.0f; })));
}

TEST(TraceEvaluation, StatsCountNodesAndFlops) {
  Engine engine(verifying());
  Model model("m");
  const Parameter w = model.add_parameter("W", 3, 4);
  const LookupTable table = model.add_lookup("E", 5, 4);
  {
    Trace trace(engine);
    const Expr x = trace.lookup(table, 2);                // 1 node, 0 flops
    const Expr h = tanh(matmul(trace.param(w), x));       // 24 + 3
    const Expr loss = pick_neg_log_softmax(sum({h, h}), 0);  // 3 + 9
    loss.value();
  }
  const Stats& s = engine.stats();
  EXPECT_EQ(s.nodes, 5);
  EXPECT_EQ(s.flops, 2 * 3 * 4 + 3 + 3 + 3 * 3);
  EXPECT_EQ(s.batches, 5);  // sequential: one node per batch
  EXPECT_EQ(s.kernel_calls, 5);
  EXPECT_EQ(s.lower_bound, 5);  // a chain of five distinct types
  EXPECT_EQ(s.kernels_compiled, 0);
  EXPECT_EQ(engine.signature_count(), 5u);
  engine.reset_stats();
  EXPECT_EQ(engine.stats().nodes, 0);
  EXPECT_EQ(engine.stats().flops, 0);
  EXPECT_EQ(engine.signature_count(), 5u);  // reset_stats keeps the signature table
}

TEST(TraceLifetime, FinishedTraceRejectsItsExprs) {
  Engine engine(verifying());
  Trace trace(engine);
  const Expr x = trace.input({1.0f, 2.0f});
  const Expr t = tanh(x);
  trace.finish();
  EXPECT_EQ(usage_error([&] { t.value(); }),
            "edb::Expr::value(): the expression belongs to a trace that has finished");
  EXPECT_EQ(usage_error([&] { x.rows(); }),
            "edb::Expr::rows(): the expression belongs to a trace that has finished");
  EXPECT_EQ(usage_error([&] { relu(x); }),
            "edb::relu(): the expression belongs to a trace that has finished");
  EXPECT_EQ(usage_error([&] { trace.input({1.0f}); }), "edb::Trace::input(): the trace has finished (or its Engine was destroyed)");
  EXPECT_EQ(usage_error([&] { trace.run(); }), "edb::Trace::run(): the trace has finished (or its Engine was destroyed)");
  EXPECT_EQ(trace.node_count(), 0u);
  EXPECT_NO_THROW(trace.finish());  // twice is fine
  EXPECT_EQ(usage_error([] { Expr().value(); }),
            "edb::Expr::value(): the expression is empty (default-constructed)");
}

TEST(TraceLifetime, DestroyedTraceRejectsItsExprsEvenWhenTheSlotIsReused) {
  Engine engine(verifying());
  Expr stale;
  {
    Trace trace(engine);
    stale = trace.input({1.0f, 2.0f});
    EXPECT_EQ(stale.value()(1), 2.0f);
  }
  Trace reused(engine);
  const Expr fresh = reused.input({7.0f, 8.0f});
  ASSERT_EQ(fresh.node_id(), stale.node_id());  // same id in the new trace
  EXPECT_EQ(usage_error([&] { stale.value(); }),
            "edb::Expr::value(): the expression belongs to a trace that has finished");
  EXPECT_EQ(usage_error([&] { fresh + stale; }),
            "edb::add(): the expression belongs to a trace that has finished");
  EXPECT_EQ(fresh.value()(0), 7.0f);
}

TEST(TraceLifetime, ExprsOfTwoTracesDoNotMix) {
  Engine engine(verifying());
  Trace first(engine), second(engine);
  const Expr a = first.input({1.0f}), b = second.input({2.0f});
  EXPECT_EQ(usage_error([&] { a + b; }),
            "edb::add(): argument 2 belongs to a different trace than argument 1");
  EXPECT_EQ(usage_error([&] { concat({a, a, b}); }),
            "edb::concat(): argument 3 belongs to a different trace than argument 1");
  EXPECT_EQ(first.node_count(), 1u);
  EXPECT_EQ(second.node_count(), 1u);
}

// The lists of available names grow as policies, executors and devices land, so only their
// start is pinned.
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(TraceEngine, UnknownOptionsNameTheBadValue) {
  auto engine_error = [](EngineOptions o) { return usage_error([&] { Engine engine(o); }); };
  EngineOptions o;
  o.policy = "nosuch";
  EXPECT_PRED2(starts_with, engine_error(o),
               "edb::Engine: unknown policy 'nosuch' (available: sequential");
  o = {};
  o.executor = "warp";
  EXPECT_PRED2(starts_with, engine_error(o),
               "edb::Engine: unknown executor 'warp' (available: reference");
  o = {};
  o.device = "tpu";
  EXPECT_PRED2(starts_with, engine_error(o),
               "edb::Engine: device 'tpu' is not available in this build (available: cpu");
  o = {};
  o.executor = "reference";
  o.threads = 2;
  EXPECT_EQ(engine_error(o), "edb::Engine: threads = 2, but the reference executor runs on one thread only");
  o = {};
  EXPECT_EQ(engine_error(o), "");
  Engine engine(verifying());
  EXPECT_TRUE(engine.options().verify);
  EXPECT_EQ(engine.options().policy, "sequential");
}

TEST(TraceTensor, ScalarNeedsOneByOne) {
  EXPECT_EQ(tensor(1, 1, {4.5f}).scalar(), 4.5f);
  EXPECT_EQ(usage_error([] { tensor(2, 1, {1, 2}).scalar(); }),
            "edb::Tensor::scalar(): tensor is 2x1, not 1x1");
  EXPECT_EQ(usage_error([] { tensor(1, 3, {1, 2, 3}).scalar(); }),
            "edb::Tensor::scalar(): tensor is 1x3, not 1x1");
  Engine engine;
  Trace trace(engine);
  const Expr v = trace.input({1.0f, 2.0f});
  EXPECT_EQ(usage_error([&] { v.scalar(); }), "edb::Tensor::scalar(): tensor is 2x1, not 1x1");
  const Tensor m = tensor(2, 2, {1, 2, 3, 4});
  EXPECT_EQ(m(1, 0), 2.0f);  // column-major
  EXPECT_EQ(m(0, 1), 3.0f);
}

}  // namespace
}  // namespace edb
