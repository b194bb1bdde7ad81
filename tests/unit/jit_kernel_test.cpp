// Kernel IR and the LLVM backend: canonical text, verification, compiled kernels against the
// interpreter (and direct libm formulas) over random shapes and every operand access, accuracy
// sweeps of the inlined tanh / sigmoid / exp / log against libm, symbols and keep-alive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "jit/host.h"
#include "jit/kernel_ir.h"
#include "jit/llvm_backend.h"

namespace edb::jit {
namespace {

constexpr float kGuard = -12345.0f;  // fills gaps between members and the tail after outputs
constexpr int64_t kTail = 16;        // guard floats after each output

// Inputs laid out per access mode, and a guarded output buffer per kernel output.
struct Buffers {
  std::vector<std::vector<float>> storage;          // one per input
  std::vector<std::vector<const float*>> pointers;  // gathered inputs: one per member
  std::vector<KernelInput> inputs;
  std::vector<std::vector<float>> outputs;
  std::vector<float*> output_pointers;
  int64_t members = 0, elements = 0;

  KernelArgs args() const { return {members, elements, inputs.data(), output_pointers.data()}; }
  void reset_outputs() {
    output_pointers.clear();
    for (auto& out : outputs) {
      std::fill(out.begin(), out.end(), kGuard);
      output_pointers.push_back(out.data());
    }
  }
  // Member k's element e of input i, as the kernel should read it.
  float input(const Kernel& kernel, size_t i, int64_t k, int64_t e) const {
    switch (kernel.inputs[i]) {
      case OperandAccess::shared: return inputs[i].base[e];
      case OperandAccess::strided: return inputs[i].base[k * inputs[i].stride + e];
      case OperandAccess::gathered: return inputs[i].pointers[k][e];
    }
    return 0;
  }
};

// Random values in [-range, range]; strided and gathered members sit apart with guard values
// between them, gathered members in shuffled order.
Buffers make_buffers(const Kernel& kernel, int64_t members, int64_t elements, std::mt19937& rng, float range = 4) {
  Buffers b;
  b.members = members;
  b.elements = elements;
  std::uniform_real_distribution<float> value(-range, range);
  std::uniform_int_distribution<int64_t> pad(1, 7);
  b.storage.resize(kernel.inputs.size());
  b.pointers.resize(kernel.inputs.size());
  for (size_t i = 0; i < kernel.inputs.size(); ++i) {
    KernelInput input;
    std::vector<float>& data = b.storage[i];
    if (kernel.inputs[i] == OperandAccess::shared) {
      data.resize(size_t(elements));
      for (float& x : data) x = value(rng);
      input.base = data.data();
    } else {
      const int64_t stride = elements + pad(rng);
      data.assign(size_t(members * stride), kGuard);
      for (int64_t k = 0; k < members; ++k)
        for (int64_t e = 0; e < elements; ++e) data[size_t(k * stride + e)] = value(rng);
      input.base = data.data();
      input.stride = stride;
      if (kernel.inputs[i] == OperandAccess::gathered) {
        std::vector<int64_t> order(static_cast<size_t>(members));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t k = 0; k < members; ++k) b.pointers[i].push_back(data.data() + order[size_t(k)] * stride);
        input = {nullptr, 0, b.pointers[i].data()};
      }
    }
    b.inputs.push_back(input);
  }
  b.outputs.assign(kernel.outputs.size(), std::vector<float>(size_t(members * elements + kTail)));
  b.reset_outputs();
  return b;
}

// |got - want| <= tolerance * max(1, |want|): relative above 1, absolute below (after a
// subtraction a small result carries its operands' absolute error, so relative means nothing);
// equal infinities match.
::testing::AssertionResult near(const std::vector<float>& got, const std::vector<float>& want, int64_t count,
                                double tolerance) {
  for (int64_t n = 0; n < count; ++n) {
    const double g = got[size_t(n)], w = want[size_t(n)];
    if (std::isnan(w) ? !std::isnan(g) : !(g == w || std::abs(g - w) <= tolerance * std::max(1.0, std::abs(w))))
      return ::testing::AssertionFailure() << "element " << n << ": got " << g << ", want " << w;
  }
  for (int64_t n = count; n < count + kTail; ++n)
    if (got[size_t(n)] != kGuard) return ::testing::AssertionFailure() << "wrote past the end at " << n;
  return ::testing::AssertionSuccess();
}

// Runs the compiled kernel and the interpreter on random shapes (members 1..70, elements
// 1..300, plus the corners) and compares every output.
void expect_matches_interpreter(LlvmBackend& backend, const Kernel& kernel, uint32_t seed, double tolerance = 1e-6,
                                int shapes = 12) {
  const CompiledKernel compiled = backend.compile(kernel);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> members(1, 70), elements(1, 300);
  for (int s = 0; s < shapes; ++s) {
    const int64_t m = s == 0 ? 1 : s == 1 ? 70 : members(rng);
    const int64_t n = s == 0 ? 1 : s == 1 ? 300 : elements(rng);
    Buffers b = make_buffers(kernel, m, n, rng);
    compiled(b.args());
    const std::vector<std::vector<float>> got = b.outputs;
    b.reset_outputs();
    interpret(kernel, b.args());
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_TRUE(near(got[j], b.outputs[j], m * n, tolerance))
          << "output " << j << ", members " << m << ", elements " << n << "\n" << describe(kernel);
  }
}

constexpr OperandAccess kAccesses[] = {OperandAccess::shared, OperandAccess::strided, OperandAccess::gathered};

Kernel unary_kernel(KernelOp op, OperandAccess access, float constant = 0) {
  Kernel k;
  k.name = std::string(kernel_op_name(op));
  k.inputs = {access};
  const ValueId x = k.load(0);
  k.store(op == KernelOp::load ? x : kernel_op_has_constant(op) ? k.with_constant(op, x, constant) : k.unary(op, x));
  return k;
}

// c = sigmoid(i) * tanh(g) + sigmoid(f) * c_prev; h = sigmoid(o) * tanh(c), or tanh(c) without o.
Kernel lstm_kernel(bool output_gate) {
  Kernel k;
  k.name = output_gate ? "lstm_cell" : "lstm_cell_no_output_gate";
  k.inputs = {OperandAccess::strided, OperandAccess::strided, OperandAccess::strided, OperandAccess::gathered};
  if (output_gate) k.inputs.push_back(OperandAccess::strided);
  const ValueId i = k.unary(KernelOp::sigmoid, k.load(0));
  const ValueId f = k.unary(KernelOp::sigmoid, k.load(1));
  const ValueId g = k.unary(KernelOp::tanh, k.load(2));
  const ValueId ig = k.binary(KernelOp::cmult, i, g);
  const ValueId kept = k.binary(KernelOp::cmult, f, k.load(3));
  const ValueId c = k.binary(KernelOp::add, ig, kept);
  ValueId h = k.unary(KernelOp::tanh, c);
  if (output_gate) {
    const ValueId o = k.unary(KernelOp::sigmoid, k.load(4));
    h = k.binary(KernelOp::cmult, o, h);
  }
  k.store(c);
  k.store(h);
  return k;
}

TEST(KernelIr, CanonicalTextIsStable) {
  Kernel k;
  k.name = "tanh(scale(cmult)) f32[32,1]";
  k.inputs = {OperandAccess::strided, OperandAccess::gathered, OperandAccess::shared};
  const ValueId x0 = k.load(0), x1 = k.load(1);  // one statement per value: argument order is unspecified
  const ValueId product = k.binary(KernelOp::cmult, x0, x1);
  const ValueId scaled = k.with_constant(KernelOp::scale, product, 0.5f);
  const ValueId shifted = k.binary(KernelOp::add, scaled, k.load(2));
  k.store(k.unary(KernelOp::tanh, shifted));
  k.store(product);
  EXPECT_EQ(describe(k),
            "kernel f32 elementwise tanh(scale(cmult)) f32[32,1]\n"
            "in x0 strided\n"
            "in x1 gathered\n"
            "in x2 shared\n"
            "%0 = load x0\n"
            "%1 = load x1\n"
            "%2 = cmult %0 %1\n"
            "%3 = scale %2 0x3f000000 (0.5)\n"
            "%4 = load x2\n"
            "%5 = add %3 %4\n"
            "%6 = tanh %5\n"
            "out y0 = %6\n"
            "out y1 = %2\n");
  EXPECT_EQ(describe(k), describe(Kernel(k)));
}

TEST(KernelIr, DifferentKernelsHaveDifferentTexts) {
  std::vector<Kernel> kernels;
  for (OperandAccess access : kAccesses)
    for (int op = 0; op <= int(KernelOp::relu_grad); ++op)  // every kernel op
      if (kernel_op_arity(KernelOp(op)) < 2) kernels.push_back(unary_kernel(KernelOp(op), access, 2.0f));
  kernels.push_back(unary_kernel(KernelOp::scale, OperandAccess::strided, std::nextafter(2.0f, 3.0f)));
  kernels.push_back(unary_kernel(KernelOp::scale, OperandAccess::strided, -0.0f));
  kernels.push_back(unary_kernel(KernelOp::scale, OperandAccess::strided, 0.0f));
  kernels.push_back(lstm_kernel(true));
  kernels.push_back(lstm_kernel(false));
  Kernel swapped = lstm_kernel(true);
  std::swap(swapped.outputs[0], swapped.outputs[1]);
  kernels.push_back(swapped);
  Kernel renamed = lstm_kernel(true);
  renamed.name = "other signature";
  kernels.push_back(renamed);
  std::set<std::string> texts;
  for (const Kernel& k : kernels) texts.insert(describe(k));
  EXPECT_EQ(texts.size(), kernels.size());
}

TEST(KernelIr, VerifyRejectsMalformedKernels) {
  auto broken = [](auto edit) {
    Kernel k = lstm_kernel(false);
    edit(k);
    return k;
  };
  EXPECT_NO_THROW(verify(lstm_kernel(true)));
  EXPECT_THROW(verify(broken([](Kernel& k) { k.outputs.clear(); })), InternalError);
  EXPECT_THROW(verify(broken([](Kernel& k) { k.outputs.push_back(ValueId(k.body.size())); })), InternalError);
  EXPECT_THROW(verify(broken([](Kernel& k) { k.body[2].a = 5; })), InternalError);  // use before def
  EXPECT_THROW(verify(broken([](Kernel& k) { k.body[0].input = 9; })), InternalError);
  EXPECT_THROW(verify(broken([](Kernel& k) { k.body[1].b = 0; })), InternalError);  // sigmoid is unary
  EXPECT_THROW(verify(broken([](Kernel& k) { k.body[1].constant = 1.0f; })), InternalError);
  EXPECT_THROW(describe(broken([](Kernel& k) { k.body[3].a = -1; })), InternalError);
}

TEST(KernelIr, TextParsesBackToTheSameKernel) {
  std::vector<Kernel> kernels = {lstm_kernel(true), lstm_kernel(false)};
  for (OperandAccess access : kAccesses)
    for (int op = 0; op <= int(KernelOp::relu_grad); ++op)  // every kernel op
      if (kernel_op_arity(KernelOp(op)) < 2) kernels.push_back(unary_kernel(KernelOp(op), access, -1.5e-7f));
  kernels.push_back(unary_kernel(KernelOp::scale, OperandAccess::strided, -0.0f));
  kernels.push_back(unary_kernel(KernelOp::add_const, OperandAccess::strided, std::numeric_limits<float>::infinity()));
  for (const Kernel& k : kernels) {
    const std::string text = describe(k);
    EXPECT_EQ(describe(parse_kernel(text)), text);
  }
}

TEST(KernelIr, BadTextIsAUsageErrorNamingTheLine) {
  const std::string good = describe(lstm_kernel(false));
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_kernel(text);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(parsed)";
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(error_of(good), "(parsed)");
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("kernel f64 elementwise x\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of(replaced("in x1 strided", "in x1 sideways")).find("line 3"), std::string::npos);
  EXPECT_NE(error_of(replaced("in x1 strided", "in x7 strided")).find("in order"), std::string::npos);
  EXPECT_NE(error_of(replaced("= sigmoid %0", "= sine %0")).find("unknown kernel op 'sine'"), std::string::npos);
  EXPECT_NE(error_of(replaced("= sigmoid %0", "= sigmoid")).find("ends early"), std::string::npos);
  EXPECT_NE(error_of(replaced("= sigmoid %0", "= sigmoid %0 %0")).find("at the end"), std::string::npos);
  EXPECT_NE(error_of(replaced("= sigmoid %0", "= sigmoid %9")).find("not defined before"), std::string::npos);
  EXPECT_NE(error_of(good + "whatever\n").find("expected 'in', 'out'"), std::string::npos);
  Kernel scaled = unary_kernel(KernelOp::scale, OperandAccess::strided, 0.5f);
  std::string text = describe(scaled);
  text.replace(text.find("(0.5)"), 5, "(0.25)");
  EXPECT_NE(error_of(text).find("does not match its bits"), std::string::npos);
}

TEST(LlvmBackend, EveryOpAloneMatchesTheInterpreter) {
  LlvmBackend backend;
  uint32_t seed = 1;
  for (OperandAccess access : kAccesses) {
    for (KernelOp op : {KernelOp::load, KernelOp::tanh, KernelOp::sigmoid, KernelOp::relu, KernelOp::exp, KernelOp::log,
                        KernelOp::sqrt, KernelOp::softsign, KernelOp::silu, KernelOp::selu, KernelOp::log_sigmoid,
                        KernelOp::erf, KernelOp::sin, KernelOp::cos, KernelOp::sinh, KernelOp::cosh, KernelOp::tan,
                        KernelOp::asinh, KernelOp::acosh, KernelOp::atanh, KernelOp::asin, KernelOp::acos,
                        KernelOp::atan})
      expect_matches_interpreter(backend, unary_kernel(op, access), seed++);  // log, sqrt: NaN below 0 on both
    for (KernelOp op : {KernelOp::abs, KernelOp::square, KernelOp::cube})  // the same operations in the same order
      expect_matches_interpreter(backend, unary_kernel(op, access), seed++, 0.0);
    for (KernelOp op : {KernelOp::round, KernelOp::ceil, KernelOp::floor})  // exact, as libm
      expect_matches_interpreter(backend, unary_kernel(op, access), seed++, 0.0);
    expect_matches_interpreter(backend, unary_kernel(KernelOp::elu, access, 0.75f), seed++);
    expect_matches_interpreter(backend, unary_kernel(KernelOp::scale, access, -1.75f), seed++);
    expect_matches_interpreter(backend, unary_kernel(KernelOp::add_const, access, 0.3f), seed++);
    for (OperandAccess second : kAccesses)
      for (KernelOp op : {KernelOp::add, KernelOp::sub, KernelOp::cmult, KernelOp::div, KernelOp::max, KernelOp::min,
                          KernelOp::pow, KernelOp::relu_grad}) {
        Kernel k;
        k.name = std::string(kernel_op_name(op));
        k.inputs = {access, second};
        k.store(k.binary(op, k.load(0), k.load(1)));
        expect_matches_interpreter(backend, k, seed++, op == KernelOp::pow ? 1e-5 : 0.0);  // the others exact
      }
  }
}

TEST(LlvmBackend, FusedChainsMatchTheInterpreter) {
  LlvmBackend backend;
  {  // relu(1.5 (x0 + x1) - 0.25), and the sum itself
    Kernel k;
    k.inputs = {OperandAccess::gathered, OperandAccess::shared};
    const ValueId sum = k.binary(KernelOp::add, k.load(0), k.load(1));
    k.store(k.unary(KernelOp::relu, k.with_constant(KernelOp::add_const, k.with_constant(KernelOp::scale, sum, 1.5f), -0.25f)));
    k.store(sum);
    expect_matches_interpreter(backend, k, 101, 0.0);
  }
  {  // tanh(sigmoid(x0) * x1 - x2)
    Kernel k;
    k.inputs = {OperandAccess::strided, OperandAccess::gathered, OperandAccess::strided};
    const ValueId gated = k.binary(KernelOp::cmult, k.unary(KernelOp::sigmoid, k.load(0)), k.load(1));
    k.store(k.unary(KernelOp::tanh, k.binary(KernelOp::sub, gated, k.load(2))));
    expect_matches_interpreter(backend, k, 102);
  }
  {  // exp(-x0 / 2) * x1 and x1 - tanh(x1) (a shared operand read twice)
    Kernel k;
    k.inputs = {OperandAccess::gathered, OperandAccess::shared};
    k.store(k.binary(KernelOp::cmult, k.unary(KernelOp::exp, k.with_constant(KernelOp::scale, k.load(0), -0.5f)), k.load(1)));
    k.store(k.binary(KernelOp::sub, k.load(1), k.unary(KernelOp::tanh, k.load(1))));
    expect_matches_interpreter(backend, k, 103);
  }
  expect_matches_interpreter(backend, lstm_kernel(false), 104);
  expect_matches_interpreter(backend, lstm_kernel(true), 105);
}

// The LSTM cell on gates laid out as one affine output per member (i, f, o, g slices of 4H
// floats: strided with stride 4H + padding) and c_prev gathered, against direct double formulas.
TEST(LlvmBackend, LstmCellMatchesDirectFormulas) {
  LlvmBackend backend;
  const CompiledKernel lstm = backend.compile(lstm_kernel(true));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-5, 5);
  for (auto [members, hidden] : {std::pair<int64_t, int64_t>{1, 1}, {70, 300}, {13, 37}, {64, 128}, {5, 7}}) {
    const int64_t stride = 4 * hidden + 3;
    std::vector<float> gates(size_t(members * stride)), c_prev(size_t(members * hidden));
    for (float& x : gates) x = value(rng);
    for (float& x : c_prev) x = value(rng);
    std::vector<const float*> c_pointers;
    for (int64_t k = members - 1; k >= 0; --k) c_pointers.push_back(c_prev.data() + k * hidden);  // reversed
    const KernelInput inputs[] = {{gates.data(), stride, nullptr},
                                  {gates.data() + hidden, stride, nullptr},
                                  {gates.data() + 3 * hidden, stride, nullptr},
                                  {nullptr, 0, c_pointers.data()},
                                  {gates.data() + 2 * hidden, stride, nullptr}};
    std::vector<float> c(size_t(members * hidden)), h(size_t(members * hidden));
    float* outputs[] = {c.data(), h.data()};
    lstm({members, hidden, inputs, outputs});
    auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
    double worst = 0;
    for (int64_t k = 0; k < members; ++k)
      for (int64_t e = 0; e < hidden; ++e) {
        const float* gate = gates.data() + k * stride + e;
        const double want_c = sigmoid(gate[0]) * std::tanh(double(gate[3 * hidden])) +
                              sigmoid(gate[hidden]) * double(c_pointers[size_t(k)][e]);
        const double want_h = sigmoid(gate[2 * hidden]) * std::tanh(want_c);
        const size_t at = size_t(k * hidden + e);
        worst = std::max({worst, std::abs(c[at] - want_c) / std::max(1.0, std::abs(want_c)),
                          std::abs(h[at] - want_h) / std::max(1.0, std::abs(want_h))});
      }
    EXPECT_LE(worst, 1e-6) << "members " << members << ", hidden " << hidden;
  }
}

struct Accuracy {
  double max_relative = 0, max_absolute = 0, worst_x = 0;
  double largest = 0;  // the largest |f(x)| computed
};

// Runs a one-op kernel over `count` evenly spaced points in [low, high] against a double formula.
Accuracy sweep(LlvmBackend& backend, KernelOp op, double (*reference)(double), float low, float high, int64_t count) {
  const CompiledKernel compiled = backend.compile(unary_kernel(op, OperandAccess::strided));
  std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) x[size_t(n)] = low + float(double(high - low) * double(n) / double(count - 1));
  const KernelInput input{x.data(), count, nullptr};
  float* output = y.data();
  compiled({1, count, &input, &output});
  Accuracy a;
  for (int64_t n = 0; n < count; ++n) {
    const double want = reference(x[size_t(n)]), error = std::abs(double(y[size_t(n)]) - want);
    const double relative = want == 0 ? (error == 0 ? 0 : INFINITY) : error / std::abs(want);
    if (relative > a.max_relative) a.worst_x = x[size_t(n)];
    a.max_relative = std::max(a.max_relative, relative);
    a.max_absolute = std::max(a.max_absolute, error);
    a.largest = std::max(a.largest, std::abs(double(y[size_t(n)])));
  }
  std::printf("%-8s [%g, %g] %lld points: max relative error %.3g (at x = %.9g), max absolute error %.3g\n",
              std::string(kernel_op_name(op)).c_str(), double(low), double(high), (long long)count, a.max_relative,
              a.worst_x, a.max_absolute);
  return a;
}

