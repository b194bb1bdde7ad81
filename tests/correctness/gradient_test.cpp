// The backward pass: every op's gradient against central finite differences, gradients through
// cells and weight sharing, and every sample model's gradients under every policy, executor,
// cells and memplan setting against the reference executor's.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "samples/models.h"
#include "scheduler/schedule.h"
#include "runtime/executor.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

// A loss that weighs every value of `out` differently: r . vec(out), r fixed per shape.
Expr weighted_sum(Trace& trace, const Expr& out) {
  const int n = out.rows() * out.cols();
  std::vector<float> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[size_t(i)] = 0.5f + 0.37f * float((i * 7) % 5) - 0.21f * float(i % 3);
  return matmul(trace.input(1, n, r), reshape(out, n, 1));
}

struct OpCase {
  std::string name;
  std::function<Expr(Trace&, Model&)> build;  // the op's output, on the model's parameters
};

// Values well away from relu's kink and from saturation, so differences of 1e-2 see the slope.
void initialise(Model& model) {
  int k = 0;
  for (Parameter p : model.parameters())
    for (float& v : p.values()) {
      v = (k % 2 ? 1.0f : -1.0f) * (0.15f + 0.05f * float((k + 1) % 7));
      ++k;
    }
  for (LookupTable t : model.lookups())
    for (float& v : t.values()) {
      v = (k % 3 ? 0.3f : -0.2f) + 0.02f * float((k + 1) % 5);
      ++k;
    }
}

