// The TreeGRU sample through the engine equals a direct Eigen implementation written here,
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

double neg_log_softmax(const VectorXf& logits, int label) {
  const double max = logits.maxCoeff();
  return max + std::log((logits.array() - float(max)).exp().sum()) - logits(label);
}

// The equations of samples/treegru.cpp's banner, written literally, summing every node's loss:
// leaf h = (1 - z) * tanh(u) with [z; u] = W x + b; internal h = z*h~ + (1 - z)*(h1 + h2)/2.
double direct_tree_loss(const Model& model, const samples::Tree& tree, const std::vector<int>& ids,
                        int hidden) {
  const LookupTable table = model.lookup("E");
  const MatrixXf w_leaf = matrix_of(model.parameter("W_leaf")), b_leaf = matrix_of(model.parameter("b_leaf"));
  const MatrixXf u_gates = matrix_of(model.parameter("U_gates")), b_gates = matrix_of(model.parameter("b_gates"));
  const MatrixXf w_c = matrix_of(model.parameter("W_c")), b_c = matrix_of(model.parameter("b_c"));
  const MatrixXf w_out = matrix_of(model.parameter("W_out")), b_out = matrix_of(model.parameter("b_out"));
  const int h = hidden;
  const VectorXf ones = VectorXf::Ones(h);
  std::vector<VectorXf> hs(tree.nodes.size());
  double loss = 0;
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const samples::TreeNode& node = tree.nodes[n];
    if (node.is_leaf()) {
      const VectorXf x = Eigen::Map<const VectorXf>(table.values().data() + size_t(ids[n]) * table.dim(), table.dim());
      const VectorXf zu = w_leaf * x + b_leaf;
      const VectorXf z = sigmoid(zu.segment(0, h));
      hs[n] = (ones - z).cwiseProduct(tanh_of(zu.segment(h, h)));
    } else {
      const VectorXf& h1 = hs[size_t(node.left)];
      const VectorXf& h2 = hs[size_t(node.right)];
      VectorXf both(2 * h);
      both << h1, h2;
      const VectorXf gates = sigmoid(u_gates * both + b_gates);
      const VectorXf z = gates.segment(0, h), r1 = gates.segment(h, h), r2 = gates.segment(2 * h, h);
      VectorXf reset(2 * h);
      reset << r1.cwiseProduct(h1), r2.cwiseProduct(h2);
      const VectorXf candidate = tanh_of(w_c * reset + b_c);
      hs[n] = z.cwiseProduct(candidate) + (ones - z).cwiseProduct((h1 + h2) / 2.0f);
    }
    loss += neg_log_softmax(w_out * hs[n] + b_out, node.label);
  }
  return loss;
}

class TreeGruReference : public ::testing::Test {
 protected:
  void SetUp() override {
    trees_ = samples::generate_trees(12, 11);
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

TEST_F(TreeGruReference, EachTreeLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 24;
  config.hidden = 16;
  config.seed = 3;
  auto sample = samples::make_treegru(config);
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

TEST_F(TreeGruReference, BatchOfTreesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 16;
  config.hidden = 8;
  auto sample = samples::make_treegru(config);
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
  for (size_t i = 0; i < trees_.size(); ++i) direct += direct_tree_loss(sample->model(), trees_[i], ids[i], 8);
  EXPECT_TRUE(testing::near_relative(result.loss, direct, 1e-5));
  EXPECT_EQ(result.instances, 12);
  EXPECT_EQ(result.stats.batches, result.stats.nodes);  // sequential policy
  EXPECT_GT(result.stats.flops, 0);
}

TEST(TreeGruSample, GeneratesDataWithoutAFileAndIsRegistered) {
  samples::ModelConfig config;
  config.limit = 4;
  config.embed = 8;
  config.hidden = 8;
  EXPECT_EQ(samples::make_treegru(config)->instance_count(), 4u);
  const samples::ModelEntry* entry = samples::find_model("treegru");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_embed, 128);
  EXPECT_EQ(entry->default_hidden, 128);
}

}  // namespace
}  // namespace edb
