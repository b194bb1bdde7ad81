// What Engine::stats() counts (include/edbatch/stats.h): nodes, batches and the lower bound
// describe the schedule and are the same whichever executor runs it; kernel_calls say what the
// executor did (the reference: one per node it computed); with cells on a call counts as its
// body's nodes and batches, and the learned policy decides over calls.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

// Per instance: h = W x + b, then tanh(h[0:2]) + sigmoid(h[2:4]). The slices of h are views (they
// compute nothing); the rest are 4 computed nodes per instance.
Stats run_gates(const EngineOptions& options, int instances) {
  Model model("gates", 5);
  const Parameter W = model.add_parameter("W", 4, 3), b = model.add_parameter("b", 4, 1);
  EngineOptions checked = options;
  checked.verify = true;
  Engine engine(checked);
  Trace trace(engine);
  std::vector<Expr> outputs;
  for (int i = 0; i < instances; ++i) {
    const Expr h = affine({trace.param(b), trace.param(W), trace.input({float(i), 1.0f, -0.5f})});
    outputs.push_back(tanh(slice(h, 0, 2)) + sigmoid(slice(h, 2, 4)));
  }
  trace.run();
  for (const Expr& e : outputs) e.value();
  return engine.stats();
}

TEST(Stats, TheScheduleIsCountedTheSameWhicheverExecutorRunsIt) {
  testing::TempDir cache;
  EngineOptions reference;
  reference.executor = "reference";
  const Stats expected = run_gates(reference, 8);
  EXPECT_EQ(expected.nodes, 8 * 6);         // affine, two slices, tanh, sigmoid, add
  EXPECT_EQ(expected.batches, 6);           // greedy: one batch per type
  EXPECT_EQ(expected.kernel_calls, 8 * 4);  // node by node, and the 16 slice views compute nothing
  for (const char* executor : {"batched", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.cache_directory = cache.path();
    const Stats actual = run_gates(options, 8);
    EXPECT_EQ(actual.nodes, expected.nodes) << executor;
    EXPECT_EQ(actual.batches, expected.batches) << executor;
    EXPECT_EQ(actual.lower_bound, expected.lower_bound) << executor;
    EXPECT_EQ(actual.flops, expected.flops) << executor;
    EXPECT_LT(actual.kernel_calls, expected.kernel_calls) << executor;
  }
}

// out = tanh(x) + sigmoid(x) * y: 4 nodes of 4 types, so 4 internal batches (cells_test.cpp).
Cell mix_cell() {
  return Cell("mix", {{3, 1}, {3, 1}}, [](Trace&, std::span<const Expr> in) {
    return std::vector<Expr>{tanh(in[0]) + cmult(sigmoid(in[0]), in[1])};
  });
}

Stats run_calls(EngineOptions options, int calls) {
  options.verify = true;
  Engine engine(options);
  Trace trace(engine);
  const Cell cell = mix_cell();
  std::vector<Expr> outputs;
  for (int k = 0; k < calls; ++k)
    outputs.push_back(cell(trace, {trace.input({float(k), 1.0f, -1.0f}), trace.input({0.5f, float(k), 2.0f})})[0]);
  trace.run();
  for (const Expr& e : outputs) e.value();
  return engine.stats();
}

TEST(Stats, WithCellsACallCountsAsItsBodysNodesAndBatches) {
  testing::TempDir cache;
  for (const char* executor : {"reference", "batched", "jit"})
    for (bool cells : {true, false}) {
      EngineOptions options;
      options.executor = executor;
      options.cells = cells;
      options.cache_directory = cache.path();
      const Stats s = run_calls(options, 6);
      const std::string where = std::string(executor) + (cells ? " cells on" : " cells off");
      EXPECT_EQ(s.nodes, 6 * 4) << where;  // every call's four body nodes
      EXPECT_EQ(s.batches, 4) << where;    // the cell's own batches over all six calls
      EXPECT_EQ(s.lower_bound, 4) << where;
      if (std::string(executor) == "reference") {
        EXPECT_EQ(s.kernel_calls, 6 * 4) << where;
      }
      if (std::string(executor) == "jit" && cells) {
        EXPECT_EQ(s.kernel_calls, 1) << where;  // one compiled cell kernel
      }
    }
}

// Two chains of three calls, of two cells of two internal batches each (tanh, then sigmoid).
// The learned policy sees the calls, one node each: it decides only where it has a choice (both
// cells ready), at most once per batch of calls, while batches counts the cells' own batches.
TEST(Stats, TheLearnedPolicyDecidesOverCallsNotOverTheCellsBatches) {
  auto body = [](Trace&, std::span<const Expr> in) { return std::vector<Expr>{sigmoid(tanh(in[0]))}; };
  const Cell first("first", {{3, 1}}, body), second("second", {{3, 1}}, body);
  EngineOptions options;
  options.policy = "fsm";  // no table: every decision falls back to greedy, and is counted
  options.verify = true;
  Engine engine(options);
  Trace trace(engine);
  Expr a = trace.input({1.0f, 2.0f, 3.0f}), b = trace.input({-1.0f, 0.5f, 0.25f});
  for (int k = 0; k < 3; ++k) {
    a = first(trace, {a})[0];
    b = second(trace, {b})[0];
  }
  a.value();
  b.value();
  const Stats& s = engine.stats();
  EXPECT_EQ(s.nodes, 12);
  EXPECT_EQ(s.batches, 12);  // six batches of one call, two internal batches each
  EXPECT_GE(s.policy_decisions, 1);
  EXPECT_LE(s.policy_decisions, 6);
  EXPECT_EQ(s.policy_unseen, s.policy_decisions);
}

// The policy-training reports count the lower bound as Stats does at run time (each call weighted
// by its cell's batches), so it compares with their batch counts: the same traces run with greedy
// report the same bound, under the jit (compiled calls) and batched (calls run by expansion).
TEST(Stats, PolicyTrainingCountsTheLowerBoundAsARunDoes) {
  auto body = [](Trace&, std::span<const Expr> in) { return std::vector<Expr>{sigmoid(tanh(in[0])) + in[0]}; };
  const Cell first("first", {{3, 1}}, body), second("second", {{3, 1}}, body);
  auto record = [&](Trace& trace, int t) {
    std::vector<Expr> outputs;
    for (int i = 0; i < 3 + t; ++i) {
      Expr a = trace.input({float(i), 2.0f, 3.0f}), b = trace.input({-1.0f, 0.5f, float(t)});
      for (int k = 0; k < 2 + (i + t) % 3; ++k) {
        a = first(trace, {a})[0];
        b = second(trace, {k % 2 ? a : b})[0];
      }
      outputs.push_back(a + b);
    }
    return outputs;
  };
  testing::TempDir cache;
  for (const char* policy : {"fsm", "learned"})
    for (const char* executor : {"jit", "batched"}) {
      const std::string where = std::string(policy) + "/" + executor;
      EngineOptions options;
      options.policy = policy;
      options.executor = executor;
      options.cache_directory = cache.path();
      options.search_budget_ms = 20;
      Engine learner(options);
      std::vector<std::unique_ptr<Trace>> traces;
      std::vector<Trace*> pointers;
      for (int t = 0; t < 4; ++t) {
        traces.push_back(std::make_unique<Trace>(learner));
        record(*traces.back(), t);
        pointers.push_back(traces.back().get());
      }
      PolicyTraining training;
      training.episodes = 50;
      training.search_budget_ms = 20;
      const PolicyProgress report = learner.train_policy(pointers, training);

      EngineOptions greedy = options;
      greedy.policy = "greedy";
      int64_t bound = 0;  // each trace on an engine of its own, as train_policy takes them
      for (int t = 0; t < 4; ++t) {
        Engine one(greedy);
        Trace trace(one);
        for (const Expr& e : record(trace, t)) e.value();
        bound += one.stats().lower_bound;
      }
      const int64_t trained_bound = report.lower_bound + report.heldout_lower_bound;  // fitted and held out
      EXPECT_EQ(trained_bound, bound) << where;
      EXPECT_LE(report.lower_bound, report.best_batches) << where;
      EXPECT_LE(report.lower_bound, report.greedy_batches) << where;
    }
}

// Every sample model, cells on: the jit records calls as single nodes, batched and reference copy
// their bodies; the schedule is the same, so are nodes, batches and the lower bound.
TEST(Stats, EverySampleModelHasOneLowerBoundUnderEveryExecutor) {
  testing::TempDir cache;
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    samples::ModelConfig config;
    config.limit = 12;
    config.embed = 6;
    config.hidden = 5;
    config.seed = 5;
    const auto model = entry.make(config);
    for (const char* policy : {"greedy", "agenda", "depth"}) {
      std::vector<Stats> runs;
      for (const char* executor : {"reference", "batched", "jit"}) {
        EngineOptions options;
        options.executor = executor;
        options.policy = policy;
        options.cache_directory = cache.path();
        options.verify = true;
        Engine engine(options);
        Trace trace(engine);
        std::vector<Expr> losses;
        for (size_t i = 0; i < model->instance_count(); ++i) losses.push_back(model->record_loss(trace, i));
        sum(losses).scalar();
        runs.push_back(engine.stats());
      }
      for (size_t r = 1; r < runs.size(); ++r) {
        const std::string where = entry.name + " " + policy + (r == 1 ? " batched" : " jit");
        EXPECT_EQ(runs[r].lower_bound, runs[0].lower_bound) << where;
        EXPECT_EQ(runs[r].batches, runs[0].batches) << where;
        EXPECT_EQ(runs[r].nodes, runs[0].nodes) << where;
        EXPECT_LE(runs[r].lower_bound, runs[r].batches) << where;
      }
    }
  }
}

}  // namespace
}  // namespace edb