std::vector<OpCase> op_cases() {
  auto P = [](Trace& t, Model& m, const char* name) { return t.param(m.parameter(name)); };
  auto x = [](Trace& t) { return t.input({0.4f, -0.7f, 0.9f}); };
  return {
      {"parameter", [=](Trace& t, Model& m) { return P(t, m, "W"); }},
      {"lookup", [=](Trace& t, Model& m) { return cmult(t.lookup(m.lookup("E"), 2), t.lookup(m.lookup("E"), 4)); }},
      {"lookup of one entry twice", [=](Trace& t, Model& m) {
         return cmult(t.lookup(m.lookup("E"), 2), tanh(t.lookup(m.lookup("E"), 2) * 2.0f)) + t.lookup(m.lookup("E"), 5);
       }},
      {"matmul", [=](Trace& t, Model& m) { return matmul(P(t, m, "W"), P(t, m, "X")); }},
      {"matmul of a vector", [=](Trace& t, Model& m) { return matmul(P(t, m, "W"), x(t)); }},
      {"affine", [=](Trace& t, Model& m) {
         return affine({P(t, m, "b"), P(t, m, "W"), t.lookup(m.lookup("E"), 1), P(t, m, "V"), x(t)});
       }},
      {"affine of matrices", [=](Trace& t, Model& m) { return affine({P(t, m, "B"), P(t, m, "W"), P(t, m, "X")}); }},
      {"matvec", [=](Trace& t, Model& m) { return matvec(tanh(P(t, m, "W")), t.lookup(m.lookup("E"), 3)); }},
      {"add", [=](Trace& t, Model& m) { return P(t, m, "W") + P(t, m, "V"); }},
      {"sub", [=](Trace& t, Model& m) { return P(t, m, "W") - P(t, m, "V"); }},
      {"cmult", [=](Trace& t, Model& m) { return cmult(P(t, m, "W"), P(t, m, "V")); }},
      {"cmult of itself", [=](Trace& t, Model& m) { return cmult(P(t, m, "W"), P(t, m, "W")); }},
      {"scale", [=](Trace& t, Model& m) { return P(t, m, "W") * -2.5f; }},
      {"add_const", [=](Trace& t, Model& m) { return cmult(P(t, m, "W") + 0.75f, P(t, m, "V")); }},
      {"tanh", [=](Trace& t, Model& m) { return tanh(P(t, m, "W") * 3.0f); }},
      {"sigmoid", [=](Trace& t, Model& m) { return sigmoid(P(t, m, "W") * 3.0f); }},
      {"relu", [=](Trace& t, Model& m) { return relu(P(t, m, "W")); }},
      {"sum", [=](Trace& t, Model& m) { return sum({P(t, m, "W"), P(t, m, "V"), P(t, m, "W") * 2.0f}); }},
      {"concat", [=](Trace& t, Model& m) { return concat({P(t, m, "b"), t.lookup(m.lookup("E"), 0), P(t, m, "b")}); }},
      {"slice", [=](Trace& t, Model& m) { return slice(P(t, m, "W"), 1, 3); }},
      {"slices that tile", [=](Trace& t, Model& m) {
         const Expr w = P(t, m, "b");
         return cmult(slice(w, 0, 2), tanh(slice(w, 2, 4)));
       }},
      {"slices that overlap", [=](Trace& t, Model& m) {
         const Expr w = P(t, m, "b");
         return cmult(slice(w, 0, 3), slice(w, 1, 4)) + slice(w, 1, 4);
       }},
      {"reshape", [=](Trace& t, Model& m) { return cmult(reshape(P(t, m, "W"), 3, 4), P(t, m, "Wt")); }},
      {"softmax", [=](Trace& t, Model& m) { return softmax(P(t, m, "W") * 2.0f); }},
      {"log_softmax", [=](Trace& t, Model& m) { return log_softmax(P(t, m, "W") * 2.0f); }},
      {"pick_neg_log_softmax", [=](Trace& t, Model& m) {
         return pick_neg_log_softmax(affine({P(t, m, "b"), P(t, m, "W"), x(t)}), 2);
       }},
      {"exp", [=](Trace& t, Model& m) { return exp(P(t, m, "W") * 2.0f); }},
      {"log", [=](Trace& t, Model& m) { return log(cmult(P(t, m, "W"), P(t, m, "W")) + 0.25f); }},
      {"div", [=](Trace& t, Model& m) { return div(P(t, m, "W"), cmult(P(t, m, "V"), P(t, m, "V")) + 0.5f); }},
      {"div by itself", [=](Trace& t, Model& m) { return div(P(t, m, "W"), P(t, m, "W") + 1.0f); }},
      // W and V differ by at least 0.05 everywhere (initialise()), so h = 1e-2 never crosses the kink.
      {"max", [=](Trace& t, Model& m) { return max(P(t, m, "W"), P(t, m, "V")); }},
      {"min", [=](Trace& t, Model& m) { return min(P(t, m, "W"), P(t, m, "V") * -1.0f); }},
      {"max of a lookup and a constant", [=](Trace& t, Model& m) {
         return max(t.lookup(m.lookup("E"), 1), t.input({0.1f, 0.0f, 0.0f}));  // E is 0.12 or more away
       }},
      {"sum_elements", [=](Trace& t, Model& m) { return sum_elements(cmult(P(t, m, "W"), P(t, m, "V"))); }},
      {"sum_elements of a vector", [=](Trace& t, Model& m) { return sum_elements(tanh(P(t, m, "b"))); }},
      {"mean_elements", [=](Trace& t, Model& m) { return mean_elements(tanh(P(t, m, "W"))) * 3.0f; }},
      {"transpose", [=](Trace& t, Model& m) { return cmult(transpose(P(t, m, "W")), P(t, m, "Wt")); }},
      {"transpose of a vector", [=](Trace& t, Model& m) { return matmul(transpose(P(t, m, "b")), P(t, m, "W")); }},
      // The unary ops of issue 46 (W is 0.15 or more from 0: abs's kink is never crossed).
      {"sqrt", [=](Trace& t, Model& m) { return sqrt(cmult(P(t, m, "W"), P(t, m, "W")) + 0.25f); }},
      {"abs", [=](Trace& t, Model& m) { return abs(P(t, m, "W")); }},
      {"square", [=](Trace& t, Model& m) { return square(P(t, m, "W") * 2.0f); }},
      {"cube", [=](Trace& t, Model& m) { return cube(P(t, m, "W") * 2.0f); }},
      {"softsign", [=](Trace& t, Model& m) { return softsign(P(t, m, "W") * 3.0f); }},
      {"silu", [=](Trace& t, Model& m) { return silu(P(t, m, "W") * 3.0f); }},
      {"elu", [=](Trace& t, Model& m) { return elu(P(t, m, "W") * 3.0f); }},
      {"elu with alpha 0.5", [=](Trace& t, Model& m) { return elu(P(t, m, "W") * 3.0f, 0.5f); }},
      {"selu", [=](Trace& t, Model& m) { return selu(P(t, m, "W") * 3.0f); }},
      {"log_sigmoid", [=](Trace& t, Model& m) { return log_sigmoid(P(t, m, "W") * 3.0f); }},
      {"erf", [=](Trace& t, Model& m) { return erf(P(t, m, "W") * 3.0f); }},
      {"sin", [=](Trace& t, Model& m) { return sin(P(t, m, "W") * 5.0f); }},
      {"cos", [=](Trace& t, Model& m) { return cos(P(t, m, "W") * 5.0f); }},
      {"sinh", [=](Trace& t, Model& m) { return sinh(P(t, m, "W") * 3.0f); }},
      {"cosh", [=](Trace& t, Model& m) { return cosh(P(t, m, "W") * 3.0f); }},
      // 0 (h = 1e-2 never crosses a jump: W is 0.15 to 0.45 from 0, so W never crosses 0 or 0.5)
      {"round, ceil and floor", [=](Trace& t, Model& m) {
         const Expr w = P(t, m, "W");
         return round(w) + ceil(w) + floor(w) + w;
       }},
      {"tan", [=](Trace& t, Model& m) { return tan(P(t, m, "W") * 3.0f); }},  // |3 W| <= 1.35, inside (-pi/2, pi/2)
      {"asinh", [=](Trace& t, Model& m) { return asinh(P(t, m, "W") * 3.0f); }},
      {"acosh", [=](Trace& t, Model& m) { return acosh(square(P(t, m, "W") * 3.0f) + 1.2f); }},
      {"atanh", [=](Trace& t, Model& m) { return atanh(P(t, m, "W") * 2.0f); }},  // |2 W| <= 0.9
      {"asin", [=](Trace& t, Model& m) { return asin(P(t, m, "W") * 2.0f); }},
      {"acos", [=](Trace& t, Model& m) { return acos(P(t, m, "W") * 2.0f); }},
      {"atan", [=](Trace& t, Model& m) { return atan(P(t, m, "W") * 6.0f); }},
      {"pow", [=](Trace& t, Model& m) { return pow(square(P(t, m, "W")) + 0.5f, P(t, m, "V") * 2.0f); }},
      {"pow of itself", [=](Trace& t, Model& m) {
         const Expr w = square(P(t, m, "W")) + 0.5f;
         return pow(w, w);
       }},
      // Issue 46's reductions, distances and losses (W and V differ by 0.05 or more everywhere, so
      // h = 1e-2 never crosses l1's, huber's or the hinges' kinks with the margins below).
      {"logsumexp", [=](Trace& t, Model& m) { return logsumexp({P(t, m, "W") * 3.0f, P(t, m, "V"), P(t, m, "W") * -2.0f}); }},
      {"logsumexp_dim 0", [=](Trace& t, Model& m) { return logsumexp_dim(P(t, m, "W") * 3.0f, 0); }},
      {"logsumexp_dim 1", [=](Trace& t, Model& m) { return logsumexp_dim(P(t, m, "W") * 3.0f, 1); }},
      {"sum_dim 0", [=](Trace& t, Model& m) { return sum_dim(tanh(P(t, m, "W")), 0); }},
      {"sum_dim 1", [=](Trace& t, Model& m) { return sum_dim(tanh(P(t, m, "W")), 1); }},
      {"mean_dim 0", [=](Trace& t, Model& m) { return mean_dim(tanh(P(t, m, "W")), 0); }},
      {"mean_dim 1", [=](Trace& t, Model& m) { return mean_dim(tanh(P(t, m, "W")), 1); }},
      {"std_dim 0", [=](Trace& t, Model& m) { return std_dim(P(t, m, "W"), 0); }},
      {"std_dim 1", [=](Trace& t, Model& m) { return std_dim(P(t, m, "W"), 1); }},
      {"average", [=](Trace& t, Model& m) { return average({P(t, m, "W"), tanh(P(t, m, "V")), P(t, m, "W") * 2.0f}); }},
      {"dot_product", [=](Trace& t, Model& m) { return dot_product(P(t, m, "W"), P(t, m, "V")); }},
      {"squared_norm", [=](Trace& t, Model& m) { return squared_norm(P(t, m, "W")); }},
      {"l2_norm", [=](Trace& t, Model& m) { return l2_norm(P(t, m, "W")); }},
      {"squared_distance", [=](Trace& t, Model& m) { return squared_distance(P(t, m, "W"), P(t, m, "V")); }},
      {"l1_distance", [=](Trace& t, Model& m) { return l1_distance(P(t, m, "W"), P(t, m, "V")); }},
      {"huber_distance", [=](Trace& t, Model& m) { return huber_distance(P(t, m, "W") * 4.0f, P(t, m, "V"), 0.6f); }},
      {"hinge", [=](Trace& t, Model& m) { return hinge(P(t, m, "b") * 2.0f, 1, 0.37f); }},
      {"binary_log_loss", [=](Trace& t, Model& m) { return binary_log_loss(sigmoid(P(t, m, "W") * 3.0f), sigmoid(P(t, m, "V"))); }},
      {"pairwise_rank_loss", [=](Trace& t, Model& m) { return pairwise_rank_loss(P(t, m, "W"), P(t, m, "V"), 0.17f); }},
      {"poisson_loss", [=](Trace& t, Model& m) { return poisson_loss(sum_elements(P(t, m, "W")), 3); }},
      {"select_rows", [=](Trace& t, Model& m) { return select_rows(tanh(P(t, m, "W")), {3, 1, 3}); }},
      {"select_cols", [=](Trace& t, Model& m) { return select_cols(tanh(P(t, m, "W")), {2, 0}); }},
      {"pick of a vector", [=](Trace& t, Model& m) { return pick(tanh(P(t, m, "b")), 2); }},
      {"pick of a row", [=](Trace& t, Model& m) { return pick(P(t, m, "W"), 1); }},
      {"layer_norm", [=](Trace& t, Model& m) { return layer_norm(P(t, m, "b") * 2.0f, tanh(P(t, m, "b")) + 1.0f, P(t, m, "b") * 0.5f); }},
      {"weight_norm", [=](Trace& t, Model& m) { return weight_norm(P(t, m, "W"), sum_elements(P(t, m, "X"))); }},
      // Issue 46's selections: the taken values differ from the others by 0.05 or more.
      {"argmax times W", [=](Trace& t, Model& m) { return cmult(argmax(P(t, m, "W")), P(t, m, "W") * 2.0f); }},
      {"kmax_pooling", [=](Trace& t, Model& m) { return kmax_pooling(tanh(P(t, m, "W")), 2); }},
      {"conv1d_narrow", [=](Trace& t, Model& m) { return conv1d_narrow(P(t, m, "W"), tanh(P(t, m, "B"))); }},
      {"conv1d_wide", [=](Trace& t, Model& m) { return conv1d_wide(tanh(P(t, m, "W")), P(t, m, "B")); }},
      {"maxpool1d", [=](Trace& t, Model& m) { return maxpool1d(transpose(P(t, m, "W")), 2, 1); }},
      {"maxpool1d with stride 2", [=](Trace& t, Model& m) { return maxpool1d(P(t, m, "Wt") * 2.0f, 2, 2); }},
      {"softmax of a matrix", [=](Trace& t, Model& m) { return softmax(P(t, m, "W") * 3.0f); }},
      {"log_softmax of a matrix", [=](Trace& t, Model& m) { return log_softmax(P(t, m, "W") * 3.0f); }},
      // DyNet's broadcasting: a 1x1, a column and a row against a matrix, and a column with a row.
      {"cmult broadcasting a 1x1", [=](Trace& t, Model& m) { return cmult(sum_elements(P(t, m, "b")) * 0.5f, P(t, m, "W")); }},
      {"add broadcasting a column", [=](Trace& t, Model& m) { return tanh(P(t, m, "W") + P(t, m, "b")); }},
      {"sub broadcasting a row", [=](Trace& t, Model& m) { return P(t, m, "W") - pick(P(t, m, "V"), 2) * 2.0f; }},
      {"div by a broadcast 1x1", [=](Trace& t, Model& m) { return div(P(t, m, "W"), sum_elements(square(P(t, m, "b"))) + 0.5f); }},
      // 10 b is 1.5 or more from every value of V's row: h never crosses a tie; rows where b is
      // negative take V's.
      {"max of a column and a row", [=](Trace& t, Model& m) { return max(P(t, m, "b") * 10.0f, pick(P(t, m, "V"), 1)); }},
      {"pow of a broadcast exponent", [=](Trace& t, Model& m) { return pow(square(P(t, m, "W")) + 0.5f, sum_elements(P(t, m, "b"))); }},
      {"concat_cols", [=](Trace& t, Model& m) { return cmult(concat_cols({P(t, m, "b"), tanh(P(t, m, "B"))}), P(t, m, "W")); }},
      {"dropout in training", [=](Trace& t, Model& m) {
         return dropout(tanh(P(t, m, "W")), 0.5f, {.training = true, .seed = 7});
       }},
      {"dropout at inference", [=](Trace& t, Model& m) { return dropout(tanh(P(t, m, "W")), 0.5f, {}); }},
  };
}

