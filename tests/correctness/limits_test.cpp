// Big traces: a million nodes (ten million with EDB_LONG_TESTS=1) record, batch and run to the
// right value; EngineOptions::max_trace_nodes stops recording with a UsageError, for nodes and
// for cell calls alike, and the trace still evaluates what it holds; a negative one is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

TEST(Limits, AMillionNodeTraceRuns) {
  const bool long_mode = std::getenv("EDB_LONG_TESTS") != nullptr;
  const int chains = 1000, length = long_mode ? 10000 : 1000;  // 1M or 10M tanh nodes
  Engine engine(testing::checked_options("jit"));
  Trace trace(engine);
  std::vector<Expr> xs;
  std::vector<float> expected;
  for (int c = 0; c < chains; ++c) {
    const float v = 0.001f * float(c);
    xs.push_back(trace.input({v}));
    float e = v;
    for (int i = 0; i < length; ++i) e = std::tanh(e);
    expected.push_back(e);
  }
  for (int i = 0; i < length; ++i)
    for (Expr& x : xs) x = tanh(x);
  trace.run();
  EXPECT_EQ(engine.stats().batches, length);  // one batch per step of every chain
  EXPECT_EQ(engine.stats().nodes, int64_t(chains) * length);
  for (int c = 0; c < chains; c += 97) EXPECT_NEAR(xs[size_t(c)].value().scalar(), expected[size_t(c)], 1e-5) << c;
}

TEST(Limits, MaxTraceNodesIsAUsageErrorAndTheTraceStillRuns) {
  EngineOptions options = testing::checked_options("jit");
  options.max_trace_nodes = 10;
  Engine engine(options);
  Trace trace(engine);
  Expr x = trace.input({0.5f});
  for (int i = 0; i < 9; ++i) x = tanh(x);  // 10 nodes: full
  const std::string message = testing::usage_error([&] { tanh(x); });
  EXPECT_NE(message.find("max_trace_nodes"), std::string::npos) << message;
  EXPECT_NE(message.find("10 nodes"), std::string::npos) << message;
  float e = 0.5f;
  for (int i = 0; i < 9; ++i) e = std::tanh(e);
  EXPECT_NEAR(x.value().scalar(), e, 1e-6);

  const Cell cell("twice", {{1, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(tanh(in[0]))};
  });
  Trace calls(engine);
  Expr y = calls.input({0.25f});
  for (int i = 0; i < 4; ++i) y = cell(calls, {y})[0];  // 1 + 4 * 2 = 9 nodes
  const std::string cell_message = testing::usage_error([&] { cell(calls, {y}); });
  EXPECT_NE(cell_message.find("max_trace_nodes"), std::string::npos) << cell_message;
}

// A negative limit is refused when the engine is made (it meant "no limit", as 0 does).
TEST(Limits, ANegativeMaxTraceNodesIsAUsageError) {
  EngineOptions options;
  options.max_trace_nodes = -5;
  EXPECT_EQ(testing::usage_error([&] { Engine engine(options); }),
            "edb::Engine: max_trace_nodes must be 0 (no limit but the IR's) or more, got -5");
}

}  // namespace
}  // namespace edb