double reference_tanh(double x) { return std::tanh(x); }
double reference_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double reference_exp(double x) { return std::exp(x); }

// Criterion: relative error <= 1e-6 against libm in double at every point. It holds everywhere,
// also near 0 and in saturation (sigmoid ~ 2e-9 at -20 is still relative), so no absolute
// fallback is needed; the absolute error is also bounded where |f| <= 1: by 1e-7 for sigmoid,
// by 4e-7 for tanh (Eigen's rational tanh, llvm_math.h: 2.6e-7 near x = 6, about 4 ulp of 1;
// 3.7e-7 under EDB_ISA=generic, without fused multiply-adds), which never passes 1 in magnitude.
TEST(LlvmBackend, TranscendentalsAreAccurate) {
  LlvmBackend backend;
  const Accuracy tanh = sweep(backend, KernelOp::tanh, reference_tanh, -20, 20, 1000000);
  const Accuracy tanh_near_zero = sweep(backend, KernelOp::tanh, reference_tanh, -1e-3f, 1e-3f, 100001);
  const Accuracy sigmoid = sweep(backend, KernelOp::sigmoid, reference_sigmoid, -20, 20, 1000000);
  const Accuracy exp = sweep(backend, KernelOp::exp, reference_exp, -80, 80, 1000000);
  const Accuracy exp_small = sweep(backend, KernelOp::exp, reference_exp, -1, 1, 1000000);
  for (const Accuracy& a : {tanh, tanh_near_zero, sigmoid, exp, exp_small}) EXPECT_LE(a.max_relative, 1e-6);
  EXPECT_LE(sigmoid.max_absolute, 1e-7);
  for (const Accuracy& a : {tanh, tanh_near_zero}) EXPECT_LE(a.max_absolute, 4e-7);
  EXPECT_LE(tanh.largest, 1.0);
}