Model& op_model() {
  static Model* model = [] {
    auto* m = new Model("gradcheck");
    m->add_parameter("W", 4, 3);
    m->add_parameter("V", 4, 3);
    m->add_parameter("X", 3, 2);
    m->add_parameter("B", 4, 2);
    m->add_parameter("Wt", 3, 4);
    m->add_parameter("b", 4, 1);
    m->add_lookup("E", 6, 3);
    initialise(*m);
    return m;
  }();
  return *model;
}

float loss_of(Engine& engine, const OpCase& c, Model& model) {
  Trace trace(engine);
  return weighted_sum(trace, c.build(trace, model)).scalar();
}

// Central differences in every value of every parameter and lookup entry the analytic gradient
// names (and zero for everything it leaves out).
void check_against_differences(const OpCase& c, const EngineOptions& options) {
  Model& model = op_model();
  Engine engine(options);
  Gradients g;
  {
    Trace trace(engine);
    g = trace.backward(weighted_sum(trace, c.build(trace, model)));
  }
  const float h = 1e-2f;
  auto numeric = [&](float& value) {
    const float saved = value;
    value = saved + h;
    const float up = loss_of(engine, c, model);
    value = saved - h;
    const float down = loss_of(engine, c, model);
    value = saved;
    return (double(up) - double(down)) / (2.0 * h);
  };
  auto expect_close = [&](double analytic, double difference, const std::string& where) {
    EXPECT_NEAR(analytic, difference, 3e-3 + 2e-2 * std::abs(difference)) << c.name << ": " << where;
  };
  for (Parameter p : model.parameters()) {
    const Tensor* analytic = g.of(p);
    std::span<float> values = p.values();
    for (size_t i = 0; i < values.size(); ++i)
      expect_close(analytic ? analytic->data[i] : 0.0, numeric(values[i]), p.name() + "[" + std::to_string(i) + "]");
  }
  for (LookupTable t : model.lookups()) {
    const Gradients::Rows* rows = g.of(t);
    for (int64_t e = 0; e < t.entries(); ++e) {
      const float* analytic = nullptr;
      for (size_t i = 0; rows && i < rows->entries.size(); ++i)
        if (rows->entries[i] == e) analytic = rows->gradients.data() + i * size_t(t.dim());
      for (int d = 0; d < t.dim(); ++d)
        expect_close(analytic ? analytic[d] : 0.0, numeric(t.values()[size_t(e * t.dim() + d)]),
                     t.name() + " entry " + std::to_string(e) + " row " + std::to_string(d));
    }
  }
}

