// DAG-RNN: an Elman RNN over a DAG, each node reading the sum of its 1-3 predecessors' states, a
// label loss at every node. Equations (x the node's word embedding):
//   source: h = tanh(W x + b)      node: h = tanh(W x + U sum_p h_p + b)
// The sums of 2 and 3 terms are two batching types, and nodes of one depth sit at different
// positions in different DAGs: a batching policy has to wait for stragglers.
#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLabels = 5;

class DagRnn final : public SampleModel {
 public:
  explicit DagRnn(const ModelConfig& config) : model_("dagrnn", config.seed), hidden_(config.hidden), embed_(config.embed) {
    dags_ = load_instances<Dag>(config, "dagrnn", "DAGs", read_dags, generate_dags, source_);
    restore_vocabulary(config, "words", vocabulary_);
    for (const Dag& dag : dags_) {
      std::vector<int>& ids = word_ids_.emplace_back();
      for (const DagNode& node : dag.nodes) ids.push_back(vocabulary_.add(node.word));
    }
    vocabulary_.freeze();
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), config.embed);
    w_ = model_.add_parameter("W", hidden_, config.embed);
    u_ = model_.add_parameter("U", hidden_, hidden_);
    b_ = model_.add_parameter("b", hidden_, 1);
    w_out_ = model_.add_parameter("W_out", kLabels, hidden_);
    b_out_ = model_.add_parameter("b_out", kLabels, 1);
  }

  size_t instance_count() const override { return dags_.size(); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(dags_.size()) + " DAGs, " + std::to_string(vocabulary_.size()) + " word types, " + source_;
  }
  std::string accuracy_unit() const override { return "node"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &vocabulary_}};
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const Dag& dag = dags_[i];
    std::vector<Expr> states(dag.nodes.size()), predecessors;
    for (size_t n = 0; n < dag.nodes.size(); ++n) {
      const DagNode& node = dag.nodes[n];
      const Expr x = trace.lookup(embeddings_, word_ids_[i][n]);
      if (node.predecessors.empty()) {
        states[n] = source_cell_(trace, {x})[0];
      } else {
        predecessors.clear();
        for (int p : node.predecessors) predecessors.push_back(states[size_t(p)]);
        states[n] = node_cell_(trace, {x, predecessors.size() == 1 ? predecessors[0] : sum(predecessors)})[0];
      }
      output({affine({trace.param(b_out_), trace.param(w_out_), states[n]}), node.label, false});
    }
  }

 private:
  Model model_;
  int hidden_, embed_;
  std::vector<Dag> dags_;
  std::vector<std::vector<int>> word_ids_;
  Vocabulary vocabulary_;
  std::string source_;
  LookupTable embeddings_;
  Parameter w_, u_, b_, w_out_, b_out_;
  Cell source_cell_{"dagrnn_source", {{embed_, 1}}, [this](Trace& t, std::span<const Expr> in) {
                      return std::vector<Expr>{tanh(affine({t.param(b_), t.param(w_), in[0]}))};
                    }};
  Cell node_cell_{"dagrnn_node", {{embed_, 1}, {hidden_, 1}}, [this](Trace& t, std::span<const Expr> in) {
                    return std::vector<Expr>{tanh(affine({t.param(b_), t.param(w_), in[0], t.param(u_), in[1]}))};
                  }};
};

}  // namespace

std::unique_ptr<SampleModel> make_dagrnn(const ModelConfig& config) { return std::make_unique<DagRnn>(config); }

}  // namespace edb::samples
