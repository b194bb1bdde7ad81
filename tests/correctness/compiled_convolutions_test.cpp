// Compiled cells whose bodies hold the 1-D convolutions (conv1d_narrow, conv1d_wide) and the
// poolings after them (kmax_pooling, maxpool1d), as a char-CNN's word encoder: they lower, forward
// and backward (products with constant column selections, trace/composed_ops.cpp), and their values
// and gradients equal the reference executor's without cells under jit, batched and reference.
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

// A word encoder over `letters` letters of n channels: tanh(conv(W X, F) + B) pooled to a column
// (kmax_pooling with k = 1, or maxpool1d of window 2 then kmax_pooling), then a tanh layer. A
// cell's argument shapes are fixed, so every call spells a word of the same length.
struct ConvolutionCase {
  std::string name;
  std::shared_ptr<Model> model;  // Models do not move
  std::vector<Parameter> parameters;
  std::shared_ptr<Cell> cell;
  int hidden = 0, letters = 0;
};

ConvolutionCase encoder(int n, int letters, int width, bool wide, bool maxpool) {
  ConvolutionCase c{std::string(wide ? "conv1d_wide" : "conv1d_narrow") + (maxpool ? " and maxpool1d" : "") + " of " +
                        std::to_string(n) + "x" + std::to_string(letters) + ", width " + std::to_string(width),
                    std::make_shared<Model>("encoder", 29), {}, nullptr, n, letters};
  const int out = wide ? letters + width - 1 : letters - width + 1;
  const Parameter w = c.model->add_parameter("W", n, n), f = c.model->add_parameter("F", n, width);
  const Parameter b = c.model->add_parameter("B", n, out), u = c.model->add_parameter("U", n, n);
  c.parameters = {w, f, b, u};
  c.cell = std::make_shared<Cell>("word", std::vector<std::pair<int, int>>{{n, letters}},
                                  [=](Trace& t, std::span<const Expr> in) {
                                    const Expr channels = matmul(t.param(w), in[0]);
                                    const Expr filtered = wide ? conv1d_wide(channels, t.param(f)) : conv1d_narrow(channels, t.param(f));
                                    Expr features = tanh(filtered + t.param(b));
                                    if (maxpool) features = maxpool1d(features, 2, 1);
                                    return std::vector<Expr>{tanh(matmul(t.param(u), kmax_pooling(features, 1)))};
                                  });
  return c;
}

Expr sentence_loss(const ConvolutionCase& c, Trace& t, int instances) {
  std::vector<Expr> terms;
  for (int i = 0; i < instances; ++i) {
    std::vector<float> letters;
    for (int j = 0; j < c.letters; ++j)
      for (float x : column(c.hidden, float(i * c.letters + j) * 1.3f)) letters.push_back(x);
    const Expr word = (*c.cell)(t, {t.input(c.hidden, c.letters, letters)})[0];
    terms.push_back(sum_elements(cmult(word, t.input(column(c.hidden, float(i) + 0.25f)))));
  }
  return sum(terms);
}

// The loss and every parameter's gradient under `executor` (cells on) against the reference
// executor with cells off, over traces of 1, 3 and 6 words; under jit, the cell lowered forward
// and backward, in blocks of the channels.
void expect_reference_values(const ConvolutionCase& c, const std::string& executor) {
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
    const Gradients want = want_trace.backward(sentence_loss(c, want_trace, instances));
    Trace trace(engine);
    const Expr loss = sentence_loss(c, trace, instances);
    const Gradients got = trace.backward(loss);
    if (executor == "jit") {
      const detail::EvaluatedTrace evaluated = detail::evaluated_trace(loss);
      int forward = 0, backward = 0;
      for (size_t k = 0; k < evaluated.graph.cell_count(); ++k) {
        const auto& cell = static_cast<const runtime::CallCell&>(evaluated.graph.cell(int64_t(k)));
        EXPECT_TRUE(cell.lowered) << cell.name << ": " << cell.why_not;
        EXPECT_EQ(cell.lowering.program.rows, c.hidden) << cell.name;
        (cell.is_backward ? backward : forward) += 1;
      }
      EXPECT_EQ(forward, 1);
      EXPECT_EQ(backward, 1);
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

class CompiledCellsConvolutions : public testing::TestWithParam<std::string> {};

TEST_P(CompiledCellsConvolutions, Conv1dNarrowAndKmaxPoolingEqualTheReference) {
  for (int n : {8, 13})
    for (int width : {1, 3}) ASSERT_NO_FATAL_FAILURE(expect_reference_values(encoder(n, 6, width, false, false), GetParam()));
}

TEST_P(CompiledCellsConvolutions, Conv1dWideAndKmaxPoolingEqualTheReference) {
  for (int n : {8, 13})
    for (int width : {2, 3}) ASSERT_NO_FATAL_FAILURE(expect_reference_values(encoder(n, 5, width, true, false), GetParam()));
}

TEST_P(CompiledCellsConvolutions, Conv1dAndMaxpool1dEqualTheReference) {
  for (int n : {8, 13})
    for (bool wide : {false, true}) ASSERT_NO_FATAL_FAILURE(expect_reference_values(encoder(n, 7, 3, wide, true), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Executors, CompiledCellsConvolutions, testing::Values("jit", "batched", "reference"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace edb
