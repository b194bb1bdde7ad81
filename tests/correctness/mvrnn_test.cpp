// The MV-RNN sample through the engine equals a direct Eigen implementation written here,
// independently of the IR, from the model's own parameter and lookup-table values.
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

VectorXf tanh_of(const VectorXf& x) { return x.array().tanh().matrix(); }

// Socher et al.'s composition, summing every node's loss: p = tanh(W [B a; A b] + b_W),
// P = W_M [A; B]; a leaf is its word's vector (table "A") and matrix (table "M", column-major).
double direct_tree_loss(const Model& model, const samples::Tree& tree, const std::vector<int>& ids, int n) {
  const LookupTable vectors = model.lookup("A"), matrices = model.lookup("M");
  const MatrixXf w = matrix_of(model.parameter("W")), b_w = matrix_of(model.parameter("b_W"));
  const MatrixXf w_m = matrix_of(model.parameter("W_M"));
  const MatrixXf w_out = matrix_of(model.parameter("W_out")), b_out = matrix_of(model.parameter("b_out"));
  std::vector<VectorXf> ps(tree.nodes.size());
  std::vector<MatrixXf> ms(tree.nodes.size());
  double loss = 0;
  for (size_t k = 0; k < tree.nodes.size(); ++k) {
    const samples::TreeNode& node = tree.nodes[k];
    if (node.is_leaf()) {
      ps[k] = Eigen::Map<const VectorXf>(vectors.values().data() + size_t(ids[k]) * n, n);
      ms[k] = Eigen::Map<const MatrixXf>(matrices.values().data() + size_t(ids[k]) * n * n, n, n);
    } else {
      const size_t l = size_t(node.left), r = size_t(node.right);
      VectorXf crossed(2 * n);
      crossed << ms[r] * ps[l], ms[l] * ps[r];
      ps[k] = tanh_of(w * crossed + b_w);
      MatrixXf stacked(2 * n, n);
      stacked << ms[l], ms[r];
      ms[k] = w_m * stacked;
    }
    loss += neg_log_softmax(w_out * ps[k] + b_out, node.label);
  }
  return loss;
}

class MvRnnReference : public testing::TreeFileTest {
 protected:
  void SetUp() override { write_trees(12, 13); }
};

TEST_F(MvRnnReference, EachTreeLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.hidden = 12;
  config.seed = 3;
  auto sample = samples::make_mvrnn(config);
  expect_each_tree_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
}

TEST_F(MvRnnReference, BatchOfTreesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.hidden = 8;
  auto sample = samples::make_mvrnn(config);
  expect_batched_run_matches(*sample, [&](const Model& m, const samples::Tree& t, const std::vector<int>& ids) {
    return direct_tree_loss(m, t, ids, config.hidden);
  });
}

TEST(MvRnnSample, WordMatricesStartNearTheIdentityAndItIsRegistered) {
  samples::ModelConfig config;
  config.limit = 3;
  config.hidden = 6;
  auto sample = samples::make_mvrnn(config);
  EXPECT_EQ(sample->instance_count(), 3u);
  const LookupTable matrices = sample->model().lookup("M");
  ASSERT_EQ(matrices.dim(), 36);
  const float noise = std::sqrt(3.0f / 36.0f);  // the table's uniform initialisation scale
  for (int word = 0; word < matrices.entries(); ++word) {
    const Eigen::Map<const MatrixXf> m(matrices.values().data() + size_t(word) * 36, 6, 6);
    EXPECT_LE((m - MatrixXf::Identity(6, 6)).cwiseAbs().maxCoeff(), noise) << "word " << word;
  }
  const samples::ModelEntry* entry = samples::find_model("mvrnn");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_hidden, 64);
}

}  // namespace
}  // namespace edb
