// Batched equals unbatched: every policy x executor (x threads) against the reference executor with
// the sequential policy, on every sample model and on 300 seeded random DAGs. verify is always on,
// so the IR, schedule and plan are checked between stages on every evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/executor.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "scheduler/schedule.h"
#include "tests/support/random_graph.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

struct Config {
  std::string policy, executor;
  int threads = 1;
};

std::vector<Config> all_configs() {
  std::vector<Config> configs;
  for (const std::string& policy : scheduler::policy_names())
    for (const std::string& executor : runtime::executor_names()) {
      configs.push_back({policy, executor, 1});
      if (executor == "batched") configs.push_back({policy, executor, 2});
    }
  return configs;
}

std::string config_name(const Config& c) {
  return c.policy + "_" + c.executor + "_threads" + std::to_string(c.threads);
}

void PrintTo(const Config& c, std::ostream* out) { *out << config_name(c); }

EngineOptions options_of(const Config& c) {
  EngineOptions options;
  options.policy = c.policy;
  options.executor = c.executor;
  options.threads = c.threads;
  options.verify = true;
  return options;
}

EngineOptions reference_options() { return options_of({"sequential", "reference", 1}); }

// Counters that do not depend on the policy or executor must agree exactly; batches must be
// one per node for sequential and fewer (but never under the lower bound) for the others. The
// lower bound is the trace's, whichever policy schedules it and whether the executor copies cell
// bodies or records calls as single nodes (the jit's, trace/cell.cpp).
void expect_counters(const Stats& actual, const Stats& expected, const std::string& policy,
                     const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(actual.nodes, expected.nodes);
  EXPECT_EQ(actual.flops, expected.flops);
  EXPECT_EQ(actual.lower_bound, expected.lower_bound);
  EXPECT_EQ(expected.batches, expected.nodes);  // the reference runs sequentially
  EXPECT_GE(actual.batches, actual.lower_bound);
  if (policy == "sequential") EXPECT_EQ(actual.batches, actual.nodes);
  else EXPECT_LT(actual.batches, actual.nodes);
}

// ---- sample models ----

constexpr int kInstances = 6;
constexpr int kTraceBatch = 3;

struct ModelRun {
  std::vector<double> losses;  // per instance, recorded kTraceBatch to a trace
  Stats trace_stats;
  samples::RunResult inference;
};

ModelRun run_model(samples::SampleModel& sample, const EngineOptions& options) {
  Engine engine(options);
  ModelRun run;
  for (size_t first = 0; first < sample.instance_count(); first += kTraceBatch) {
    Trace trace(engine);
    std::vector<Expr> losses;
    for (size_t i = first; i < std::min(sample.instance_count(), first + kTraceBatch); ++i)
      losses.push_back(sample.record_loss(trace, i));
    trace.run();
    for (const Expr& e : losses) run.losses.push_back(e.scalar());
  }
  run.trace_stats = engine.stats();
  samples::RunOptions inference;
  inference.batch = 4;  // uneven: 4 + 2
  inference.repeat = 1;
  run.inference = samples::run_inference(sample, engine, inference);
  return run;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const samples::ModelEntry& entry : samples::model_registry()) names.push_back(entry.name);
  return names;
}

class SampleModelEquality : public ::testing::TestWithParam<std::tuple<std::string, Config>> {};

TEST_P(SampleModelEquality, LossesEqualReference) {
  const auto& [model_name, config] = GetParam();
  const samples::ModelEntry* entry = samples::find_model(model_name);
  ASSERT_NE(entry, nullptr);
  samples::ModelConfig model_config;
  model_config.limit = kInstances;
  model_config.embed = 12;
  model_config.hidden = 10;
  model_config.seed = 5;
  auto sample = entry->make(model_config);
  ASSERT_EQ(sample->instance_count(), size_t(kInstances));

  const ModelRun expected = run_model(*sample, reference_options());
  const ModelRun actual = run_model(*sample, options_of(config));
  ASSERT_EQ(actual.losses.size(), size_t(kInstances));
  ASSERT_EQ(expected.losses.size(), size_t(kInstances));
  for (int i = 0; i < kInstances; ++i)
    EXPECT_TRUE(testing::near_relative(actual.losses[i], expected.losses[i], 1e-5)) << "instance " << i;
  EXPECT_TRUE(testing::near_relative(actual.inference.loss, expected.inference.loss, 1e-5));
  EXPECT_EQ(actual.inference.instances, kInstances);
  expect_counters(actual.trace_stats, expected.trace_stats, config.policy, "per-instance traces");
  expect_counters(actual.inference.stats, expected.inference.stats, config.policy, "run_inference");
}

INSTANTIATE_TEST_SUITE_P(
    AllModelsPoliciesExecutors, SampleModelEquality,
    ::testing::Combine(::testing::ValuesIn(model_names()), ::testing::ValuesIn(all_configs())),
    [](const ::testing::TestParamInfo<SampleModelEquality::ParamType>& info) {
      return std::get<0>(info.param) + "_" + config_name(std::get<1>(info.param));
    });

// ---- random DAGs ----

constexpr uint64_t kSeeds = 300;

class RandomDagEquality : public ::testing::TestWithParam<Config> {};

