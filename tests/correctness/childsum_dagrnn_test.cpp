// The childsum and dagrnn samples: the batched and jit executors under greedy, search and learned
// scheduling, cells on and off, give the reference executor's loss, and so does a trained learned
// table, in fewer batches than greedy; the DAG-RNN's loss also equals a direct Eigen computation
// from the model's parameters; both are registered.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"
#include "tests/support/tree_reference.h"

namespace edb {
namespace {

using Eigen::MatrixXf;
using Eigen::VectorXf;

std::unique_ptr<samples::SampleModel> make(const std::string& name) {
  samples::ModelConfig config;
  config.limit = 24;
  config.embed = 6;
  config.hidden = 5;
  config.seed = 3;
  return samples::find_model(name)->make(config);
}

// Summed loss of every instance, `batch` per trace.
double summed_loss(samples::SampleModel& model, const EngineOptions& options, int batch) {
  Engine engine(options);
  double total = 0;
  for (size_t first = 0; first < model.instance_count(); first += size_t(batch)) {
    Trace trace(engine);
    std::vector<Expr> losses;
    for (size_t i = first; i < std::min(model.instance_count(), first + size_t(batch)); ++i)
      losses.push_back(model.record_loss(trace, i));
    total += double(sum(losses).scalar());
  }
  return total;
}

// The loss of the first 8 instances under the sequential reference, the oracle.
double reference_loss(samples::SampleModel& model) {
  EngineOptions reference;
  reference.policy = "sequential";
  reference.executor = "reference";
  return summed_loss(model, reference, 8);
}

class NewSamples : public ::testing::TestWithParam<std::string> {};

TEST_P(NewSamples, EveryExecutorPolicyAndCellSettingGivesTheReferenceLoss) {
  auto model = make(GetParam());
  const double expected = reference_loss(*model);
  ASSERT_TRUE(std::isfinite(expected));
  for (const char* policy : {"greedy", "search", "learned"})
    for (const char* executor : {"batched", "jit"})
      for (bool cells : {true, false}) {
        EngineOptions options;
        options.policy = policy;
        options.executor = executor;
        options.cells = cells;
        options.verify = true;  // every schedule checked: each node once, after its arguments
        options.search_budget_ms = 50;
        EXPECT_NEAR(summed_loss(*model, options, 8), expected, 1e-4 * std::fabs(expected))
            << policy << "/" << executor << "/cells " << cells;
      }
}

// A trained learned policy (a table on the tight-first base, not greedy exactly): the reference
// loss with every schedule verified, and, over the traces it learned from, no more batches than
// greedy (fewer on these samples, where greedy is well above the lower bound).
TEST_P(NewSamples, TrainedLearnedPolicyGivesTheReferenceLossInNoMoreBatchesThanGreedy) {
  auto model = make(GetParam());
  const double expected = reference_loss(*model);
  samples::RunOptions run;
  run.batch = 8;  // the 3 traces it learns from (2 fitted, 1 held out)
  run.repeat = 1;
  for (const char* executor : {"batched", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.verify = true;
    options.policy = "greedy";
    Engine greedy(options);
    const samples::RunResult by_greedy = samples::run_inference(*model, greedy, run);
    options.policy = "learned";
    Engine learned(options);
    PolicyTraining training;
    training.search_budget_ms = 100;
    const PolicyProgress progress = samples::train_policy(*model, learned, 3, run.batch, training);
    EXPECT_FALSE(progress.greedy_fallback) << progress.stop_reason;
    EXPECT_LE(progress.best_batches, progress.greedy_batches);
    const samples::RunResult by_learned = samples::run_inference(*model, learned, run);
    EXPECT_NEAR(by_learned.loss, expected, 1e-4 * std::fabs(expected)) << executor;
    EXPECT_LT(by_learned.stats.batches, by_greedy.stats.batches) << executor << ": " << progress.stop_reason;
    EXPECT_GT(by_learned.stats.policy_decisions, 0) << executor;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, NewSamples, ::testing::Values("childsum", "dagrnn"));

VectorXf row_of(const LookupTable& table, int id) {
  return Eigen::Map<const VectorXf>(table.values().data() + size_t(id) * table.dim(), table.dim());
}

TEST(DagRnnSample, LossEqualsDirectEigen) {
  const std::vector<samples::Dag> dags = samples::generate_dags(24, 3);  // the model's generated data
  auto model = make("dagrnn");
  const Model& m = model->model();
  const MatrixXf w = testing::matrix_of(m.parameter("W")), u = testing::matrix_of(m.parameter("U")),
                 b = testing::matrix_of(m.parameter("b")), w_out = testing::matrix_of(m.parameter("W_out")),
                 b_out = testing::matrix_of(m.parameter("b_out"));
  const LookupTable table = m.lookup("E");
  samples::Vocabulary vocabulary;  // ids by first appearance, as the sample assigns them
  double expected = 0;
  for (const samples::Dag& dag : dags) {
    std::vector<VectorXf> h(dag.nodes.size());
    for (size_t n = 0; n < dag.nodes.size(); ++n) {
      VectorXf pre = w * row_of(table, vocabulary.add(dag.nodes[n].word)) + b;
      if (!dag.nodes[n].predecessors.empty()) {
        VectorXf sum = VectorXf::Zero(pre.size());
        for (int p : dag.nodes[n].predecessors) sum += h[size_t(p)];
        pre += u * sum;
      }
      h[n] = pre.array().tanh().matrix();
      expected += testing::neg_log_softmax(w_out * h[n] + b_out, dag.nodes[n].label);
    }
  }
  EngineOptions options;
  options.executor = "reference";
  EXPECT_NEAR(summed_loss(*model, options, 24), expected, 1e-4 * std::fabs(expected));
}

TEST(NewSamplesRegistry, BothAreRegisteredWithTheirData) {
  ASSERT_NE(samples::find_model("childsum"), nullptr);
  ASSERT_NE(samples::find_model("dagrnn"), nullptr);
  EXPECT_EQ(make("childsum")->instance_count(), 24u);
  EXPECT_EQ(make("dagrnn")->instance_count(), 24u);
  EXPECT_EQ(make("dagrnn")->accuracy_unit(), "node");
}

}  // namespace
}  // namespace edb
