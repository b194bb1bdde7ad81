// Compiled cells whose bodies hold ops over whole columns (softmax, log_softmax, sum_elements,
// mean_elements, products to 1x1 such as pick, pick_neg_log_softmax, argmax, kmax_pooling,
// transpose and, in backward bodies, their gradients): they lower to column steps (jit/cell_program.h), and their values and
// gradients equal the reference executor's without cells under jit, batched and reference, over
// calls of different inputs. So do bodies with the 1-D convolutions (conv1d_narrow, conv1d_wide)
// and the poolings after them (kmax_pooling, maxpool1d), as a char-CNN's word encoder: products
// with constant column selections (trace/composed_ops.cpp) in blocks of the channels.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "runtime/cell_lowering.h"
#include "trace/inspect.h"

namespace edb {
namespace {

std::vector<float> column(int rows, float seed) {
  std::vector<float> v(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) v[size_t(r)] = std::sin(seed * 1.7f + 0.37f * float(r)) * (1.0f + 0.1f * seed);
  return v;
}

// A model and a cell over it; `loss` records calls of the cell over `instances` inputs and
// returns a scalar loss that reads every output.
struct CellCase {
  std::string name;
  std::shared_ptr<Model> model;  // Models do not move
  std::vector<Parameter> parameters;
  std::function<Expr(Trace&, int instances)> loss;
  int hidden = 0;  // every program's block height: the 1x1 values are column steps, not blocks of one row
};

// Each cell the trace of `loss` calls, forward and backward, lowered (its batches of calls are
// compiled kernels), and how many of them, forward and backward, and how many with column steps.
struct Lowered {
  int forward = 0, backward = 0, forward_steps = 0, backward_steps = 0;
};
Lowered lowered_cells(const Expr& loss, int hidden) {
  const detail::EvaluatedTrace evaluated = detail::evaluated_trace(loss);
  Lowered counts;
  for (size_t c = 0; c < evaluated.graph.cell_count(); ++c) {
    const auto& cell = static_cast<const runtime::CallCell&>(evaluated.graph.cell(int64_t(c)));
    EXPECT_TRUE(cell.lowered) << cell.name << ": " << cell.why_not;
    EXPECT_EQ(cell.lowering.program.rows, hidden) << cell.name;
    bool steps = false;
    for (const jit::CellProgram::Stage& stage : cell.lowering.program.stages) steps |= !stage.steps.empty();
    (cell.is_backward ? counts.backward : counts.forward) += 1;
    (cell.is_backward ? counts.backward_steps : counts.forward_steps) += steps ? 1 : 0;
  }
  return counts;
}

// The loss and every parameter's gradient under `executor` (cells on) against the reference
// executor with cells off, over traces of 1, 3 and 6 instances (batches of calls of several
// sizes, inputs different per call); under jit, every cell lowered, forward and backward.
void expect_reference_values(CellCase& c, const std::string& executor) {
  SCOPED_TRACE(c.name + " under " + executor);
  EngineOptions options, reference_options;
  options.executor = executor;
  options.verify = true;
  reference_options.executor = "reference";
  reference_options.cells = false;
  reference_options.verify = true;
  Engine engine(options), reference(reference_options);
  for (int instances : {1, 3, 6}) {
    SCOPED_TRACE(std::to_string(instances) + " instances");
    Trace want_trace(reference);
    const Gradients want = want_trace.backward(c.loss(want_trace, instances));
    Trace trace(engine);
    const Expr loss = c.loss(trace, instances);
    const Gradients got = trace.backward(loss);
    if (executor == "jit") {
      const Lowered cells = lowered_cells(loss, c.hidden);
      EXPECT_EQ(cells.forward, 1);
      EXPECT_EQ(cells.backward, 1);
      EXPECT_EQ(cells.forward_steps, 1);
      EXPECT_EQ(cells.backward_steps, 1);  // softmax_grad, log_softmax_grad, dot steps of the stretches' gradients
    }
    EXPECT_NEAR(got.loss, want.loss, 2e-5f * (1 + std::abs(want.loss)));
    for (const Parameter& p : c.parameters) {
      const Tensor* g = got.of(p);
      const Tensor* w = want.of(p);
      ASSERT_TRUE(g && w) << p.name();
      ASSERT_EQ(g->data.size(), w->data.size()) << p.name();
      for (size_t e = 0; e < w->data.size(); ++e)
        ASSERT_NEAR(g->data[e], w->data[e], 1e-4f * (1 + std::abs(w->data[e]))) << p.name() << " element " << e;
    }
  }
}

// A recurrent case over parameters W, U, V (n x n) and b (n x 1): a cell on (h, x) of two column
// outputs, the next h and a second value; chains of 1 to 3 calls per instance, each step's h the
// last one's first output, each step's second output read by `term` (given the step's seed), and
// the last h weighed by a column of its own.
using RecurrentBody = std::function<std::vector<Expr>(Trace&, std::span<const Expr>, const Parameter& w,
                                                      const Parameter& u, const Parameter& v, const Parameter& b)>;
CellCase recurrent_case(const std::string& name, const std::string& model, const std::string& cell_name, int seed, int n,
                        RecurrentBody body, std::function<Expr(Trace&, const Expr& second, float seed)> term) {
  CellCase c{name + " " + std::to_string(n), std::make_shared<Model>(model, seed), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  const Parameter v = c.model->add_parameter("V", n, n), b = c.model->add_parameter("b", n, 1);
  c.parameters = {w, u, v, b};
  auto cell = std::make_shared<Cell>(cell_name, std::vector<std::pair<int, int>>{{n, 1}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) { return body(t, in, w, u, v, b); });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int k = 0; k < instances; ++k) {
      Expr h = t.input(column(n, float(k)));
      for (int step = 0; step <= k % 3; ++step) {
        const std::vector<Expr> out = (*cell)(t, {h, t.input(column(n, float(k * 5 + step) + 0.5f))});
        h = out[0];
        terms.push_back(term(t, out[1], float(k + step) + 0.25f));
      }
      terms.push_back(sum_elements(cmult(h, t.input(column(n, float(k) + 0.75f)))));
    }
    return sum(terms);
  };
  return c;
}

// Attention over a column (hidden size n): scores = W h, a = softmax(scores), out = tanh(U (a .* v)
// + b), and the log-probabilities log_softmax(V out) as a second output, weighed by a column.
CellCase attention(int n) {
  return recurrent_case(
      "attention", "attention", "attend", 5, n,
      [](Trace& t, std::span<const Expr> in, const Parameter& w, const Parameter& u, const Parameter& v, const Parameter& b) {
        const Expr a = softmax(matmul(t.param(w), in[0]));
        const Expr out = tanh(affine({t.param(b), t.param(u), cmult(a, in[1])}));
        return std::vector<Expr>{out, log_softmax(matmul(t.param(v), out))};
      },
      [n](Trace& t, const Expr& second, float seed) { return sum_elements(cmult(second, t.input(column(n, seed)))); });
}

// The loss of a cell of (keys n x n, query n x 1) -> n x 1 over `instances` calls, each with
// its own keys and query, weighed by a column of its own.
std::function<Expr(Trace&, int)> keys_and_query_loss(std::shared_ptr<Cell> cell, int n) {
  return [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int k = 0; k < instances; ++k) {
      std::vector<float> keys;
      for (int j = 0; j < n; ++j)
        for (float x : column(n, float(k * n + j))) keys.push_back(x);
      const Expr out = (*cell)(t, {t.input(n, n, keys), t.input(column(n, float(k) + 0.5f))})[0];
      terms.push_back(sum_elements(cmult(out, t.input(column(n, float(k) + 0.25f)))));
    }
    return sum(terms);
  };
}