// Issue 46's inlined functions against libm in double: relative error where the function keeps
// away from 0 (and near 0 for the odd ones), absolute for sin and cos (zeros inside the range).
TEST(LlvmBackend, UnaryOpsOfIssue46AreAccurate) {
  LlvmBackend backend;
  const Accuracy erf = sweep(backend, KernelOp::erf, [](double x) { return std::erf(x); }, -6, 6, 1000000);
  const Accuracy erf_near_zero = sweep(backend, KernelOp::erf, [](double x) { return std::erf(x); }, -1e-3f, 1e-3f, 100001);
  const Accuracy selu = sweep(backend, KernelOp::selu, [](double x) {
    return 1.0507009873554804934 * (x > 0 ? x : 1.6732632423543772848 * std::expm1(x));
  }, -20, 20, 1000000);
  const Accuracy log_sigmoid = sweep(backend, KernelOp::log_sigmoid, [](double x) { return -std::log1p(std::exp(-x)); },
                                     -80, 80, 1000000);
  const Accuracy sinh = sweep(backend, KernelOp::sinh, [](double x) { return std::sinh(x); }, -88, 88, 1000000);
  const Accuracy sinh_near_zero = sweep(backend, KernelOp::sinh, [](double x) { return std::sinh(x); }, -1e-3f, 1e-3f, 100001);
  const Accuracy cosh = sweep(backend, KernelOp::cosh, [](double x) { return std::cosh(x); }, -88, 88, 1000000);
  for (const Accuracy& a : {erf, erf_near_zero, selu, log_sigmoid, sinh, sinh_near_zero, cosh}) EXPECT_LE(a.max_relative, 1e-6);
  const Accuracy sin = sweep(backend, KernelOp::sin, [](double x) { return std::sin(x); }, -8192, 8192, 1000000);
  const Accuracy cos = sweep(backend, KernelOp::cos, [](double x) { return std::cos(x); }, -8192, 8192, 1000000);
  const Accuracy sin_near_zero = sweep(backend, KernelOp::sin, [](double x) { return std::sin(x); }, -1e-3f, 1e-3f, 100001);
  for (const Accuracy& a : {sin, cos}) EXPECT_LE(a.max_absolute, 2e-7);
  EXPECT_LE(sin_near_zero.max_relative, 1e-6);
  const Accuracy tan = sweep(backend, KernelOp::tan, [](double x) { return std::tan(x); }, -1.5, 1.5, 1000000);
  const Accuracy tan_near_zero =
      sweep(backend, KernelOp::tan, [](double x) { return std::tan(x); }, -1e-3f, 1e-3f, 100001);
  const Accuracy asinh = sweep(backend, KernelOp::asinh, [](double x) { return std::asinh(x); }, -1e6, 1e6, 1000000);
  const Accuracy asinh_small = sweep(backend, KernelOp::asinh, [](double x) { return std::asinh(x); }, -8, 8, 1000000);
  const Accuracy asinh_near_zero =
      sweep(backend, KernelOp::asinh, [](double x) { return std::asinh(x); }, -1e-3f, 1e-3f, 100001);
  const Accuracy acosh = sweep(backend, KernelOp::acosh, [](double x) { return std::acosh(x); }, 1, 1e6, 1000000);
  const Accuracy acosh_near_one =
      sweep(backend, KernelOp::acosh, [](double x) { return std::acosh(x); }, 1, 1.01f, 100001);
  const Accuracy atanh =
      sweep(backend, KernelOp::atanh, [](double x) { return std::atanh(x); }, -0.9999f, 0.9999f, 1000000);
  const Accuracy atanh_near_zero =
      sweep(backend, KernelOp::atanh, [](double x) { return std::atanh(x); }, -1e-3f, 1e-3f, 100001);
  for (const Accuracy& a :
       {tan, tan_near_zero, asinh, asinh_small, asinh_near_zero, acosh, acosh_near_one, atanh, atanh_near_zero})
    EXPECT_LE(a.max_relative, 1e-6);
  // The inverse trigonometric functions: relative near 0, and acos near 1 (where it goes to 0).
  const Accuracy asin = sweep(backend, KernelOp::asin, [](double x) { return std::asin(x); }, -1, 1, 1000000);
  const Accuracy asin_near_zero =
      sweep(backend, KernelOp::asin, [](double x) { return std::asin(x); }, -1e-3f, 1e-3f, 100001);
  const Accuracy acos = sweep(backend, KernelOp::acos, [](double x) { return std::acos(x); }, -1, 0.9999f, 1000000);
  const Accuracy acos_near_one =
      sweep(backend, KernelOp::acos, [](double x) { return std::acos(x); }, 0.99f, 0.999999f, 100001);
  const Accuracy atan = sweep(backend, KernelOp::atan, [](double x) { return std::atan(x); }, -1e6, 1e6, 1000000);
  const Accuracy atan_small = sweep(backend, KernelOp::atan, [](double x) { return std::atan(x); }, -8, 8, 1000000);
  const Accuracy atan_near_zero =
      sweep(backend, KernelOp::atan, [](double x) { return std::atan(x); }, -1e-3f, 1e-3f, 100001);
  for (const Accuracy& a : {asin, asin_near_zero, acos, acos_near_one, atan, atan_small, atan_near_zero})
    EXPECT_LE(a.max_relative, 1e-6);
}

