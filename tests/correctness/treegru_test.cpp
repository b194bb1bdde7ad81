// The TreeGRU sample through the engine equals a direct Eigen implementation written here,
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

class TreeGruReference : public testing::TreeFileTest {
 protected:
  void SetUp() override { write_trees(12, 11); }
};

TEST_F(TreeGruReference, EachTreeLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 24;
  config.hidden = 16;
  config.seed = 3;
  auto sample = samples::make_treegru(config);
  expect_each_tree_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
}

TEST_F(TreeGruReference, BatchOfTreesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 16;
  config.hidden = 8;
  auto sample = samples::make_treegru(config);
  expect_batched_run_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
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