// Softmax over the columns of a per-call matrix (n x n scores of n keys), its weights' product
// with a per-call vector of n (as tall as the blocks: the backward body's dx of that vector is a
// product of the weights' transpose, which lowers in whole blocks only).
CellCase attention_over_columns(int n) {
  CellCase c{"attention over columns " + std::to_string(n), std::make_shared<Model>("columns", 7), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  c.parameters = {w, u};
  auto cell = std::make_shared<Cell>("keys", std::vector<std::pair<int, int>>{{n, n}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr weights = softmax(matmul(t.param(w), in[0]));
                                       return std::vector<Expr>{tanh(matmul(t.param(u), matmul(weights, in[1])))};
                                     });
  c.loss = keys_and_query_loss(cell, n);
  return c;
}

// Attention weights picked one by one and stretched over a column (DyNet's cmult of a 1x1 with
// a column): each pick is a product of a constant row with the weights, a product to 1x1 (a dot
// step), and each stretch a product of a column of ones with it.
CellCase attention_by_picks(int n) {
  CellCase c{"attention by picks " + std::to_string(n), std::make_shared<Model>("picks", 11), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  c.parameters = {w, u};
  auto cell = std::make_shared<Cell>("picks", std::vector<std::pair<int, int>>{{n, 1}, {n, 1}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr a = softmax(matmul(t.param(w), in[0]));
                                       const Expr mixed = cmult(pick(a, 0), in[1]) + cmult(pick(a, n - 1), in[2]);
                                       return std::vector<Expr>{tanh(matmul(t.param(u), mixed))};
                                     });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int k = 0; k < instances; ++k) {
      Expr h = t.input(column(n, float(k)));
      for (int step = 0; step <= k % 3; ++step)
        h = (*cell)(t, {h, t.input(column(n, float(k * 5 + step) + 0.5f)), t.input(column(n, float(k + step) + 0.3f))})[0];
      terms.push_back(sum_elements(cmult(h, t.input(column(n, float(k) + 0.75f)))));
    }
    return sum(terms);
  };
  return c;
}

