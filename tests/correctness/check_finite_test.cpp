// EngineOptions::check_finite: the first node (in execution order) whose values are NaN or
// infinite is a NumericError naming it, on every executor and with a background thread; without
// the option nothing is checked. Inside a cell call the message names the cell and the call.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

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

// Inside a cell call the message names the cell, which of its calls and which body node, and
// every message says how to map the node id to the recorded IR.
TEST(CheckFinite, TheMessageNamesTheCellAndCallAndHowToFindTheNode) {
  const Cell cell("logged", {{2, 1}}, [](Trace&, std::span<const Expr> in) {
    const Expr t = tanh(in[0]);
    const Expr l = log(in[0]);  // of a negative value: NaN
    return std::vector<Expr>{t + l};
  });
  for (bool cells : {true, false}) {
    EngineOptions options;
    options.executor = "reference";
    options.check_finite = true;
    options.cells = cells;
    Engine engine(options);
    Trace trace(engine);
    std::vector<Expr> outputs;
    for (float v : {1.0f, 2.0f, -3.0f}) outputs.push_back(cell(trace, {trace.input({0.5f, v})})[0]);
    std::string message = "(no error)";
    try {
      trace.run();
      outputs.back().value();
    } catch (const NumericError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("(log, 2x1, batch "), std::string::npos) << message;
    EXPECT_NE(message.find("produced nan at row 1, col 0"), std::string::npos) << message;
    EXPECT_NE(message.find("Trace::dump() or EDB_DUMP=ir prints the recorded IR"), std::string::npos) << message;
    const bool names_the_call = message.find(", call 3 of cell 'logged', its body node 2 of 3)") != std::string::npos;
    EXPECT_EQ(names_the_call, cells) << message;  // with cells off the body is recorded inline
    // The id the message names is, in the trace's dump, the log node (cells off) or the call node
    // whose body holds it (a call is one node).
    const size_t at = message.find("node %") + 6;
    const std::string id = message.substr(at, message.find(' ', at) - at);
    const std::string line = cells ? "%" + id + " = call(" : "%" + id + " = log(";
    const size_t found = trace.dump().find(line);
    ASSERT_NE(found, std::string::npos) << message << "\n" << trace.dump();
    if (cells) {
      EXPECT_NE(trace.dump().find("cell=logged", found), std::string::npos) << trace.dump();
    }
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
