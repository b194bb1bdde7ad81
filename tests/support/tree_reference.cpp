// The shared tree-model reference checks.
#include "tests/support/tree_reference.h"

#include <cmath>
#include <fstream>

#include "samples/runner.h"

namespace edb::testing {

Eigen::MatrixXf matrix_of(const Parameter& p) {
  return Eigen::Map<const Eigen::MatrixXf>(p.values().data(), p.rows(), p.cols());
}

double neg_log_softmax(const Eigen::VectorXf& logits, int label) {
  const double max = logits.maxCoeff();
  return max + std::log((logits.array() - float(max)).exp().sum()) - logits(label);
}

EngineOptions oracle_options() {
  EngineOptions options;
  options.policy = "sequential";
  options.executor = "reference";
  options.verify = true;
  return options;
}

void TreeFileTest::write_trees(int count, uint64_t seed) {
  trees_ = samples::generate_trees(count, seed);
  path_ = dir_.file("trees.txt");
  std::ofstream out(path_);
  for (const samples::Tree& t : trees_) samples::write_tree(out, t);
}

std::vector<std::vector<int>> TreeFileTest::word_ids() const {
  samples::Vocabulary vocabulary;
  std::vector<std::vector<int>> ids;
  for (const samples::Tree& t : trees_) {
    auto& row = ids.emplace_back(t.nodes.size(), -1);
    for (size_t n = 0; n < t.nodes.size(); ++n)
      if (t.nodes[n].is_leaf()) row[n] = vocabulary.add(t.nodes[n].word);
  }
  return ids;
}

void TreeFileTest::expect_each_tree_matches(samples::SampleModel& sample, const DirectTreeLoss& direct) const {
  ASSERT_EQ(sample.instance_count(), trees_.size());
  Engine engine(oracle_options());
  const auto ids = word_ids();
  for (size_t i = 0; i < trees_.size(); ++i) {
    Trace trace(engine);
    const double engine_loss = sample.record_loss(trace, i).scalar();
    EXPECT_TRUE(near_relative(engine_loss, direct(sample.model(), trees_[i], ids[i]), 1e-5)) << "tree " << i;
  }
}

void TreeFileTest::expect_batched_run_matches(samples::SampleModel& sample, const DirectTreeLoss& direct) const {
  Engine engine(oracle_options());
  samples::RunOptions run;
  run.batch = 5;  // uneven: the last trace holds the remainder
  run.repeat = 2;
  const samples::RunResult result = samples::run_inference(sample, engine, run);
  const auto ids = word_ids();
  double expected = 0;
  for (size_t i = 0; i < trees_.size(); ++i) expected += direct(sample.model(), trees_[i], ids[i]);
  EXPECT_TRUE(near_relative(result.loss, expected, 1e-5));
  EXPECT_EQ(result.instances, static_cast<int64_t>(trees_.size()));
  EXPECT_EQ(result.stats.batches, result.stats.nodes);  // sequential policy
  EXPECT_GT(result.stats.flops, 0);
}

}  // namespace edb::testing
