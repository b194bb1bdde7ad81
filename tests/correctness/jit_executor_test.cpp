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
  // 64 floats a member: a batch of them is work the jit compiles (see SmallBatches... below).
  for (int i = 0; i < instances; ++i) {
    std::vector<float> x(64);
    for (size_t j = 0; j < x.size(); ++j) x[j] = 0.1f * float(i) - 0.03f * float(j) + (j % 3 == 0 ? 1.5f : -0.2f);
    xs.push_back(trace.input(x));
  }
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

// A trace's loss terms summed in groups of a few are batches of a handful of floats that come
// next to ever new neighbours from one trace to the next. The jit runs such a batch as a kernel of
// its own, never fused, so once every op and arity has been seen no trace asks for a new kernel
// (a fused kernel is keyed by its whole run of batches); the values are the reference's.
TEST(JitExecutor, SmallBatchesRunAloneSoTheirKernelsStopGrowing) {
  EngineOptions options;
  options.executor = "jit";
  options.verify = true;
  Engine jit(options);
  options.executor = "reference";
  Engine reference(options);
  // Kernels this engine needed: each one it did not have was compiled or found compiled.
  auto asked = [&] { return jit.stats().kernels_compiled + jit.stats().cache_hits; };
  auto run = [&](const std::vector<int>& arities, const std::string& what) {
    float values[2] = {0, 0};
    for (Engine* engine : {&jit, &reference}) {
      Trace trace(*engine);
      std::vector<Expr> groups;
      for (size_t g = 0; g < arities.size(); ++g) {
        std::vector<Expr> terms;
        for (int t = 0; t < arities[g]; ++t) terms.push_back(tanh(trace.input({0.1f * float(t) - 0.05f * float(g), 0.2f})));
        groups.push_back(sum(terms));
      }
      const Expr total = sum_elements(sum(groups) * 0.5f);
      trace.run();
      values[engine == &jit ? 0 : 1] = total.value().scalar();
    }
    EXPECT_NEAR(values[0], values[1], 1e-5f * std::max(1.0f, std::abs(values[1]))) << what;
  };
  run({2, 3, 4, 5, 6, 7, 8}, "every arity");
  const int64_t after_first = asked();
  EXPECT_GT(after_first, 0);
  for (const std::vector<int>& arities : std::vector<std::vector<int>>{{3, 5, 8}, {2, 7, 4, 6}, {8, 2}, {6, 3, 7}, {4, 8, 5, 2}})
    run(arities, "a later trace");
  EXPECT_EQ(asked(), after_first) << "a later trace asked for new kernels";
}

}  // namespace
}  // namespace edb