TEST(Gradients, EveryOpMatchesFiniteDifferencesOnTheReference) {
  EngineOptions options;
  options.executor = "reference";
  options.policy = "sequential";
  options.verify = true;
  for (const OpCase& c : op_cases()) check_against_differences(c, options);
}

TEST(Gradients, EveryOpMatchesFiniteDifferencesOnTheBatchedExecutor) {
  EngineOptions options;
  options.executor = "batched";
  options.verify = true;
  for (const OpCase& c : op_cases()) check_against_differences(c, options);
}

TEST(Gradients, EveryOpMatchesFiniteDifferencesOnTheJit) {
  testing::TempDir cache;
  EngineOptions options;
  options.executor = "jit";
  options.verify = true;
  options.cache_directory = cache.path();
  for (const OpCase& c : op_cases()) check_against_differences(c, options);
}

TEST(Gradients, LossIsItsValueAndUnusedParametersHaveNone) {
  Model& model = op_model();
  Engine engine(testing::checked_options("jit"));
  Trace trace(engine);
  const Expr loss = weighted_sum(trace, tanh(trace.param(model.parameter("W"))));
  const float value = loss.scalar();
  const Gradients g = trace.backward(loss);
  EXPECT_FLOAT_EQ(g.loss, value);
  EXPECT_NE(g.of(model.parameter("W")), nullptr);
  EXPECT_EQ(g.of(model.parameter("V")), nullptr);
  EXPECT_EQ(g.of(model.lookup("E")), nullptr);
}

