// Binary TreeGRU over SST-style trees, a label loss at every node as in the TreeLSTM. Equations:
//   leaf (a GRU step from h_prev = 0, so no reset gate): [z; u] = W x + b_leaf,
//     h = (1 - sigmoid(z)) * tanh(u)
//   internal node over children h1, h2: [z; r1; r2] = sigmoid(U [h1; h2] + b_gates),
//     h~ = tanh(W_c [r1*h1; r2*h2] + b_c),  h = z*h~ + (1 - z)*(h1 + h2)/2,
//     computed as m + z*(h~ - m) with m = (h1 + h2)/2.
#include "samples/tree_dataset.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLabels = 5;

class TreeGru final : public TreeSample {
 public:
  explicit TreeGru(const ModelConfig& config)
      : TreeSample("treegru", config), hidden_(config.hidden), embed_(config.embed) {
    const int h = hidden_;
    embeddings_ = model_.add_lookup("E", data_.vocabulary.size(), config.embed);
    w_leaf_ = model_.add_parameter("W_leaf", 2 * h, config.embed);
    b_leaf_ = model_.add_parameter("b_leaf", 2 * h, 1);
    u_gates_ = model_.add_parameter("U_gates", 3 * h, 2 * h);
    b_gates_ = model_.add_parameter("b_gates", 3 * h, 1);
    w_candidate_ = model_.add_parameter("W_c", h, 2 * h);
    b_candidate_ = model_.add_parameter("b_c", h, 1);
    w_out_ = model_.add_parameter("W_out", kLabels, h);
    b_out_ = model_.add_parameter("b_out", kLabels, 1);
  }

  std::string accuracy_unit() const override { return "root"; }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const Tree& tree = data_.trees[i];
    const std::vector<int>& ids = data_.word_ids[i];
    std::vector<Expr> states(tree.nodes.size());
    for (size_t n = 0; n < tree.nodes.size(); ++n) {
      const TreeNode& node = tree.nodes[n];
      states[n] = node.is_leaf() ? leaf_(trace, {trace.lookup(embeddings_, ids[n])})[0]
                                 : internal_(trace, {states[size_t(node.left)], states[size_t(node.right)]})[0];
      output({affine({trace.param(b_out_), trace.param(w_out_), states[n]}), node.label, n + 1 == tree.nodes.size()});
    }
  }

 private:
  // Leaf: h = (1 - z) * tanh(u), [z; u] = W x + b.
  std::vector<Expr> leaf(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr zu = affine({trace.param(b_leaf_), trace.param(w_leaf_), in[0]});
    const Expr keep = sigmoid(slice(zu, 0, h)) * -1.0f + 1.0f;  // 1 - z
    return {cmult(keep, tanh(slice(zu, h, 2 * h)))};
  }

  // Internal node: gates z, r1, r2 from U [h1; h2]; h = mean + z * (candidate - mean).
  std::vector<Expr> internal(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr &h1 = in[0], &h2 = in[1];
    const Expr gates = sigmoid(affine({trace.param(b_gates_), trace.param(u_gates_), concat({h1, h2})}));
    const Expr z = slice(gates, 0, h);
    const Expr r1 = slice(gates, h, 2 * h);
    const Expr r2 = slice(gates, 2 * h, 3 * h);
    const Expr candidate = tanh(affine({trace.param(b_candidate_), trace.param(w_candidate_),
                                        concat({cmult(r1, h1), cmult(r2, h2)})}));
    const Expr mean = (h1 + h2) * 0.5f;
    return {mean + cmult(z, candidate - mean)};
  }

  int hidden_, embed_;
  LookupTable embeddings_;
  Parameter w_leaf_, b_leaf_, u_gates_, b_gates_, w_candidate_, b_candidate_, w_out_, b_out_;
  Cell leaf_{"treegru_leaf", {{embed_, 1}}, [this](Trace& t, std::span<const Expr> in) { return leaf(t, in); }};
  Cell internal_{"treegru_internal", {{hidden_, 1}, {hidden_, 1}},
                 [this](Trace& t, std::span<const Expr> in) { return internal(t, in); }};
};

}  // namespace

std::unique_ptr<SampleModel> make_treegru(const ModelConfig& config) {
  return std::make_unique<TreeGru>(config);
}

}  // namespace edb::samples
