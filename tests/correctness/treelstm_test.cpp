// The TreeLSTM sample through the engine equals a direct Eigen implementation written here,
// independently of the IR, from the model's own parameter values.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <fstream>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using Eigen::MatrixXf;
using Eigen::VectorXf;

MatrixXf matrix_of(const Parameter& p) {
  return Eigen::Map<const MatrixXf>(p.values().data(), p.rows(), p.cols());
}

VectorXf sigmoid(const VectorXf& x) { return (1.0f + (-x.array()).exp()).inverse().matrix(); }
VectorXf tanh_of(const VectorXf& x) { return x.array().tanh().matrix(); }

// Tai et al.'s binary TreeLSTM, straight from the equations, summing every node's label loss.
double direct_tree_loss(const Model& model, const samples::Tree& tree, const std::vector<int>& ids,
                        int hidden) {
  const LookupTable table = model.lookup("E");
  const MatrixXf w_iou = matrix_of(model.parameter("W_iou")), b_leaf = matrix_of(model.parameter("b_iou_leaf"));
  const MatrixXf u_iou = matrix_of(model.parameter("U_iou")), b_iou = matrix_of(model.parameter("b_iou"));
  const MatrixXf u_f1 = matrix_of(model.parameter("U_f1")), u_f2 = matrix_of(model.parameter("U_f2"));
  const MatrixXf b_f = matrix_of(model.parameter("b_f"));
  const MatrixXf w_out = matrix_of(model.parameter("W_out")), b_out = matrix_of(model.parameter("b_out"));
  const int h = hidden;
  std::vector<VectorXf> hs(tree.nodes.size()), cs(tree.nodes.size());
  double loss = 0;
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const samples::TreeNode& node = tree.nodes[n];
    if (node.is_leaf()) {
      const VectorXf x = Eigen::Map<const VectorXf>(table.values().data() + size_t(ids[n]) * table.dim(), table.dim());
      const VectorXf iou = w_iou * x + b_leaf;
      cs[n] = sigmoid(iou.segment(0, h)).cwiseProduct(tanh_of(iou.segment(2 * h, h)));
      hs[n] = sigmoid(iou.segment(h, h)).cwiseProduct(tanh_of(cs[n]));
    } else {
      const size_t l = size_t(node.left), r = size_t(node.right);
      VectorXf both(2 * h);
      both << hs[l], hs[r];
      const VectorXf iou = u_iou * both + b_iou;
      const VectorXf f1 = sigmoid(u_f1 * hs[l] + b_f), f2 = sigmoid(u_f2 * hs[r] + b_f);
      cs[n] = sigmoid(iou.segment(0, h)).cwiseProduct(tanh_of(iou.segment(2 * h, h))) +
              f1.cwiseProduct(cs[l]) + f2.cwiseProduct(cs[r]);
      hs[n] = sigmoid(iou.segment(h, h)).cwiseProduct(tanh_of(cs[n]));
    }
    const VectorXf logits = w_out * hs[n] + b_out;
    const double max = logits.maxCoeff();
    const double log_sum = max + std::log((logits.array() - float(max)).exp().sum());
    loss += log_sum - logits(node.label);
  }
  return loss;
}

class TreeLstmReference : public ::testing::Test {
 protected:
  void SetUp() override {
    trees_ = samples::generate_trees(12, 7);
    path_ = dir_.file("trees.txt");
    std::ofstream out(path_);
    for (const samples::Tree& t : trees_) samples::write_tree(out, t);
  }
  // Word ids as the sample assigns them: first appearance in file order, from 1 (0 is <unk>).
  std::vector<std::vector<int>> word_ids() const {
    samples::Vocabulary vocabulary;
    std::vector<std::vector<int>> ids;
    for (const samples::Tree& t : trees_) {
      auto& row = ids.emplace_back(t.nodes.size(), -1);
      for (size_t n = 0; n < t.nodes.size(); ++n)
        if (t.nodes[n].is_leaf()) row[n] = vocabulary.add(t.nodes[n].word);
    }
    return ids;
  }
  testing::TempDir dir_;
  std::vector<samples::Tree> trees_;
  std::string path_;
};

TEST_F(TreeLstmReference, EachTreeLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 24;
  config.hidden = 16;
  config.seed = 3;
  auto sample = samples::make_treelstm(config);
  ASSERT_EQ(sample->instance_count(), trees_.size());
  EngineOptions options;  // the oracle: sequential policy, reference executor
  options.policy = "sequential";
  options.executor = "reference";
  options.verify = true;
  Engine engine(options);
  const auto ids = word_ids();
  for (size_t i = 0; i < trees_.size(); ++i) {
    Trace trace(engine);
    const double engine_loss = sample->record_loss(trace, i).scalar();
    const double direct = direct_tree_loss(sample->model(), trees_[i], ids[i], config.hidden);
    EXPECT_TRUE(testing::near_relative(engine_loss, direct, 1e-5)) << "tree " << i;
  }
}

TEST_F(TreeLstmReference, BatchOfTreesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 32;
  config.hidden = 32;
  auto sample = samples::make_treelstm(config);
  EngineOptions options;  // the oracle: sequential policy, reference executor
  options.policy = "sequential";
  options.executor = "reference";
  options.verify = true;
  Engine engine(options);
  samples::RunOptions run;
  run.batch = 5;  // uneven: the last trace holds 2 trees
  run.repeat = 2;
  const samples::RunResult result = samples::run_inference(*sample, engine, run);
  const auto ids = word_ids();
  double direct = 0;
  for (size_t i = 0; i < trees_.size(); ++i) direct += direct_tree_loss(sample->model(), trees_[i], ids[i], 32);
  EXPECT_TRUE(testing::near_relative(result.loss, direct, 1e-5));
  EXPECT_EQ(result.instances, 12);
  // Sequential policy: one batch per non-leaf node, and every node ran once per pass.
  EXPECT_EQ(result.stats.batches, result.stats.nodes);
  EXPECT_GT(result.stats.flops, 0);
}

}  // namespace
}  // namespace edb