TEST(Gradients, BadLossesAreUsageErrors) {
  Model& model = op_model();
  Engine engine;
  Trace trace(engine), other(engine);
  const Expr w = trace.param(model.parameter("W"));
  EXPECT_EQ(testing::usage_error([&] { trace.backward(w); }), "edb::Trace::backward(): the loss must be 1x1, got 4x3");
  const Expr elsewhere = weighted_sum(other, other.param(model.parameter("W")));
  EXPECT_EQ(testing::usage_error([&] { trace.backward(elsewhere); }),
            "edb::Trace::backward(): the loss belongs to another trace");
  const Expr loss = weighted_sum(trace, w);
  trace.backward(loss);
  // The second pass would differentiate the first one's nodes only if they fed the loss; a loss
  // recorded after the first pass on its own forward nodes is fine.
  const Gradients again = trace.backward(weighted_sum(trace, tanh(w)));
  EXPECT_NE(again.of(model.parameter("W")), nullptr);
}

// record_backward() and gradients(): the same checks as backward(), named after themselves, and
// gradients() before any backward pass, or after the trace finished, is refused.
TEST(Gradients, RecordedBackwardPassMisuseIsAUsageError) {
  Model& model = op_model();
  Engine engine;
  Trace trace(engine), other(engine);
  const Expr w = trace.param(model.parameter("W"));
  Gradients g;
  EXPECT_EQ(testing::usage_error([&] { trace.gradients(g); }),
            "edb::Trace::gradients(): this trace has no backward pass; record one with record_backward(loss)");
  EXPECT_EQ(testing::usage_error([&] { trace.record_backward(w); }),
            "edb::Trace::record_backward(): the loss must be 1x1, got 4x3");
  const Expr elsewhere = weighted_sum(other, other.param(model.parameter("W")));
  EXPECT_EQ(testing::usage_error([&] { trace.record_backward(elsewhere); }),
            "edb::Trace::record_backward(): the loss belongs to another trace");
  trace.record_backward(weighted_sum(trace, w));
  trace.finish();
  EXPECT_EQ(testing::usage_error([&] { trace.gradients(g); }),
            "edb::Trace::gradients(): the trace has finished (or its Engine was destroyed)");
}

