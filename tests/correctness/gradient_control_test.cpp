// DyNet's gradient control (scale_gradient, nobackprop, flip_gradient): values are x's, and the
// gradient through them is scaled. Checked without finite differences: a program
// y = tanh(scale_gradient(a, s)) + 0.1 a^2 has, for every parameter and lookup row, the gradient
// s * G_tanh + G_square, where G_tanh and G_square are the reference executor's gradients of its
// two terms alone. Under every executor, alone and inside a cell (whose backward body then holds
// the scaling), over calls with different inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;

constexpr int kCalls = 5, kDim = 4;

enum class Terms { tanh_only, square_only, both };

struct Program {
  Model model{"gradient_control", 3};
  Parameter W = model.add_parameter("W", kDim, kDim);
  Parameter b = model.add_parameter("b", kDim, 1);
  LookupTable E = model.add_lookup("E", 2 * kCalls, kDim);
};

struct Outcome {
  std::vector<Tensor> values;
  Gradients gradients;
};

// One call's value from its input x: the chosen terms of tanh(scale_gradient(a, s)) + 0.1 a^2,
// a = W x + b.
Expr body(Trace& t, const Program& p, const Expr& x, float s, Terms terms) {
  const Expr a = affine({t.param(p.b), t.param(p.W), x});
  const Expr scaled = s == 0.0f ? nobackprop(a) : s == -1.0f ? flip_gradient(a) : scale_gradient(a, s);
  if (terms == Terms::tanh_only) return tanh(scaled);
  if (terms == Terms::square_only) return square(a) * 0.1f;
  return tanh(scaled) + square(a) * 0.1f;
}

Outcome run(const Program& p, const std::string& executor, bool cells, float s, Terms terms) {
  EngineOptions options = testing::checked_options(executor);
  options.cells = cells;
  Engine engine(options);
  const Cell cell("gradient_control", {{kDim, 1}}, [&](Trace& t, std::span<const Expr> in) {
    return std::vector<Expr>{body(t, p, in[0], s, terms)};
  });
  Outcome out;
  Trace trace(engine);
  const Expr w = trace.input(1, kDim, std::vector<float>{0.7f, -0.4f, 0.25f, 1.1f});
  std::vector<Expr> ys, terms_of_loss;
  for (int i = 0; i < kCalls; ++i) {
    ys.push_back(body(trace, p, trace.lookup(p.E, i), s, terms));  // plain
    ys.push_back(cell(trace, {trace.lookup(p.E, kCalls + i)})[0]);  // in the cell
  }
  for (const Expr& y : ys) terms_of_loss.push_back(matmul(w, y));
  out.gradients = trace.backward(sum(terms_of_loss));
  for (const Expr& y : ys) out.values.push_back(y.value());
  return out;
}

// The gradient of parameter or table `which` as one flat vector (zeros where none was sent).
std::vector<float> flat(const Gradients& g, const Program& p, int which) {
  if (which < 2) {
    const Tensor* t = g.of(which == 0 ? p.W : p.b);
    return t ? t->data : std::vector<float>(size_t(which == 0 ? kDim * kDim : kDim), 0.0f);
  }
  std::vector<float> all(size_t(2 * kCalls * kDim), 0.0f);
  if (const Gradients::Rows* rows = g.of(p.E))
    for (size_t e = 0; e < rows->entries.size(); ++e)
      for (int k = 0; k < kDim; ++k) all[size_t(rows->entries[e] * kDim + k)] = rows->gradients[e * kDim + size_t(k)];
  return all;
}

TEST(GradientControl, ValuesAreXsAndGradientsAreScaledUnderEveryExecutorInAndOutOfCells) {
  Program p;
  for (float& v : p.E.values()) v = std::sin(3.7f * float(&v - p.E.values().data()));
  const Outcome tanh_only = run(p, "reference", false, 1.0f, Terms::tanh_only);
  const Outcome square_only = run(p, "reference", false, 1.0f, Terms::square_only);
  const Outcome plain = run(p, "reference", false, 1.0f, Terms::both);
  for (float s : {0.0f, -1.0f, 0.5f, 2.0f})
    for (const char* executor : {"reference", "batched", "jit"})
      for (bool cells : {false, true}) {
        const std::string where = "scale " + std::to_string(s) + " " + executor + (cells ? " cells on" : " cells off");
        const Outcome r = run(p, executor, cells, s, Terms::both);
        ASSERT_EQ(r.values.size(), plain.values.size());
        for (size_t i = 0; i < r.values.size(); ++i) EXPECT_TRUE(near_relative(r.values[i], plain.values[i])) << where << " value " << i;
        for (int which = 0; which < 3; ++which) {
          const std::vector<float> got = flat(r.gradients, p, which), t = flat(tanh_only.gradients, p, which),
                                   q = flat(square_only.gradients, p, which);
          for (size_t k = 0; k < got.size(); ++k)
            EXPECT_TRUE(near_relative(got[k], double(s) * t[k] + q[k], 1e-4))
                << where << (which == 0 ? " W" : which == 1 ? " b" : " E") << "[" << k << "]";
        }
      }
}

// What reaches a parameter only through nobackprop gets no gradient at all; a scale that is not a
// finite number is refused when recorded.
TEST(GradientControl, NobackpropAloneLeavesNoGradientAndScalesMustBeFinite) {
  Program p;
  Engine engine;
  {
    Trace trace(engine);
    const Expr a = nobackprop(affine({trace.param(p.b), trace.param(p.W), trace.input(std::vector<float>(kDim, 0.5f))}));
    const Gradients g = trace.backward(sum_elements(tanh(a) + trace.input(std::vector<float>(kDim, 1.0f))));
    EXPECT_EQ(g.of(p.W), nullptr);
    EXPECT_EQ(g.of(p.b), nullptr);
  }
  Trace trace(engine);
  const Expr x = trace.input(std::vector<float>(kDim, 1.0f));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    try {
      scale_gradient(x, bad);
      ADD_FAILURE() << "scale " << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("edb::scale_gradient()"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(flip_gradient(x).value().data, x.value().data);
}

}  // namespace
}  // namespace edb
