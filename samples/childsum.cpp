// Child-sum TreeLSTM (Tai et al. 2015) over n-ary trees with 1-5 children per internal node, as a
// new user writes it: a leaf cell from the word, one forget cell per child (f_k * c_k), and a node
// cell from the children's summed h and summed f_k * c_k; a label loss at every node. Equations:
//   leaf:     [i; o; u] = W_iou x + b_leaf;  c = i*u;  h = o*tanh(c)
//   internal: h~ = sum_k h_k;  f_k = sigmoid(U_f h_k + b_f);  [i; o; u] = U_iou h~ + b_iou
//             c = i*u + sum_k f_k*c_k;  h = o*tanh(c)            (i, o sigmoid; u tanh)
// The sums of 2-5 terms are variadic, one batching type per child count: the structure that makes
// batching hard.
#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLabels = 5;

class ChildSumTreeLstm final : public SampleModel {
 public:
  explicit ChildSumTreeLstm(const ModelConfig& config)
      : model_("childsum", config.seed), hidden_(config.hidden), embed_(config.embed) {
    trees_ = load_instances<NaryTree>(config, "childsum", "trees", read_nary_trees, generate_nary_trees, source_);
    restore_vocabulary(config, "words", vocabulary_);
    for (const NaryTree& tree : trees_) {
      std::vector<int>& ids = word_ids_.emplace_back(tree.nodes.size(), -1);
      for (size_t n = 0; n < tree.nodes.size(); ++n)
        if (tree.nodes[n].is_leaf()) ids[n] = vocabulary_.add(tree.nodes[n].word);
    }
    vocabulary_.freeze();
    const int h = hidden_;
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), config.embed);
    w_iou_ = model_.add_parameter("W_iou", 3 * h, config.embed);
    b_leaf_ = model_.add_parameter("b_iou_leaf", 3 * h, 1);
    u_iou_ = model_.add_parameter("U_iou", 3 * h, h);
    b_iou_ = model_.add_parameter("b_iou", 3 * h, 1);
    u_f_ = model_.add_parameter("U_f", h, h);
    b_f_ = model_.add_parameter("b_f", h, 1);
    w_out_ = model_.add_parameter("W_out", kLabels, h);
    b_out_ = model_.add_parameter("b_out", kLabels, 1);
  }

  size_t instance_count() const override { return trees_.size(); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(trees_.size()) + " trees, " + std::to_string(vocabulary_.size()) + " word types, " + source_;
  }
  std::string accuracy_unit() const override { return "root"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &vocabulary_}};
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const NaryTree& tree = trees_[i];
    struct State { Expr h, c; };
    std::vector<State> states(tree.nodes.size());
    std::vector<Expr> hs, fcs;
    for (size_t n = 0; n < tree.nodes.size(); ++n) {
      const NaryNode& node = tree.nodes[n];
      std::vector<Expr> hc;
      if (node.is_leaf()) {
        hc = leaf_(trace, {trace.lookup(embeddings_, word_ids_[i][n])});
      } else {
        hs.clear();
        fcs.clear();
        for (int child : node.children) {
          const State& s = states[size_t(child)];
          hs.push_back(s.h);
          fcs.push_back(forget_(trace, {s.h, s.c})[0]);
        }
        hc = node_(trace, {hs.size() == 1 ? hs[0] : sum(hs), fcs.size() == 1 ? fcs[0] : sum(fcs)});
      }
      states[n] = State{hc[0], hc[1]};
      output({affine({trace.param(b_out_), trace.param(w_out_), hc[0]}), node.label, n + 1 == tree.nodes.size()});
    }
  }

 private:
  std::vector<Expr> leaf(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr iou = affine({trace.param(b_leaf_), trace.param(w_iou_), in[0]});
    const Expr c = cmult(sigmoid(slice(iou, 0, h)), tanh(slice(iou, 2 * h, 3 * h)));
    return {cmult(sigmoid(slice(iou, h, 2 * h)), tanh(c)), c};
  }
  std::vector<Expr> forget(Trace& trace, std::span<const Expr> in) const {
    return {cmult(sigmoid(affine({trace.param(b_f_), trace.param(u_f_), in[0]})), in[1])};
  }
  std::vector<Expr> internal(Trace& trace, std::span<const Expr> in) const {
    const int h = hidden_;
    const Expr iou = affine({trace.param(b_iou_), trace.param(u_iou_), in[0]});
    const Expr c = cmult(sigmoid(slice(iou, 0, h)), tanh(slice(iou, 2 * h, 3 * h))) + in[1];
    return {cmult(sigmoid(slice(iou, h, 2 * h)), tanh(c)), c};
  }

  Model model_;
  int hidden_, embed_;
  std::vector<NaryTree> trees_;
  std::vector<std::vector<int>> word_ids_;  // per tree, per node: the leaf's word id, -1 inside
  Vocabulary vocabulary_;
  std::string source_;
  LookupTable embeddings_;
  Parameter w_iou_, b_leaf_, u_iou_, b_iou_, u_f_, b_f_, w_out_, b_out_;
  Cell leaf_{"childsum_leaf", {{embed_, 1}}, [this](Trace& t, std::span<const Expr> in) { return leaf(t, in); }};
  Cell forget_{"childsum_forget", {{hidden_, 1}, {hidden_, 1}},
               [this](Trace& t, std::span<const Expr> in) { return forget(t, in); }};
  Cell node_{"childsum_node", {{hidden_, 1}, {hidden_, 1}},
             [this](Trace& t, std::span<const Expr> in) { return internal(t, in); }};
};

}  // namespace

std::unique_ptr<SampleModel> make_childsum(const ModelConfig& config) {
  return std::make_unique<ChildSumTreeLstm>(config);
}

}  // namespace edb::samples