// backward() twice in one trace (as docs/guide.md says): each call records its own backward pass
// and returns the gradients of its own loss alone; nothing accumulates between calls.
TEST(Gradients, BackwardTwiceInOneTraceGivesEachLossItsOwnGradients) {
  Model& model = op_model();
  const Parameter W = model.parameter("W");
  auto alone = [&](bool squared) {
    Engine engine(testing::checked_options("jit"));
    Trace trace(engine);
    const Expr h = tanh(trace.param(W));
    return trace.backward(weighted_sum(trace, squared ? cmult(h, h) : h));
  };
  const Gradients first_alone = alone(false), second_alone = alone(true);
  Engine engine(testing::checked_options("jit"));
  Trace trace(engine);
  const Expr h = tanh(trace.param(W));
  const Expr loss = weighted_sum(trace, h);
  const Gradients first = trace.backward(loss);
  const Gradients again = trace.backward(loss);  // the same loss: the same gradients again
  const Gradients second = trace.backward(weighted_sum(trace, cmult(h, h)));  // reuses h's forward value
  // Finite, since two NaNs agree in near_relative (a value left unwritten is NaN under verify).
  for (const Gradients* g : {&first_alone, &second_alone})
    for (float v : g->of(W)->data) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_TRUE(testing::near_relative(*first.of(W), *first_alone.of(W)));
  EXPECT_TRUE(testing::near_relative(*again.of(W), *first_alone.of(W)));
  EXPECT_TRUE(testing::near_relative(*second.of(W), *second_alone.of(W)));
  EXPECT_FLOAT_EQ(second.loss, second_alone.loss);
}