// Their special values: NaN outside [-1, 1] (asin, acos) and for NaN, the ends exactly as libm's
// to a rounding, atan's limits at the infinities, and -0 kept by the odd ones.
TEST(LlvmBackend, InverseTrigonometricSpecialValues) {
  LlvmBackend backend;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (KernelOp op : {KernelOp::asin, KernelOp::acos, KernelOp::atan}) {
    const CompiledKernel compiled = backend.compile(unary_kernel(op, OperandAccess::strided));
    const std::vector<float> x = {-inf, -1.5f, -1.0f, -0.0f, 0.0f, 1.0f, 1.0000001f, inf, nan};
    std::vector<float> y(x.size());
    const KernelInput input{x.data(), int64_t(x.size()), nullptr};
    float* output = y.data();
    compiled({1, int64_t(x.size()), &input, &output});
    for (size_t i = 0; i < x.size(); ++i) {
      const float expected = op == KernelOp::asin ? std::asin(x[i]) : op == KernelOp::acos ? std::acos(x[i]) : std::atan(x[i]);
      SCOPED_TRACE(std::string(kernel_op_name(op)) + "(" + std::to_string(x[i]) + ")");
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(y[i])) << y[i];
      } else {
        EXPECT_NEAR(y[i], expected, 2.4e-7 * std::abs(expected));
        EXPECT_EQ(std::signbit(y[i]), std::signbit(expected));
      }
    }
  }
}

