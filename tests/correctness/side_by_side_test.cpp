// Independent batches side by side (runtime/side_by_side.h): with two and three threads, every
// sample model's losses and gradients under batched and jit are those computed with every batch
// run alone (up to rounding), the same bits from run to run, windows taken at any balance so that
// every independent run is one; and a program of two independent branches runs them side by side
// and equals the reference.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "runtime/batched.h"
#include "runtime/side_by_side.h"
#include "samples/models.h"
#include "tests/support/rng.h"
#include "tests/support/sample_gradients.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

// Sets the executors' switches for a scope.
struct SideBySideSwitches {
  SideBySideSwitches(bool on, bool any_balance) {
    runtime::BatchedExecutor::side_by_side_override.store(on ? 1 : 0);
    runtime::SideBySide::any_balance.store(any_balance);
    runtime::SideBySide::verify_windows.store(true);
  }
  ~SideBySideSwitches() {
    runtime::BatchedExecutor::side_by_side_override.store(-1);
    runtime::SideBySide::any_balance.store(false);
    runtime::SideBySide::verify_windows.store(false);
  }
};

struct Evaluation {
  std::vector<float> values;  // the loss, then every gradient
  int64_t side_by_side = 0;   // batches run side by side
};

// The summed loss of 24 instances and its gradients, as one flat vector.
Evaluation loss_and_gradients(samples::SampleModel& sample, const std::string& executor, int threads) {
  Engine engine(testing::checked_options(executor, threads));
  const Gradients gradients = testing::summed_loss_gradients(engine, sample, 24);
  Evaluation run;
  run.values.push_back(gradients.loss);
  for (const Gradients::Dense& d : gradients.parameters)
    run.values.insert(run.values.end(), d.gradient.data.begin(), d.gradient.data.end());
  run.side_by_side = engine.stats().side_by_side_batches;
  return run;
}

::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " values against " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "value " << i << " of " << a.size() << ": " << a[i] << " against " << b[i];
  return ::testing::AssertionSuccess();
}

TEST(SideBySide, EverySampleModelComputesWhatBatchesAloneCompute) {
  samples::ModelConfig config;
  config.limit = 24;
  config.embed = 16;
  config.hidden = 20;
  config.seed = 9;
  int64_t side_by_side = 0;
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    const std::unique_ptr<samples::SampleModel> sample = entry.make(config);
    for (const char* executor : {"batched", "jit"})
      for (int threads : {2, 3}) {
        SCOPED_TRACE(std::string(executor) + ", " + std::to_string(threads) + " threads");
        Evaluation alone, beside, again;
        {
          SideBySideSwitches off(false, false);
          alone = loss_and_gradients(*sample, executor, threads);
        }
        {
          SideBySideSwitches on(true, true);
          beside = loss_and_gradients(*sample, executor, threads);
          again = loss_and_gradients(*sample, executor, threads);
        }
        EXPECT_EQ(alone.side_by_side, 0);
        // A batch run whole may round apart from one cut across threads (an Eigen reduction groups
        // its sums by where a piece starts), so against alone: near; run to run: the same bits.
        ASSERT_EQ(alone.values.size(), beside.values.size());
        for (size_t i = 0; i < alone.values.size(); ++i)
          ASSERT_TRUE(testing::near_relative(beside.values[i], alone.values[i], 1e-4)) << "value " << i;
        EXPECT_TRUE(same_bits(beside.values, again.values));
        side_by_side += beside.side_by_side;
      }
  }
  EXPECT_GT(side_by_side, 0) << "no sample model ran a batch side by side";
}

// Two branches of different ops over one input, joined at the end: each branch's batches are
// independent of the other's, so they run side by side (with two threads), and equal the reference.
TEST(SideBySide, IndependentBranchesRunSideBySide) {
  testing::Rng rng(17);
  Model model("branches", 17);
  // 96 x 64 products over 40 inputs: 491,520 flops a batch, two a window worth its hand-offs
  // (SideBySide::kMinWindowFlops).
  const Parameter w1 = model.add_parameter("w1", 96, 64), w2 = model.add_parameter("w2", 96, 64);
  const Parameter v1 = model.add_parameter("v1", 8, 96), v2 = model.add_parameter("v2", 8, 96);
  std::vector<std::vector<float>> inputs(40, std::vector<float>(64));
  for (auto& x : inputs)
    for (float& v : x) v = float(2 * rng.unit() - 1);
  auto run = [&](const std::string& executor, int threads) {
    Engine engine(testing::checked_options(executor, threads));
    Trace trace(engine);
    std::vector<Expr> outs;
    for (const auto& x : inputs) {
      const Expr in = trace.input(x);
      const Expr a = matmul(trace.param(v1), tanh(matmul(trace.param(w1), in)));
      const Expr b = matmul(trace.param(v2), sigmoid(matmul(trace.param(w2), in)));
      outs.push_back(sum_elements(cmult(a, b)));
    }
    const Gradients gradients = trace.backward(sum(outs));
    std::vector<float> values;
    for (const Expr& o : outs) values.push_back(o.scalar());
    for (const Gradients::Dense& d : gradients.parameters)
      values.insert(values.end(), d.gradient.data.begin(), d.gradient.data.end());
    return std::make_pair(values, engine.stats().side_by_side_batches);
  };
  const SideBySideSwitches on(true, false);  // as a user runs it, windows verified
  const auto reference = run("reference", 1);
  for (const char* executor : {"batched", "jit"}) {
    const auto [values, side_by_side] = run(executor, 2);
    EXPECT_GE(side_by_side, 2) << executor << ": the branches' products ran one after another";
    ASSERT_EQ(values.size(), reference.first.size());
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_TRUE(testing::near_relative(values[i], reference.first[i], 1e-4)) << executor << ", value " << i;
  }
}

}  // namespace
}  // namespace edb