// backward(loss, gradients) fills a Gradients kept across steps: the same values as backward(loss),
// in its storage (a parameter's tensor keeps its memory); what the new loss does not depend on is
// gone, not left over from the step before.
TEST(Gradients, BackwardIntoReusesTheStorageOfTheGradientsBefore) {
  Model& model = op_model();
  const Parameter W = model.parameter("W"), V = model.parameter("V");
  const LookupTable E = model.lookup("E");
  Engine engine(testing::checked_options("jit"));
  Gradients kept;
  auto both = [&](bool with_v, int entry) {
    Trace trace(engine);
    Expr h = tanh(trace.param(W)) + matmul(trace.input(4, 1, std::vector<float>(4, 0.5f)), transpose(trace.lookup(E, entry)));
    if (with_v) h = h + cmult(trace.param(V), trace.param(V));
    const Expr loss = weighted_sum(trace, h);
    trace.backward(loss, kept);
    Trace fresh_trace(engine);
    Expr f = tanh(fresh_trace.param(W)) +
             matmul(fresh_trace.input(4, 1, std::vector<float>(4, 0.5f)), transpose(fresh_trace.lookup(E, entry)));
    if (with_v) f = f + cmult(fresh_trace.param(V), fresh_trace.param(V));
    return fresh_trace.backward(weighted_sum(fresh_trace, f));
  };
  const Gradients first = both(true, 2);
  ASSERT_NE(kept.of(W), nullptr);
  const float* w_storage = kept.of(W)->data.data();
  EXPECT_EQ(kept.of(W)->data, first.of(W)->data);
  EXPECT_EQ(kept.of(V)->data, first.of(V)->data);
  EXPECT_EQ(kept.of(E)->entries, std::vector<int64_t>{2});
  EXPECT_FLOAT_EQ(kept.loss, first.loss);
  const Gradients second = both(false, 5);
  EXPECT_EQ(kept.of(W)->data.data(), w_storage);  // W's tensor kept its memory
  EXPECT_EQ(kept.of(W)->data, second.of(W)->data);
  EXPECT_EQ(kept.of(W)->rows, 4);
  EXPECT_EQ(kept.of(W)->cols, 3);
  EXPECT_EQ(kept.of(V), nullptr);  // the second loss does not read V
  EXPECT_EQ(kept.of(E)->entries, std::vector<int64_t>{5});
  EXPECT_EQ(kept.of(E)->gradients, second.of(E)->gradients);
  EXPECT_EQ(kept.parameters.size(), second.parameters.size());
  EXPECT_FLOAT_EQ(kept.loss, second.loss);
}

TEST(Gradients, AddSumsDenseAndSparseGradients) {
  Model& model = op_model();
  Engine engine(testing::checked_options("jit"));
  auto gradients_of = [&](int entry) {
    Trace trace(engine);
    return trace.backward(weighted_sum(trace, cmult(trace.lookup(model.lookup("E"), entry),
                                                     matmul(trace.param(model.parameter("Wt")), trace.input({1, 2, 3, -1})))));
  };
  Gradients a = gradients_of(1);
  const Gradients b = gradients_of(3), c = gradients_of(1);
  const float loss = a.loss + b.loss;
  a.add(b);
  EXPECT_FLOAT_EQ(a.loss, loss);
  ASSERT_EQ(a.of(model.lookup("E"))->entries, (std::vector<int64_t>{1, 3}));
  a.add(c);
  const Gradients::Rows& rows = *a.of(model.lookup("E"));
  ASSERT_EQ(rows.entries, (std::vector<int64_t>{1, 3}));
  EXPECT_FLOAT_EQ(rows.gradients[0], 2 * c.of(model.lookup("E"))->gradients[0]);
  EXPECT_FLOAT_EQ(a.of(model.parameter("Wt"))->data[0],
                  2 * c.of(model.parameter("Wt"))->data[0] + b.of(model.parameter("Wt"))->data[0]);
}

