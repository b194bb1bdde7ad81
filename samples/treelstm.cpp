// Binary TreeLSTM (Tai et al. 2015, as in the DyNet benchmark): leaves take i, o, u from W x + b;
// internal nodes from U [h1; h2] + b, with one forget gate per child sharing a bias; a label loss
// at every node.
#include <algorithm>

#include "samples/tree_dataset.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLabels = 5;

class TreeLstm final : public TreeSample {
 public:
  explicit TreeLstm(const ModelConfig& config)
      : TreeSample("treelstm", config), hidden_(config.hidden), embed_(config.embed) {
    const int h = hidden_;
    embeddings_ = model_.add_lookup("E", data_.vocabulary.size(), config.embed);
    w_iou_ = model_.add_parameter("W_iou", 3 * h, config.embed);
    b_iou_leaf_ = model_.add_parameter("b_iou_leaf", 3 * h, 1);
    u_iou_ = model_.add_parameter("U_iou", 3 * h, 2 * h);
    b_iou_ = model_.add_parameter("b_iou", 3 * h, 1);
    u_f1_ = model_.add_parameter("U_f1", h, h);
    u_f2_ = model_.add_parameter("U_f2", h, h);
    b_f_ = model_.add_parameter("b_f", h, 1);
    w_out_ = model_.add_parameter("W_out", kLabels, h);
    b_out_ = model_.add_parameter("b_out", kLabels, 1);
  }

 private:
  // Leaf: x -> (h, c), with i, o, u from W x + b.
  std::vector<Expr> leaf(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr iou = affine({trace.param(b_iou_leaf_), trace.param(w_iou_), in[0]});
    const Expr c = cmult(sigmoid(slice(iou, 0, h)), tanh(slice(iou, 2 * h, 3 * h)));
    return {cmult(sigmoid(slice(iou, h, 2 * h)), tanh(c)), c};
  }

  // Internal node: (h1, c1, h2, c2) -> (h, c), with i, o, u from U [h1; h2] + b and one forget
  // gate per child.
  std::vector<Expr> internal(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr &h1 = in[0], &c1 = in[1], &h2 = in[2], &c2 = in[3];
    const Expr iou = affine({trace.param(b_iou_), trace.param(u_iou_), concat({h1, h2})});
    const Expr i = sigmoid(slice(iou, 0, h));
    const Expr o = sigmoid(slice(iou, h, 2 * h));
    const Expr u = tanh(slice(iou, 2 * h, 3 * h));
    const Expr f1 = sigmoid(affine({trace.param(b_f_), trace.param(u_f1_), h1}));
    const Expr f2 = sigmoid(affine({trace.param(b_f_), trace.param(u_f2_), h2}));
    const Expr c = sum({cmult(i, u), cmult(f1, c1), cmult(f2, c2)});
    return {cmult(o, tanh(c)), c};
  }

 public:

  std::string accuracy_unit() const override { return "root"; }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const Tree& tree = data_.trees[i];
    const std::vector<int>& ids = data_.word_ids[i];
    struct State { Expr h, c; };
    std::vector<State> states(tree.nodes.size());
    for (size_t n = 0; n < tree.nodes.size(); ++n) {
      const TreeNode& node = tree.nodes[n];
      std::vector<Expr> hc;
      if (node.is_leaf()) {
        hc = leaf_(trace, {trace.lookup(embeddings_, ids[n])});
      } else {
        const State& l = states[size_t(node.left)];
        const State& r = states[size_t(node.right)];
        hc = internal_(trace, {l.h, l.c, r.h, r.c});
      }
      states[n] = State{hc[0], hc[1]};
      output({affine({trace.param(b_out_), trace.param(w_out_), hc[0]}), node.label, n + 1 == tree.nodes.size()});
    }
  }

 private:
  int hidden_, embed_;
  LookupTable embeddings_;
  Parameter w_iou_, b_iou_leaf_, u_iou_, b_iou_, u_f1_, u_f2_, b_f_, w_out_, b_out_;
  Cell leaf_{"treelstm_leaf", {{embed_, 1}}, [this](Trace& t, std::span<const Expr> in) { return leaf(t, in); }};
  Cell internal_{"treelstm_internal", {{hidden_, 1}, {hidden_, 1}, {hidden_, 1}, {hidden_, 1}},
                 [this](Trace& t, std::span<const Expr> in) { return internal(t, in); }};
};

}  // namespace

std::unique_ptr<SampleModel> make_treelstm(const ModelConfig& config) {
  return std::make_unique<TreeLstm>(config);
}

}  // namespace edb::samples