// layer_norm of a recurrent step (its means are products of constant rows with columns, dot
// steps; the deviation's sqrt and add_const scalar steps), then per call the sum and the mean of
// the step's squares as outputs of their own (1x1 values of the cell).
CellCase normalised(int n) {
  CellCase c{"layer_norm " + std::to_string(n), std::make_shared<Model>("normalised", 9), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  const Parameter g = c.model->add_parameter("g", n, 1), beta = c.model->add_parameter("beta", n, 1);
  c.parameters = {w, u, g, beta};
  auto cell = std::make_shared<Cell>("norm_step", std::vector<std::pair<int, int>>{{n, 1}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr z = matmul(t.param(w), in[0]) + matmul(t.param(u), in[1]);
                                       const Expr h = tanh(layer_norm(z, t.param(g), t.param(beta)));
                                       const Expr squares = square(h);
                                       return std::vector<Expr>{h, sum_elements(squares), mean_elements(cmult(squares, in[0]))};
                                     });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int k = 0; k < instances; ++k) {
      Expr h = t.input(column(n, float(k)));
      for (int step = 0; step <= k % 3; ++step) {
        const std::vector<Expr> out = (*cell)(t, {t.input(column(n, float(k * 5 + step) + 0.5f)), h});
        h = out[0];
        terms.push_back(out[1] * 0.5f);
        terms.push_back(out[2] * float(step + 1));
      }
      terms.push_back(sum_elements(cmult(h, t.input(column(n, float(k) + 0.75f)))));
    }
    return sum(terms);
  };
  return c;
}

// A recurrent step whose loss is a cell output: pick_neg_log_softmax of its logits at a label
// fixed in the body (a column step; the backward body's pick_neg_log_softmax_grad is one too).
CellCase picked_loss(int n) {
  return recurrent_case(
      "pick_neg_log_softmax", "picked", "picked", 13, n,
      [n](Trace& t, std::span<const Expr> in, const Parameter& w, const Parameter& u, const Parameter& v, const Parameter& b) {
        const Expr h = tanh(affine({t.param(b), t.param(w), in[0], t.param(u), in[1]}));
        return std::vector<Expr>{h, pick_neg_log_softmax(matmul(t.param(v), h), n - 2)};
      },
      [](Trace&, const Expr& second, float) { return second; });
}