// pow against libm in double over bases and exponents where |y log x| <= 10 (inside the
// random kernels' inputs), and libm's special cases exactly.
TEST(LlvmBackend, PowIsAccurate) {
  LlvmBackend backend;
  Kernel k;
  k.name = "pow";
  k.inputs = {OperandAccess::shared, OperandAccess::shared};
  k.store(k.binary(KernelOp::pow, k.load(0), k.load(1)));
  const CompiledKernel compiled = backend.compile(k);
  std::vector<float> x, y;
  for (int i = 0; i < 400; ++i)
    for (int j = 0; j < 400; ++j) {
      const float base = 0.05f + 9.95f * float(i) / 399, exponent = -4.0f + 8.0f * float(j) / 399;
      if (std::fabs(exponent * std::log(base)) > 10) continue;
      x.push_back(base);
      y.push_back(exponent);
    }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> special = {
      {0.0f, 2.0f}, {0.0f, -1.0f}, {-0.0f, 3.0f}, {-2.0f, 3.0f}, {-2.0f, 2.0f}, {-2.0f, 0.5f}, {nan, 0.0f}, {1.0f, nan},
      {2.0f, inf}, {0.5f, inf}, {2.0f, -inf}, {inf, 2.0f}, {inf, -2.0f}, {-inf, 3.0f}, {nan, 2.0f}, {2.0f, nan},
      {-3.0f, 1e30f}, {1e-30f, 2.0f}};
  const size_t smooth = x.size();
  for (const auto& [a, b] : special) {
    x.push_back(a);
    y.push_back(b);
  }
  std::vector<float> out(x.size());
  KernelInput inputs[] = {{x.data(), 0, nullptr}, {y.data(), 0, nullptr}};
  float* outputs[] = {out.data()};
  compiled({1, int64_t(x.size()), inputs, outputs});
  double worst = 0;
  for (size_t n = 0; n < smooth; ++n) {
    const double want = std::pow(double(x[n]), double(y[n]));
    worst = std::max(worst, std::fabs(out[n] - want) / want);
  }
  std::printf("pow: max relative error %.3g where |y log x| <= 10\n", worst);
  EXPECT_LE(worst, 2e-6);
  for (size_t n = smooth; n < x.size(); ++n) {
    const float want = std::pow(x[n], y[n]);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(out[n])) << x[n] << " ^ " << y[n] << " gave " << out[n];
    else EXPECT_EQ(out[n], want) << x[n] << " ^ " << y[n];
  }
}

