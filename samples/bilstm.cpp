// BiLSTM tagger (the DyNet benchmark's bilstm-tagger): a forward and a backward LSTM over the
// sentence, then per word tanh(MLP [fwd_h; bwd_h]) -> tag logits -> a loss. With chars (DyNet's
// bilstm-tagger-withchar), a word seen fewer than kFrequent times is read by a char BiLSTM (char
// embeddings of kCharEmbed, embed/2 each way): its vector is [fwd_h after the last char; bwd_h
// after the first].
// LSTM step: [i; f; o; g] = W x + U h_prev + b (one affine); c = f*c_prev + i*g; h = o*tanh(c).
#include <optional>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kMlpHidden = 32;
constexpr int kFrequent = 5;    // with chars: words seen this often have an embedding of their own
constexpr int kCharEmbed = 20;  // DyNet's bilstm-tagger-withchar's sizes

class BiLstmTagger final : public SampleModel {
 public:
  BiLstmTagger(const ModelConfig& config, bool chars)
      : model_(chars ? "bilstmchar" : "bilstm", config.seed), hidden_(config.hidden), chars_(chars),
        zeros_(size_t(config.hidden), 0.0f), char_zeros_(size_t(config.embed / 2), 0.0f) {
    const std::string name = chars ? "bilstmchar" : "bilstm";
    if (chars && (config.embed < 2 || config.embed % 2 != 0))
      throw UsageError("edb-run " + name + ": --embed must be even (a rare word's vector is its char BiLSTM's two " +
                       "halves), got " + std::to_string(config.embed));
    sentences_ = load_instances<TaggedSentence>(config, name, "sentences", read_tagged,
                                                chars ? generate_spelled_tagged : generate_tagged, source_);
    // With chars, the words seen fewer than kFrequent times are spelled out (<unk> stands for them
    // in the word vocabulary).
    ids_ = tagged_ids(sentences_, chars ? kFrequent : 0, chars ? Spell::rare : Spell::none, vocabulary_,
                      chars_vocabulary_, tags_, config, name);
    const int h = hidden_;
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), config.embed);
    forward_ = {model_.add_parameter("W_fwd", 4 * h, config.embed), model_.add_parameter("U_fwd", 4 * h, h),
                model_.add_parameter("b_fwd", 4 * h, 1)};
    backward_ = {model_.add_parameter("W_bwd", 4 * h, config.embed), model_.add_parameter("U_bwd", 4 * h, h),
                 model_.add_parameter("b_bwd", 4 * h, 1)};
    step_.emplace(step_cell("bilstm_step", config.embed, h, forward_, backward_));
    if (chars) {
      const int ch = config.embed / 2;
      char_embeddings_ = model_.add_lookup("C", chars_vocabulary_.size(), kCharEmbed);
      char_forward_ = {model_.add_parameter("W_char_fwd", 4 * ch, kCharEmbed), model_.add_parameter("U_char_fwd", 4 * ch, ch),
                       model_.add_parameter("b_char_fwd", 4 * ch, 1)};
      char_backward_ = {model_.add_parameter("W_char_bwd", 4 * ch, kCharEmbed),
                        model_.add_parameter("U_char_bwd", 4 * ch, ch), model_.add_parameter("b_char_bwd", 4 * ch, 1)};
      char_step_.emplace(step_cell("bilstm_char_step", kCharEmbed, ch, char_forward_, char_backward_));
    }
    w_mlp_ = model_.add_parameter("W_mlp", kMlpHidden, 2 * h);
    b_mlp_ = model_.add_parameter("b_mlp", kMlpHidden, 1);
    w_out_ = model_.add_parameter("W_out", tags_.size() - 1, kMlpHidden);
    b_out_ = model_.add_parameter("b_out", tags_.size() - 1, 1);
  }

  size_t instance_count() const override { return sentences_.size(); }
  double instance_cost(size_t i) const override { return double(ids_.words.at(i).size()); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(sentences_.size()) + " sentences, " + std::to_string(vocabulary_.size()) +
           (chars_ ? " frequent word types, " + std::to_string(chars_vocabulary_.size() - 1) + " chars, " : " word types, ") +
           std::to_string(tags_.size() - 1) + " tags, " + source_;
  }

  std::string accuracy_unit() const override { return "word"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    if (!chars_) return {{"words", &vocabulary_}, {"tags", &tags_}};
    return {{"words", &vocabulary_}, {"chars", &chars_vocabulary_}, {"tags", &tags_}};
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const std::vector<int>& words = ids_.words[i];
    const std::vector<int>& tags = ids_.tags[i];
    const size_t length = words.size();
    // Each direction looks its words up itself, in the order its steps read them, so the planner
    // can lay both operands out in place (one shared lookup could suit only one direction).
    // A rare word's vector is one value both directions read.
    std::vector<Expr> forward_x(length), backward_x(length);
    for (size_t w = 0; w < length; ++w)
      forward_x[w] = ids_.letters[i][w].empty() ? trace.lookup(embeddings_, words[w]) : spelled(trace, ids_.letters[i][w]);
    for (size_t w = length; w-- > 0;)
      backward_x[w] = ids_.letters[i][w].empty() ? trace.lookup(embeddings_, words[w]) : forward_x[w];
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
  using State = LstmState;

  // Both directions' steps as one cell: (x_f, h_f, c_f, x_b, h_b, c_b) -> (h_f', c_f', h_b', c_b').
  Cell step_cell(const std::string& name, int embed, int h, const Lstm& forward, const Lstm& backward) const {
    return Cell(name, {{embed, 1}, {h, 1}, {h, 1}, {embed, 1}, {h, 1}, {h, 1}},
                [&forward, &backward, h](Trace& trace, std::span<const Expr> in) {
                  const State f = step(trace, forward, in[0], State{in[1], in[2]}, h);
                  const State b = step(trace, backward, in[3], State{in[4], in[5]}, h);
                  return std::vector<Expr>{f.h, f.c, b.h, b.c};
                });
  }

  // A rare word's vector: the char BiLSTM over its letters, one cell call per position running the
  // forward step at letter j and the backward step at letter n-1-j; [fwd_h; bwd_h] at the ends.
  Expr spelled(Trace& trace, const std::vector<int>& letters) const {
    const size_t n = letters.size();
    const Expr zero = trace.input(char_zeros_);
    State forward{zero, zero}, backward{zero, zero};
    for (size_t j = 0; j < n; ++j) {
      const std::vector<Expr> out = (*char_step_)(trace, {trace.lookup(char_embeddings_, letters[j]), forward.h, forward.c,
                                                          trace.lookup(char_embeddings_, letters[n - 1 - j]), backward.h,
                                                          backward.c});
      forward = {out[0], out[1]};
      backward = {out[2], out[3]};
    }
    return concat({forward.h, backward.h});
  }

  static State step(Trace& trace, const Lstm& lstm, const Expr& x, const State& previous, int h) {
    const Expr gates = affine({trace.param(lstm.b), trace.param(lstm.w), x, trace.param(lstm.u), previous.h});
    return lstm_update(gates, previous.c, h);
  }

  Model model_;
  int hidden_;
  bool chars_;
  std::vector<float> zeros_, char_zeros_;
  std::vector<TaggedSentence> sentences_;
  TaggedIds ids_;  // letters: a rare word's, else none
  Vocabulary vocabulary_, chars_vocabulary_, tags_;
  std::string source_;
  LookupTable embeddings_, char_embeddings_;
  Lstm forward_, backward_, char_forward_, char_backward_;
  std::optional<Cell> step_, char_step_;
  Parameter w_mlp_, b_mlp_, w_out_, b_out_;
};

}  // namespace

std::unique_ptr<SampleModel> make_bilstm(const ModelConfig& config) {
  return std::make_unique<BiLstmTagger>(config, false);
}

std::unique_ptr<SampleModel> make_bilstm_char(const ModelConfig& config) {
  return std::make_unique<BiLstmTagger>(config, true);
}

}  // namespace edb::samples