// argmax of a step's scores (a one-hot column step) selects an input's element, beside a softmax of
// other scores; with `straight_through`, the one-hot's gradient is dy itself, else zero. The
// backward body's softmax_grad is its column step.
CellCase selected(int n, bool straight_through) {
  CellCase c{std::string("argmax ") + (straight_through ? "straight-through " : "") + std::to_string(n),
             std::make_shared<Model>("selected", 17), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  const Parameter v = c.model->add_parameter("V", n, n);
  c.parameters = {w, u, v};
  const ArgmaxGradient gradient = straight_through ? ArgmaxGradient::straight_through : ArgmaxGradient::zero;
  auto cell = std::make_shared<Cell>("selected", std::vector<std::pair<int, int>>{{n, 1}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr h = tanh(matmul(t.param(w), in[0]));
                                       const Expr chosen = cmult(argmax(matmul(t.param(u), h), gradient), in[1]);
                                       return std::vector<Expr>{tanh(matmul(t.param(v), chosen + softmax(h)))};
                                     });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int k = 0; k < instances; ++k) {
      Expr h = t.input(column(n, float(k)));
      for (int step = 0; step <= k % 3; ++step) h = (*cell)(t, {h, t.input(column(n, float(k * 5 + step) + 0.5f))})[0];
      terms.push_back(sum_elements(cmult(h, t.input(column(n, float(k) + 0.75f)))));
    }
    return sum(terms);
  };
  return c;
}

// kmax_pooling of a per-call matrix's channels (n x 5, the char-CNN's pooling): the k largest per
// row, a column for k = 1 and a matrix for k = 3; the backward body's kmax_pooling_grad puts dy back.
CellCase pooled(int n, int k) {
  CellCase c{"kmax_pooling " + std::to_string(k) + " of " + std::to_string(n), std::make_shared<Model>("pooled", 19), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n), u = c.model->add_parameter("U", n, n);
  c.parameters = {w, u};
  auto cell = std::make_shared<Cell>("pooled", std::vector<std::pair<int, int>>{{n, 5}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr channels = tanh(matmul(t.param(w), in[0]));
                                       return std::vector<Expr>{tanh(matmul(t.param(u), kmax_pooling(channels, k)))};
                                     });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int i = 0; i < instances; ++i) {
      std::vector<float> letters;
      for (int j = 0; j < 5; ++j)
        for (float x : column(n, float(i * 5 + j) * 1.3f)) letters.push_back(x);
      const Expr out = (*cell)(t, {t.input(n, 5, letters)})[0];
      std::vector<float> weights;
      for (int j = 0; j < k; ++j)
        for (float x : column(n, float(i + j) + 0.25f)) weights.push_back(x);
      terms.push_back(sum_elements(cmult(out, t.input(n, k, weights))));
    }
    return sum(terms);
  };
  return c;
}

// The transpose of a per-call n x n matrix of scores multiplies a column (a per-call W); the
// backward body transposes that product's dW back.
CellCase transposed(int n) {
  CellCase c{"transpose " + std::to_string(n), std::make_shared<Model>("transposed", 23), {}, {}};
  c.hidden = n;
  const Parameter w = c.model->add_parameter("W", n, n);
  c.parameters = {w};
  auto cell = std::make_shared<Cell>("transposed", std::vector<std::pair<int, int>>{{n, n}, {n, 1}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr scores = tanh(matmul(t.param(w), in[0]));
                                       return std::vector<Expr>{tanh(matmul(transpose(scores), in[1]))};
                                     });
  c.loss = keys_and_query_loss(cell, n);
  return c;
}