TEST(LlvmBackend, TranscendentalsAtTheEdges) {
  LlvmBackend backend;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.5f, 89.0f, -100.0f, -104.5f, -200.0f, 200.0f, inf, -inf, nan};
  for (KernelOp op : {KernelOp::tanh, KernelOp::sigmoid, KernelOp::exp}) {
    const CompiledKernel compiled = backend.compile(unary_kernel(op, OperandAccess::shared));
    std::vector<float> y(x.size());
    const KernelInput input{x.data(), 0, nullptr};
    float* output = y.data();
    compiled({1, int64_t(x.size()), &input, &output});
    for (size_t n = 0; n < x.size(); ++n) {
      const double xd = x[n];
      const double want = op == KernelOp::tanh ? std::tanh(xd) : op == KernelOp::exp ? std::exp(xd) : reference_sigmoid(xd);
      const double want_float = double(float(want));  // overflow to inf, underflow to denormals
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[n])) << kernel_op_name(op) << "(" << xd << ") = " << y[n];
      } else if (std::isinf(want_float) || want_float == 0) {
        EXPECT_EQ(double(y[n]), want_float) << kernel_op_name(op) << "(" << xd << ")";
      } else {
        // Denormal results may lose all precision: sigmoid(-100) ~ 4e-44 comes out 0 (exp(100) = inf).
        const double floor = std::abs(want) < std::numeric_limits<float>::min() ? std::numeric_limits<float>::min() : 0;
        EXPECT_LE(std::abs(y[n] - want), std::max(1e-6 * std::abs(want), floor)) << kernel_op_name(op) << "(" << xd << ")";
      }
    }
  }
}

