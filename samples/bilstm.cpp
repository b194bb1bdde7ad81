// BiLSTM tagger (the DyNet benchmark's bilstm-tagger, word embeddings only): a forward and a
// backward LSTM over the sentence, then per word tanh(MLP [fwd_h; bwd_h]) -> tag logits -> a loss.
// LSTM step: [i; f; o; g] = W x + U h_prev + b (one affine); c = f*c_prev + i*g; h = o*tanh(c).
#include <optional>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kMlpHidden = 32;

class BiLstmTagger final : public SampleModel {
 public:
  explicit BiLstmTagger(const ModelConfig& config)
      : model_("bilstm", config.seed), hidden_(config.hidden), zeros_(size_t(config.hidden), 0.0f) {
    sentences_ = load_instances<TaggedSentence>(config, "bilstm", "sentences", read_tagged, generate_tagged, source_);
    // Word and tag ids by first appearance, fixed once so recording a trace does no string work.
    // Tags need no <unk>: Vocabulary's id 0 is skipped so tag t is output row t.
    for (const TaggedSentence& sentence : sentences_) {
      std::vector<int>& words = word_ids_.emplace_back();
      std::vector<int>& tags = tag_ids_.emplace_back();
      for (size_t w = 0; w < sentence.words.size(); ++w) {
        words.push_back(vocabulary_.add(sentence.words[w]));
        tags.push_back(tags_.add(sentence.tags[w]) - 1);
      }
    }
    vocabulary_.freeze();
    tags_.freeze();
    const int h = hidden_;
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), config.embed);
    forward_ = {model_.add_parameter("W_fwd", 4 * h, config.embed), model_.add_parameter("U_fwd", 4 * h, h),
                model_.add_parameter("b_fwd", 4 * h, 1)};
    backward_ = {model_.add_parameter("W_bwd", 4 * h, config.embed), model_.add_parameter("U_bwd", 4 * h, h),
                 model_.add_parameter("b_bwd", 4 * h, 1)};
    step_.emplace(step_cell(config.embed));
    w_mlp_ = model_.add_parameter("W_mlp", kMlpHidden, 2 * h);
    b_mlp_ = model_.add_parameter("b_mlp", kMlpHidden, 1);
    w_out_ = model_.add_parameter("W_out", tags_.size() - 1, kMlpHidden);
    b_out_ = model_.add_parameter("b_out", tags_.size() - 1, 1);
  }

  size_t instance_count() const override { return sentences_.size(); }
  double instance_cost(size_t i) const override { return double(word_ids_.at(i).size()); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(sentences_.size()) + " sentences, " + std::to_string(vocabulary_.size()) +
           " word types, " + std::to_string(tags_.size() - 1) + " tags, " + source_;
  }

  std::string accuracy_unit() const override { return "word"; }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const std::vector<int>& words = word_ids_[i];
    const std::vector<int>& tags = tag_ids_[i];
    const size_t length = words.size();
    // Each direction looks its words up itself, in the order its steps read them, so the planner
    // can lay both operands out in place (one shared lookup could suit only one direction).
    std::vector<Expr> forward_x(length), backward_x(length);
    for (size_t w = 0; w < length; ++w) forward_x[w] = trace.lookup(embeddings_, words[w]);
    for (size_t w = length; w-- > 0;) backward_x[w] = trace.lookup(embeddings_, words[w]);
    // The zero initial h and c: an input rather than a parameter, so the first step's affine has
    // the same signature as every later step and batches with them.
    const Expr zero = trace.input(zeros_);
    // One cell call per position runs the forward step at word w and the backward step at word
    // length-1-w: both chains are the sentence's length, and inside the cell their elementwise
    // ops batch together.
    std::vector<Expr> forward_h(length), backward_h(length);
    State forward{zero, zero}, backward{zero, zero};
    for (size_t w = 0; w < length; ++w) {
      const size_t v = length - 1 - w;
      const std::vector<Expr> out =
          (*step_)(trace, {forward_x[w], forward.h, forward.c, backward_x[v], backward.h, backward.c});
      forward = {out[0], out[1]};
      backward = {out[2], out[3]};
      forward_h[w] = forward.h;
      backward_h[v] = backward.h;
    }
    for (size_t w = 0; w < length; ++w) {
      const Expr mlp = tanh(affine({trace.param(b_mlp_), trace.param(w_mlp_), concat({forward_h[w], backward_h[w]})}));
      output({affine({trace.param(b_out_), trace.param(w_out_), mlp}), tags[w]});
    }
  }

 private:
  struct Lstm { Parameter w, u, b; };
  struct State { Expr h, c; };

  // Both directions' steps as one cell: (x_f, h_f, c_f, x_b, h_b, c_b) -> (h_f', c_f', h_b', c_b').
  Cell step_cell(int embed) const {
    const int h = hidden_;
    return Cell("bilstm_step", {{embed, 1}, {h, 1}, {h, 1}, {embed, 1}, {h, 1}, {h, 1}},
                [this](Trace& trace, std::span<const Expr> in) {
                  const State f = step(trace, forward_, in[0], State{in[1], in[2]});
                  const State b = step(trace, backward_, in[3], State{in[4], in[5]});
                  return std::vector<Expr>{f.h, f.c, b.h, b.c};
                });
  }

  State step(Trace& trace, const Lstm& lstm, const Expr& x, const State& previous) const {
    const int h = hidden_;
    const Expr gates = affine({trace.param(lstm.b), trace.param(lstm.w), x, trace.param(lstm.u), previous.h});
    const Expr in = sigmoid(slice(gates, 0, h));
    const Expr forget = sigmoid(slice(gates, h, 2 * h));
    const Expr out = sigmoid(slice(gates, 2 * h, 3 * h));
    const Expr candidate = tanh(slice(gates, 3 * h, 4 * h));
    State next;
    next.c = cmult(forget, previous.c) + cmult(in, candidate);
    next.h = cmult(out, tanh(next.c));
    return next;
  }

  Model model_;
  int hidden_;
  std::vector<float> zeros_;
  std::vector<TaggedSentence> sentences_;
  std::vector<std::vector<int>> word_ids_, tag_ids_;
  Vocabulary vocabulary_, tags_;
  std::string source_;
  LookupTable embeddings_;
  Lstm forward_, backward_;
  std::optional<Cell> step_;
  Parameter w_mlp_, b_mlp_, w_out_, b_out_;
};

}  // namespace

std::unique_ptr<SampleModel> make_bilstm(const ModelConfig& config) {
  return std::make_unique<BiLstmTagger>(config);
}

}  // namespace edb::samples