// A word encoder over `letters` letters of n channels: tanh(conv(W X, F) + B) pooled to a column
// (kmax_pooling with k = 1, or maxpool1d of window 2 then kmax_pooling), then a tanh layer. A
// cell's argument shapes are fixed, so every call spells a word of the same length; each
// instance's word is weighed by a column of its own.
CellCase encoder(int n, int letters, int width, bool wide, bool maxpool) {
  CellCase c{std::string(wide ? "conv1d_wide" : "conv1d_narrow") + (maxpool ? " and maxpool1d" : "") + " of " +
                 std::to_string(n) + "x" + std::to_string(letters) + ", width " + std::to_string(width),
             std::make_shared<Model>("encoder", 29), {}, {}};
  c.hidden = n;
  const int out = wide ? letters + width - 1 : letters - width + 1;
  const Parameter w = c.model->add_parameter("W", n, n), f = c.model->add_parameter("F", n, width);
  const Parameter b = c.model->add_parameter("B", n, out), u = c.model->add_parameter("U", n, n);
  c.parameters = {w, f, b, u};
  auto cell = std::make_shared<Cell>("word", std::vector<std::pair<int, int>>{{n, letters}},
                                     [=](Trace& t, std::span<const Expr> in) {
                                       const Expr channels = matmul(t.param(w), in[0]);
                                       const Expr filtered = wide ? conv1d_wide(channels, t.param(f)) : conv1d_narrow(channels, t.param(f));
                                       Expr features = tanh(filtered + t.param(b));
                                       if (maxpool) features = maxpool1d(features, 2, 1);
                                       return std::vector<Expr>{tanh(matmul(t.param(u), kmax_pooling(features, 1)))};
                                     });
  c.loss = [=](Trace& t, int instances) {
    std::vector<Expr> terms;
    for (int i = 0; i < instances; ++i) {
      std::vector<float> spelled;
      for (int j = 0; j < letters; ++j)
        for (float x : column(n, float(i * letters + j) * 1.3f)) spelled.push_back(x);
      const Expr word = (*cell)(t, {t.input(n, letters, spelled)})[0];
      terms.push_back(sum_elements(cmult(word, t.input(column(n, float(i) + 0.25f)))));
    }
    return sum(terms);
  };
  return c;
}

class CompiledCellsColumnSteps : public testing::TestWithParam<std::string> {};

TEST_P(CompiledCellsColumnSteps, SoftmaxAndLogSoftmaxEqualTheReference) {
  for (int n : {8, 13}) {
    CellCase c = attention(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

TEST_P(CompiledCellsColumnSteps, SoftmaxOverTheColumnsOfAMatrixEqualsTheReference) {
  for (int n : {8, 13}) {
    CellCase c = attention_over_columns(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

TEST_P(CompiledCellsColumnSteps, PicksStretchedOverAColumnEqualTheReference) {
  for (int n : {8, 13}) {
    CellCase c = attention_by_picks(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

TEST_P(CompiledCellsColumnSteps, LayerNormSumAndMeanEqualTheReference) {
  for (int n : {8, 13}) {
    CellCase c = normalised(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

TEST_P(CompiledCellsColumnSteps, PickNegLogSoftmaxEqualsTheReference) {
  for (int n : {8, 13}) {
    CellCase c = picked_loss(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

TEST_P(CompiledCellsColumnSteps, ArgmaxEqualsTheReferenceWithEitherGradient) {
  for (int n : {8, 13})
    for (bool straight_through : {false, true}) {
      CellCase c = selected(n, straight_through);
      ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
    }
}

TEST_P(CompiledCellsColumnSteps, KmaxPoolingEqualsTheReference) {
  for (int n : {8, 13})
    for (int k : {1, 3}) {
      CellCase c = pooled(n, k);
      ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
    }
}

TEST_P(CompiledCellsColumnSteps, TransposeEqualsTheReference) {
  for (int n : {8, 13}) {
    CellCase c = transposed(n);
    ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, CompiledCellsColumnSteps, testing::Values("jit", "batched", "reference"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The convolutions' cells: one forward and one backward cell, each with its kmax_pooling (or
// gradient) step, lowered in blocks of the channels.
class CompiledCellsConvolutions : public testing::TestWithParam<std::string> {};

TEST_P(CompiledCellsConvolutions, Conv1dNarrowAndKmaxPoolingEqualTheReference) {
  for (int n : {8, 13})
    for (int width : {1, 3}) {
      CellCase c = encoder(n, 6, width, false, false);
      ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
    }
}

TEST_P(CompiledCellsConvolutions, Conv1dWideAndKmaxPoolingEqualTheReference) {
  for (int n : {8, 13})
    for (int width : {2, 3}) {
      CellCase c = encoder(n, 5, width, true, false);
      ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
    }
}

TEST_P(CompiledCellsConvolutions, Conv1dAndMaxpool1dEqualTheReference) {
  for (int n : {8, 13})
    for (bool wide : {false, true}) {
      CellCase c = encoder(n, 7, 3, wide, true);
      ASSERT_NO_FATAL_FAILURE(expect_reference_values(c, GetParam()));
    }
}

INSTANTIATE_TEST_SUITE_P(Executors, CompiledCellsConvolutions, testing::Values("jit", "batched", "reference"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace edb