// log against libm in double over 2^-149 .. 2^128 (points spaced evenly in the exponent, so every
// binade is swept, subnormals too) and densely around 1, where log is near 0.
TEST(LlvmBackend, LogIsAccurate) {
  LlvmBackend backend;
  const CompiledKernel compiled = backend.compile(unary_kernel(KernelOp::log, OperandAccess::strided));
  auto worst_relative = [&](const std::vector<float>& x) {
    std::vector<float> y(x.size());
    const KernelInput input{x.data(), int64_t(x.size()), nullptr};
    float* output = y.data();
    compiled({1, int64_t(x.size()), &input, &output});
    double worst = 0;
    for (size_t n = 0; n < x.size(); ++n) {
      const double want = std::log(double(x[n]));
      worst = std::max(worst, want == 0 ? std::abs(double(y[n])) : std::abs(double(y[n]) - want) / std::abs(want));
    }
    return worst;
  };
  std::vector<float> wide, near_one;
  for (int n = 0; n < 1000000; ++n) {
    wide.push_back(float(std::exp2(-149.0 + 276.999 * n / 999999.0)));
    near_one.push_back(0.9f + 0.2f * float(n) / 999999.0f);
  }
  const double wide_error = worst_relative(wide), near_one_error = worst_relative(near_one);
  std::printf("log: max relative error %.3g over [2^-149, 2^128), %.3g over [0.9, 1.1]\n", wide_error, near_one_error);
  EXPECT_LE(wide_error, 1e-6);
  EXPECT_LE(near_one_error, 1e-6);
}

TEST(LlvmBackend, LogAtTheEdges) {
  LlvmBackend backend;
  const CompiledKernel compiled = backend.compile(unary_kernel(KernelOp::log, OperandAccess::shared));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {0.0f, -0.0f, -1e-30f, -1.0f, -inf, nan, inf, 1.0f, 1e-45f, 1e-40f,
                                std::numeric_limits<float>::min(), std::numeric_limits<float>::max()};
  std::vector<float> y(x.size());
  const KernelInput input{x.data(), 0, nullptr};
  float* output = y.data();
  compiled({1, int64_t(x.size()), &input, &output});
  for (size_t n = 0; n < x.size(); ++n) {
    const double want = std::log(double(x[n]));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(y[n])) << "log(" << x[n] << ") = " << y[n];
    else if (std::isinf(want)) EXPECT_EQ(double(y[n]), want) << "log(" << x[n] << ")";
    else EXPECT_LE(std::abs(y[n] - want), 1e-6 * std::max(1.0, std::abs(want))) << "log(" << x[n] << ")";
  }
}

// max and min as ir::max_of and ir::min_of: a NaN in either argument gives NaN; otherwise exact.
TEST(LlvmBackend, MaxAndMinPassNaNOn) {
  LlvmBackend backend;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {1.0f, -2.0f, nan, 3.0f, nan, -inf, 0.5f};
  const std::vector<float> b = {2.0f, -3.0f, 1.0f, nan, nan, 4.0f, 0.5f};
  for (KernelOp op : {KernelOp::max, KernelOp::min}) {
    Kernel k;
    k.inputs = {OperandAccess::shared, OperandAccess::shared};
    k.store(k.binary(op, k.load(0), k.load(1)));
    const CompiledKernel compiled = backend.compile(k);
    std::vector<float> y(a.size());
    const KernelInput inputs[2] = {{a.data(), 0, nullptr}, {b.data(), 0, nullptr}};
    float* output = y.data();
    compiled({1, int64_t(a.size()), inputs, &output});
    for (size_t n = 0; n < a.size(); ++n) {
      const float want = op == KernelOp::max ? ir::max_of(a[n], b[n]) : ir::min_of(a[n], b[n]);
      if (std::isnan(a[n]) || std::isnan(b[n])) EXPECT_TRUE(std::isnan(y[n])) << kernel_op_name(op) << " at " << n;
      else EXPECT_EQ(y[n], want) << kernel_op_name(op) << " at " << n;
    }
  }
  EXPECT_EQ(ir::max_of(2.0f, -1.0f), 2.0f);
  EXPECT_EQ(ir::min_of(2.0f, -1.0f), -1.0f);
}

TEST(LlvmBackend, EmptyShapesWriteNothing) {
  LlvmBackend backend;
  const CompiledKernel compiled = backend.compile(lstm_kernel(false));
  std::mt19937 rng(3);
  Buffers b = make_buffers(lstm_kernel(false), 4, 8, rng);
  for (auto [members, elements] : {std::pair<int64_t, int64_t>{0, 8}, {4, 0}, {0, 0}}) {
    b.members = members;
    b.elements = elements;
    compiled(b.args());
    for (const auto& out : b.outputs) EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == kGuard; }));
  }
}