TEST_P(RandomDagEquality, EveryComparedNodeEqualsReference) {
  const Config& config = GetParam();
  const testing::RandomGraphModel model;
  Engine reference(reference_options());
  Engine engine(options_of(config));
  int64_t compared = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    Trace expected_trace(reference);
    const testing::RandomGraph expected = testing::record_random_graph(expected_trace, model, seed);
    expected_trace.run();
    Trace trace(engine);
    const testing::RandomGraph actual = testing::record_random_graph(trace, model, seed);
    trace.run();
    ASSERT_EQ(actual.compared.size(), expected.compared.size()) << "seed " << seed;
    for (size_t i = 0; i < actual.compared.size(); ++i) {
      ASSERT_EQ(actual.compared[i].node_id(), expected.compared[i].node_id()) << "seed " << seed;
      EXPECT_TRUE(testing::near_relative(actual.compared[i].value(), expected.compared[i].value(), 1e-5))
          << "seed " << seed << ", node %" << actual.compared[i].node_id() << " (" << actual.ops[i] << ")";
    }
    compared += int64_t(actual.compared.size());
    ASSERT_FALSE(HasFailure()) << "stopping at the first seed that differs: " << seed << "\n"
                               << trace.dump();
  }
  EXPECT_GT(compared, int64_t(kSeeds) * 30);
  expect_counters(engine.stats(), reference.stats(), config.policy, "all seeds");
}

INSTANTIATE_TEST_SUITE_P(AllPoliciesExecutors, RandomDagEquality, ::testing::ValuesIn(all_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return config_name(info.param); });

// ---- the generator itself ----

TEST(RandomDag, SameSeedRecordsTheSameGraph) {
  const testing::RandomGraphModel model;
  Engine engine(reference_options());
  Trace a(engine), b(engine), c(engine);
  const testing::RandomGraph first = testing::record_random_graph(a, model, 42);
  const testing::RandomGraph again = testing::record_random_graph(b, model, 42);
  testing::record_random_graph(c, model, 43);
  EXPECT_EQ(a.dump(), b.dump());
  EXPECT_NE(a.dump(), c.dump());
  EXPECT_EQ(first.op_nodes, again.op_nodes);
  EXPECT_EQ(first.ops, again.ops);
  // The same input values too: every node evaluates to the same numbers.
  for (size_t i = 0; i < first.compared.size(); ++i)
    EXPECT_TRUE(testing::near_relative(first.compared[i].value(), again.compared[i].value(), 0.0)) << first.ops[i];
}

TEST(RandomDag, SeedsCoverEveryOpSinksAndFanOut) {
  const testing::RandomGraphModel model;
  Engine engine(reference_options());
  std::set<std::string> ops;
  int64_t op_nodes = 0, sinks = 0, instances = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    Trace trace(engine);
    const testing::RandomGraph graph = testing::record_random_graph(trace, model, seed);
    ASSERT_EQ(graph.compared.size(), size_t(graph.op_nodes));  // compare_every = 1: every op node
    ASSERT_GE(graph.instances, 4);
    ASSERT_LE(graph.instances, 8);
    ops.insert(graph.ops.begin(), graph.ops.end());
    op_nodes += graph.op_nodes;
    sinks += graph.sinks;
    instances += graph.instances;
  }
  const std::set<std::string> every = {"affine", "matmul", "matvec", "add", "sub", "cmult", "scale",
                                       "add_const", "tanh", "sigmoid", "relu", "sum", "concat", "slice",
                                       "softmax", "log_softmax", "pick_neg_log_softmax", "lookup", "reshape",
                                       "exp", "log", "div", "max", "min", "sum_elements", "mean_elements",
                                       "transpose", "sqrt", "abs", "square", "cube", "softsign", "silu",
                                       "elu", "selu", "log_sigmoid", "erf", "sin", "cos", "sinh", "cosh", "round",
                                       "ceil", "floor", "tan", "asinh", "acosh", "atanh", "asin", "acos", "atan", "pow",
                                       "logsumexp", "logsumexp_dim", "sum_dim", "mean_dim", "std_dim", "average",
                                       "dot_product", "squared_norm", "l2_norm", "squared_distance", "l1_distance",
                                       "huber_distance", "hinge", "binary_log_loss", "pairwise_rank_loss",
                                       "poisson_loss", "select_rows", "select_cols", "pick", "layer_norm",
                                       "weight_norm", "argmax", "kmax_pooling", "conv1d_narrow", "conv1d_wide",
                                       "maxpool1d", "add, broadcast", "sub, broadcast", "cmult, broadcast",
                                       "div, broadcast", "concat_cols", "scale_gradient"};
  EXPECT_EQ(ops, every);
  EXPECT_GE(op_nodes, instances * 10);
  EXPECT_LE(op_nodes, instances * 22);
  // Fan-out: fewer sinks than nodes means nodes are reused; fan-in comes with every binary op.
  EXPECT_GT(sinks, 0);
  EXPECT_LT(sinks * 2, op_nodes);
  // compare_every = 4 keeps every sink and every fourth op node.
  Trace trace(engine);
  testing::RandomGraphOptions sparse;
  sparse.compare_every = 4;
  const testing::RandomGraph graph = testing::record_random_graph(trace, model, 9, sparse);
  EXPECT_LT(graph.compared.size(), size_t(graph.op_nodes));
  EXPECT_GE(graph.compared.size(), size_t(graph.sinks));
}

}  // namespace
}  // namespace edb
