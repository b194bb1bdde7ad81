// The jit executor: consecutive elementwise batches fuse into one kernel call where each member
// reads only its own member's values, and the results equal the reference executor's whether or
// not they fused.
#include <gtest/gtest.h>

#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

struct ChainRun {
  std::vector<Tensor> values;
  Stats stats;
};

// `instances` chains x -> tanh -> sigmoid -> (x' * 0.5 + 1) -> relu; with `crossed`, the sigmoid
// is replaced by tanh_i * tanh_(i+1), so member k of that batch reads member k + 1's tanh.
ChainRun run_chains(const std::string& executor, int instances, bool crossed) {
  EngineOptions options;
  options.executor = executor;
  options.verify = true;
  Engine engine(options);
  Trace trace(engine);
  std::vector<Expr> xs, ts, outs;
  for (int i = 0; i < instances; ++i) xs.push_back(trace.input({0.1f * float(i), -0.2f * float(i), 0.3f, 1.5f}));
  for (int i = 0; i < instances; ++i) ts.push_back(tanh(xs[size_t(i)]));
  for (int i = 0; i < instances; ++i) {
    const Expr s = crossed ? cmult(ts[size_t(i)], ts[size_t((i + 1) % instances)]) : sigmoid(ts[size_t(i)]);
    outs.push_back(relu(s * 0.5f + 1.0f));
  }
  trace.run();
  ChainRun run;
  for (const Expr& e : outs) run.values.push_back(e.value());
  run.stats = engine.stats();
  return run;
}

TEST(JitExecutor, FusesAlignedChainsIntoOneKernelCall) {
  const ChainRun reference = run_chains("reference", 6, false);
  const ChainRun batched = run_chains("batched", 6, false);
  const ChainRun jit = run_chains("jit", 6, false);
  EXPECT_EQ(batched.stats.batches, 5);       // tanh, sigmoid, scale, add_const, relu
  EXPECT_EQ(batched.stats.kernel_calls, 5);
  EXPECT_EQ(jit.stats.batches, 5);
  EXPECT_EQ(jit.stats.kernel_calls, 1);      // all five in one pass over the members
  ASSERT_EQ(jit.values.size(), reference.values.size());
  for (size_t i = 0; i < jit.values.size(); ++i)
    EXPECT_TRUE(testing::near_relative(jit.values[i], reference.values[i], 1e-6)) << i;
}

TEST(JitExecutor, DoesNotFuseWhereAMemberReadsAnothersValue) {
  const ChainRun reference = run_chains("reference", 6, true);
  const ChainRun jit = run_chains("jit", 6, true);
  EXPECT_EQ(jit.stats.batches, 5);
  EXPECT_EQ(jit.stats.kernel_calls, 2);  // tanh alone, then cmult .. relu fused
  for (size_t i = 0; i < jit.values.size(); ++i)
    EXPECT_TRUE(testing::near_relative(jit.values[i], reference.values[i], 1e-6)) << i;
}

}  // namespace
}  // namespace edb