TEST(LlvmBackend, SameKernelSameSymbol) {
  LlvmBackend backend;
  const Kernel kernel = lstm_kernel(true);
  const CompiledKernel first = backend.compile(kernel);
  const CompiledKernel second = backend.compile(lstm_kernel(true));
  EXPECT_EQ(first.symbol(), second.symbol());
  EXPECT_EQ(first.function, second.function);
  EXPECT_EQ(backend.kernels(), 1u);
  EXPECT_EQ(first.key, kernel_key(describe(kernel), "llvm", host_cpu_name(), llvm_kernel_flags()));
  EXPECT_EQ(first.symbol(), "edb_kernel_" + first.key.hex());
  EXPECT_EQ(first.description, describe(kernel));
  LlvmBackend other;
  EXPECT_EQ(other.compile(kernel).symbol(), first.symbol());
  EXPECT_NE(backend.compile(lstm_kernel(false)).symbol(), first.symbol());
  EXPECT_EQ(backend.kernels(), 2u);
}

// The backend keeps at most max_kernels; an evicted kernel still runs for whoever holds it, and its
// code leaves the JIT when the last holder goes, so compiling it again links its symbol anew.
TEST(LlvmBackend, KeepsAtMostMaxKernels) {
  LlvmBackend backend({.keep_ir = false, .keep_assembly = false, .max_kernels = 2});
  const Kernel tanh_kernel = unary_kernel(KernelOp::tanh, OperandAccess::strided);
  std::optional<CompiledKernel> held = backend.compile(tanh_kernel);
  backend.compile(unary_kernel(KernelOp::exp, OperandAccess::gathered));  // dropped by the caller at once
  backend.compile(lstm_kernel(true));
  backend.compile(lstm_kernel(false));
  EXPECT_EQ(backend.kernels(), 2u);
  EXPECT_EQ(backend.sizes().evictions, 2);
  EXPECT_EQ(backend.sizes().max_kernels, 2u);
  std::mt19937 rng(11);
  Buffers b = make_buffers(tanh_kernel, 9, 33, rng);
  (*held)(b.args());
  const std::vector<std::vector<float>> got = b.outputs;
  b.reset_outputs();
  interpret(tanh_kernel, b.args());
  EXPECT_TRUE(near(got[0], b.outputs[0], 9 * 33, 1e-6));
  held.reset();
  expect_matches_interpreter(backend, tanh_kernel, 12);
  expect_matches_interpreter(backend, unary_kernel(KernelOp::exp, OperandAccess::gathered), 13);
  EXPECT_EQ(backend.kernels(), 2u);
}

// A kernel evicted while a caller still holds it keeps its symbol in the JIT: asked for again, the
// backend hands out that code (before, it linked the object again: a duplicate definition).
TEST(LlvmBackend, AKernelEvictedWhileHeldIsHandedOutAgain) {
  LlvmBackend backend({.keep_ir = false, .keep_assembly = false, .max_kernels = 1});
  const Kernel tanh_kernel = unary_kernel(KernelOp::tanh, OperandAccess::strided);
  const CompiledKernel held = backend.compile(tanh_kernel);
  backend.compile(unary_kernel(KernelOp::exp, OperandAccess::gathered));  // evicts tanh's, still held
  const CompiledKernel again = backend.compile(tanh_kernel);
  EXPECT_EQ(again.function, held.function);
  EXPECT_EQ(backend.kernels(), 1u);
  expect_matches_interpreter(backend, tanh_kernel, 14);
  expect_matches_interpreter(backend, unary_kernel(KernelOp::exp, OperandAccess::gathered), 15);
}

TEST(LlvmBackend, VectorisedWithoutLibmCalls) {
  LlvmBackend backend({.keep_ir = true, .keep_assembly = true});
  const CompiledKernel lstm = backend.compile(lstm_kernel(true));
  std::printf("LSTM cell kernel (5 inputs, 2 outputs) compiled in %.1f ms with IR and assembly\n", lstm.compile_ms);
  EXPECT_NE(lstm.ir.find("define void @" + lstm.symbol()), std::string::npos);
  EXPECT_NE(lstm.ir.find(" x float>"), std::string::npos) << "the element loop was not vectorised:\n" << lstm.ir;
  for (const char* libm : {"@tanhf", "@expf", "@exp(", "@tanh("})
    EXPECT_EQ(lstm.ir.find(libm), std::string::npos) << libm << " called:\n" << lstm.ir;
  EXPECT_NE(lstm.assembly.find(lstm.symbol()), std::string::npos);
  const CompiledKernel log = backend.compile(unary_kernel(KernelOp::log, OperandAccess::strided));
  EXPECT_NE(log.ir.find(" x float>"), std::string::npos) << "log was not vectorised:\n" << log.ir;
  for (const char* libm : {"@logf", "@log("}) EXPECT_EQ(log.ir.find(libm), std::string::npos) << libm << " called:\n" << log.ir;
  LlvmBackend quiet({.keep_ir = false});
  const CompiledKernel plain = quiet.compile(lstm_kernel(true));
  EXPECT_TRUE(plain.ir.empty());
  EXPECT_TRUE(plain.assembly.empty());
  std::printf("LSTM cell kernel compiled in %.1f ms without IR text\n", plain.compile_ms);
}

TEST(LlvmBackend, KernelOutlivesItsBackend) {
  CompiledKernel kernel;
  {
    LlvmBackend backend;
    kernel = backend.compile(unary_kernel(KernelOp::scale, OperandAccess::strided, 3.0f));
  }
  const float x[] = {1, 2, 3};
  float y[3] = {};
  const KernelInput input{x, 3, nullptr};
  float* output = y;
  kernel({1, 3, &input, &output});
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[2], 9.0f);
}

}  // namespace
}  // namespace edb::jit
