// MV-RNN (Socher et al. 2012) over SST-style trees: every word has a vector a (table "A") and an
// n x n matrix A (table "M", one n*n column per word, column-major). A node over (a, A), (b, B):
//   p = tanh(W [B a; A b] + b_W),  P = W_M [A; B];  a label loss from p (a leaf's: from a) at every node.
// --embed is unused: word vectors are --hidden long, like phrase vectors. A word's matrix is its
// n*n lookup viewed as n x n with reshape (no copy; the planner makes it a view).
#include "samples/tree_dataset.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLabels = 5;

class MvRnn final : public TreeSample {
 public:
  explicit MvRnn(const ModelConfig& config) : TreeSample("mvrnn", config), size_(config.hidden) {
    // The vector size is --hidden: the composition keeps word and phrase vectors the same size.
    const int n = size_;
    word_vectors_ = model_.add_lookup("A", data_.vocabulary.size(), n);
    word_matrices_ = model_.add_lookup("M", data_.vocabulary.size(), n * n);
    // Socher et al. start every word matrix at the identity plus noise, so it first passes vectors on.
    const std::span<float> matrices = word_matrices_.values();
    for (size_t word = 0; word < size_t(data_.vocabulary.size()); ++word)
      for (size_t d = 0; d < size_t(n); ++d) matrices[word * n * n + d * n + d] += 1.0f;
    w_ = model_.add_parameter("W", n, 2 * n);
    b_w_ = model_.add_parameter("b_W", n, 1);
    w_m_ = model_.add_parameter("W_M", n, 2 * n);
    w_out_ = model_.add_parameter("W_out", kLabels, n);
    b_out_ = model_.add_parameter("b_out", kLabels, 1);
  }

  std::string accuracy_unit() const override { return "root"; }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const Tree& tree = data_.trees[i];
    const std::vector<int>& ids = data_.word_ids[i];
    const int n = size_;
    struct State { Expr vector, matrix; };
    std::vector<State> states(tree.nodes.size());
    for (size_t k = 0; k < tree.nodes.size(); ++k) {
      const TreeNode& node = tree.nodes[k];
      State& s = states[k];
      if (node.is_leaf()) {
        s.vector = trace.lookup(word_vectors_, ids[k]);
        s.matrix = reshape(trace.lookup(word_matrices_, ids[k]), n, n);
      } else {
        const State& l = states[size_t(node.left)];
        const State& r = states[size_t(node.right)];
        // The root's matrix would feed nothing: the root's cell makes the vector only.
        if (k + 1 < tree.nodes.size()) {
          const std::vector<Expr> vm = internal_(trace, {l.vector, l.matrix, r.vector, r.matrix});
          s.vector = vm[0];
          s.matrix = vm[1];
        } else {
          s.vector = root_(trace, {l.vector, l.matrix, r.vector, r.matrix})[0];
        }
      }
      output({affine({trace.param(b_out_), trace.param(w_out_), s.vector}), node.label, k + 1 == tree.nodes.size()});
    }
  }

 private:
  // p = tanh(W [B a; A b] + b_W) and P = W_M [A; B], for children (a, A) and (b, B).
  Expr vector(Trace& trace, std::span<const Expr> in) const {
    return tanh(affine({trace.param(b_w_), trace.param(w_), concat({matvec(in[3], in[0]), matvec(in[1], in[2])})}));
  }
  Expr matrix(Trace& trace, std::span<const Expr> in) const {
    return matmul(trace.param(w_m_), concat({in[1], in[3]}));
  }

  int size_;
  LookupTable word_vectors_, word_matrices_;
  Parameter w_, b_w_, w_m_, w_out_, b_out_;
  std::vector<std::pair<int, int>> children_{{size_, 1}, {size_, size_}, {size_, 1}, {size_, size_}};
  Cell internal_{"mvrnn_internal", children_, [this](Trace& t, std::span<const Expr> in) {
                   return std::vector<Expr>{vector(t, in), matrix(t, in)};
                 }};
  Cell root_{"mvrnn_root", children_,
             [this](Trace& t, std::span<const Expr> in) { return std::vector<Expr>{vector(t, in)}; }};
};

}  // namespace

std::unique_ptr<SampleModel> make_mvrnn(const ModelConfig& config) {
  return std::make_unique<MvRnn>(config);
}

}  // namespace edb::samples
