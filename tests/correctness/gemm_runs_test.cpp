// A GEMM whose X lies in a few long strided runs (the h of a few batches of cells, read by an
// output layer) is read in place run by run when W is small, and copied whole when W is large
// enough that packing it once per run costs more than the copy. Values equal the reference.
#include <gtest/gtest.h>

#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

struct GemmRun {
  std::vector<Tensor> values;
  Stats stats;
};

// 2 * half operands: the first half from a tanh batch, the rest from a sigmoid batch, with an
// unread batch between them, so the one affine over all of them reads X in two strided runs.
GemmRun run_affine(const char* executor, int rows, int half) {
  Model model("gemm_runs", 5);
  const Parameter w = model.add_parameter("W", rows, 3), b = model.add_parameter("b", rows, 1);
  EngineOptions options;
  options.executor = executor;
  options.policy = "depth";
  options.verify = true;
  Engine engine(options);
  auto record = [&](Trace& trace) {
    std::vector<Expr> outs;
    std::vector<Expr> xs;
    for (int i = 0; i < 2 * half; ++i) {
      const float v = 0.05f * float(i) - 1.0f;
      const Expr input = trace.input({v, 1.0f - v, v * v});
      xs.push_back(i < half ? tanh(input) : sigmoid(input));
      if (i < half) input * 2.0f;  // unread: a batch of the same depth that lies between the two
    }
    for (const Expr& x : xs) outs.push_back(affine({trace.param(b), trace.param(w), x}));
    return outs;
  };
  GemmRun run;
  Trace trace(engine);
  const std::vector<Expr> outs = record(trace);
  engine.reset_stats();
  trace.run();
  run.stats = engine.stats();
  for (const Expr& e : outs) run.values.push_back(e.value());
  return run;
}

TEST(GemmRuns, SmallWeightReadsRunsInPlaceLargeWeightCopies) {
  constexpr int kHalf = 40;
  for (int rows : {5, 96}) {
    const GemmRun reference = run_affine("reference", rows, kHalf);
    const GemmRun batched = run_affine("batched", rows, kHalf);
    ASSERT_EQ(batched.values.size(), reference.values.size());
    for (size_t i = 0; i < reference.values.size(); ++i)
      EXPECT_TRUE(testing::near_relative(batched.values[i], reference.values[i], 1e-6)) << rows << " rows, " << i;
    // Two runs: (2 - 1) * (rows + 32) <= 80 members for 5 rows, not for 96.
    const int64_t copied = rows == 5 ? 0 : int64_t(2 * kHalf) * 3 * 4;
    EXPECT_EQ(batched.stats.bytes_gathered, copied) << rows << " rows";
  }
}

}  // namespace
}  // namespace edb
