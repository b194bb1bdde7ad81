// EngineOptions::check_finite: the first node (in execution order) whose values are NaN or
// infinite is a NumericError naming it, on every executor and with a background thread; without
// the option nothing is checked.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include <edbatch/edbatch.h>

namespace edb {
namespace {

std::string numeric_error(const char* executor, int threads, bool overflow_from_finite) {
  Model model("finite", 3);
  const Parameter w = model.add_parameter("W", 2, 2);
  EngineOptions options;
  options.executor = executor;
  options.threads = threads;
  options.check_finite = true;
  Engine engine(options);
  Trace trace(engine);
  const float inf = std::numeric_limits<float>::infinity();
  Expr x = tanh(matmul(trace.param(w), trace.input({0.5f, -0.25f})));
  if (overflow_from_finite) {
    x = (x * 1e30f) * 1e30f;  // the second scale overflows
  } else {
    const Expr bad = trace.input({1.0f, inf});
    x = x + (bad - bad);  // inf - inf is NaN, from an input that already held inf
  }
  const Expr y = sigmoid(x);
  try {
    y.value();
  } catch (const NumericError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckFinite, TheFirstNodeToProduceANonFiniteValueIsNamed) {
  for (const char* executor : {"reference", "batched", "jit"})
    for (int threads : {1, 2}) {
      if (threads == 2 && std::string(executor) == "reference") continue;  // one thread only
      const std::string overflow = numeric_error(executor, threads, true);
      EXPECT_NE(overflow.find("(scale, 2x1"), std::string::npos) << executor << ": " << overflow;
      EXPECT_NE(overflow.find("inf at row"), std::string::npos) << overflow;
      EXPECT_NE(overflow.find("its arguments were finite"), std::string::npos) << overflow;
      const std::string from_input = numeric_error(executor, threads, false);
      EXPECT_NE(from_input.find("(sub, 2x1"), std::string::npos) << executor << ": " << from_input;
      EXPECT_NE(from_input.find("produced nan at row 1, col 0"), std::string::npos) << from_input;
      EXPECT_NE(from_input.find("already held inf at row 1, col 0"), std::string::npos) << from_input;
    }
}

TEST(CheckFinite, OffByDefault) {
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input({1e30f}) * 1e30f;
  EXPECT_EQ(x.value().scalar(), std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace edb
