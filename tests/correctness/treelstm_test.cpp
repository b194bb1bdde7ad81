// The TreeLSTM sample through the engine equals a direct Eigen implementation written here,
// independently of the IR, from the model's own parameter values.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <fstream>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/tree_reference.h"

namespace edb {
namespace {

using Eigen::MatrixXf;
using Eigen::VectorXf;
using testing::matrix_of;
using testing::neg_log_softmax;

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

class TreeLstmReference : public testing::TreeFileTest {
 protected:
  void SetUp() override { write_trees(12, 7); }
};

TEST_F(TreeLstmReference, EachTreeLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 24;
  config.hidden = 16;
  config.seed = 3;
  auto sample = samples::make_treelstm(config);
  expect_each_tree_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
}

TEST_F(TreeLstmReference, BatchOfTreesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 32;
  config.hidden = 32;
  auto sample = samples::make_treelstm(config);
  expect_batched_run_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
}

}  // namespace
}  // namespace edb