// Rows a caller filled itself: in any order they add up by entry; rows that do not hold
// entries x dim floats are a UsageError naming the table, not a read past their end.
TEST(Gradients, AddTakesRowsInAnyOrderAndRefusesRowsOfTheWrongSize) {
  Model& model = op_model();
  const LookupTable E = model.lookup("E");  // 6 x 3
  Gradients a, b;
  a.tables.push_back({E, {4, 0}, {4, 4, 4, 1, 1, 1}});
  b.tables.push_back({E, {0, 2}, {1, 2, 3, 5, 5, 5}});
  a.add(b);
  EXPECT_EQ(a.of(E)->entries, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(a.of(E)->gradients, (std::vector<float>{2, 3, 4, 5, 5, 5, 4, 4, 4}));
  Gradients sorted, other;
  sorted.tables.push_back({E, {1, 3, 5}, std::vector<float>(9, 1.0f)});
  other.tables.push_back({E, {0, 3, 4}, std::vector<float>(9, 2.0f)});
  sorted.add(other);
  EXPECT_EQ(sorted.of(E)->entries, (std::vector<int64_t>{0, 1, 3, 4, 5}));
  EXPECT_EQ(sorted.of(E)->gradients, (std::vector<float>{2, 2, 2, 1, 1, 1, 3, 3, 3, 2, 2, 2, 1, 1, 1}));
  Gradients bad;
  bad.tables.push_back({E, {1}, {1, 2}});
  EXPECT_NE(testing::usage_error([&] { sorted.add(bad); }).find("the rows of 'E' hold 2 floats for 1 entries of 3"),
            std::string::npos);
}

// ---- sample models: every combination against the reference ----

struct Combination {
  std::string policy, executor;
  bool cells, memplan;
};

std::string name_of(const Combination& c) {
  return c.policy + "/" + c.executor + "/cells " + (c.cells ? "on" : "off") + "/memplan " + (c.memplan ? "on" : "off");
}

Gradients sample_gradients(samples::SampleModel& sample, const EngineOptions& options, size_t instances) {
  Engine engine(options);
  Trace trace(engine);
  std::vector<Expr> losses;
  for (size_t i = 0; i < instances; ++i) losses.push_back(sample.record_loss(trace, i));
  return trace.backward(sum(losses));
}

::testing::AssertionResult same_gradients(const Gradients& actual, const Gradients& expected) {
  if (std::abs(actual.loss - expected.loss) > 1e-4f * std::max(1.0f, std::abs(expected.loss)))
    return ::testing::AssertionFailure() << "loss " << actual.loss << " against " << expected.loss;
  if (actual.parameters.size() != expected.parameters.size() || actual.tables.size() != expected.tables.size())
    return ::testing::AssertionFailure() << "gradients for other parameters";
  for (const Gradients::Dense& d : expected.parameters) {
    const Tensor* mine = actual.of(d.parameter);
    if (!mine) return ::testing::AssertionFailure() << "no gradient for " << d.parameter.name();
    const auto near = testing::near_relative(*mine, d.gradient, 1e-3);
    if (!near) return ::testing::AssertionFailure() << d.parameter.name() << ": " << near.message();
  }
  for (const Gradients::Rows& r : expected.tables) {
    const Gradients::Rows* mine = actual.of(r.table);
    if (!mine || mine->entries != r.entries) return ::testing::AssertionFailure() << "other rows of " << r.table.name();
    for (size_t i = 0; i < r.gradients.size(); ++i)
      if (std::abs(mine->gradients[i] - r.gradients[i]) > 1e-4f + 1e-3f * std::abs(r.gradients[i]))
        return ::testing::AssertionFailure() << r.table.name() << " value " << i << ": " << mine->gradients[i]
                                             << " against " << r.gradients[i];
  }
  return ::testing::AssertionSuccess();
}

TEST(Gradients, EverySampleModelEveryCombinationEqualsTheReference) {
  testing::TempDir cache;
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    samples::ModelConfig config;
    config.limit = 6;
    config.embed = 8;
    config.hidden = 8;
    auto sample = entry.make(config);
    EngineOptions reference;
    reference.policy = "sequential";
    reference.executor = "reference";
    reference.cells = false;
    const Gradients expected = sample_gradients(*sample, reference, sample->instance_count());
    ASSERT_FALSE(expected.parameters.empty()) << entry.name;
    for (const std::string& policy : scheduler::policy_names())
      for (const std::string& executor : runtime::executor_names())
        for (bool cells : {false, true})
          for (bool memplan : {false, true}) {
            const Combination c{policy, executor, cells, memplan};
            EngineOptions options;
            options.policy = policy;
            options.executor = executor;
            options.cells = cells;
            options.memplan = memplan;
            options.verify = true;
            options.cache_directory = cache.path();
            EXPECT_TRUE(same_gradients(sample_gradients(*sample, options, sample->instance_count()), expected))
                << entry.name << " " << name_of(c);
          }
  }
}

}  // namespace
}  // namespace edb
