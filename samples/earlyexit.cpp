// A tagger whose encoder exits early per sentence: up to kLayers stacked LSTMs over the word
// embeddings (layer k runs left to right over layer k-1's outputs; one cell call per word), each
// layer with its own tag classifier (an exit). Training and record() are static: every exit's
// losses on the gold tags (deep supervision). decode() is a program that runs a layer, awaits its
// exit's scores and stops at the first exit where the sentence's words' top tags have a mean
// probability of at least kConfident, or at the last; sentences at the same depth batch together
// (an LSTM layer is a chain, so one sentence alone batches nothing inside it).
#include <cmath>
#include <optional>
#include <string>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kLayers = 4;
constexpr double kConfident = 0.8;

class EarlyExitTagger final : public SampleModel {
 public:
  explicit EarlyExitTagger(const ModelConfig& config)
      : model_("earlyexit", config.seed), embed_(config.embed), hidden_(config.hidden),
        zeros_hidden_(size_t(config.hidden), 0.0f) {
    sentences_ = load_instances<TaggedSentence>(config, "earlyexit", "sentences", read_tagged, generate_tagged, source_);
    restore_vocabulary(config, "words", vocabulary_);
    restore_vocabulary(config, "tags", tags_);
    for (const TaggedSentence& sentence : sentences_) {
      std::vector<int>& words = word_ids_.emplace_back();
      std::vector<int>& tags = tag_ids_.emplace_back();
      for (size_t w = 0; w < sentence.words.size(); ++w) {
        words.push_back(vocabulary_.add(sentence.words[w]));
        tags.push_back(label_id(tags_, sentence.tags[w], "edb-run earlyexit: tag", config) - 1);  // tag t is output row t (no <unk>)
      }
    }
    vocabulary_.freeze();
    tags_.freeze();
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), embed_);
    const int h = hidden_;
    for (int k = 0; k < kLayers; ++k) {
      const std::string n = std::to_string(k + 1);
      const int below = k == 0 ? embed_ : h;
      layers_.push_back({model_.add_parameter("W_" + n, 4 * h, below), model_.add_parameter("U_" + n, 4 * h, h),
                         model_.add_parameter("b_" + n, 4 * h, 1), model_.add_parameter("W_out_" + n, tags_.size() - 1, h),
                         model_.add_parameter("b_out_" + n, tags_.size() - 1, 1)});
    }
    for (int k = 0; k < kLayers; ++k) steps_[size_t(k)].emplace(step_cell(k));
  }

  size_t instance_count() const override { return sentences_.size(); }
  double instance_cost(size_t i) const override { return double(word_ids_.at(i).size()); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(sentences_.size()) + " sentences, " + std::to_string(vocabulary_.size()) + " word types, " +
           std::to_string(tags_.size() - 1) + " tags, " + source_;
  }
  // Every exit's prediction of every word counts (training's held-out accuracy averages the exits).
  std::string accuracy_unit() const override { return "word"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &vocabulary_}, {"tags", &tags_}};
  }
  bool decodes() const override { return true; }
  std::string decoded_unit() const override { return "tag"; }

  Program<Decoded> decode(Trace& trace, size_t i) override {
    const std::vector<int>& tags = tag_ids_.at(i);
    const size_t n = tags.size();
    std::vector<Expr> below = embedded(trace, i);
    std::vector<int> predicted(n, 0);
    for (int k = 0; k < kLayers; ++k) {
      below = layer(trace, k, below);
      std::vector<Expr> scores(n);
      for (size_t w = 0; w < n; ++w) scores[w] = exit_scores(trace, k, below[w]);
      // One value to wait for: every word's scores stacked.
      const Tensor stacked = co_await concat(scores);
      const int64_t classes = stacked.rows / int64_t(n);
      double confidence = 0;  // the mean of the words' top tag probabilities
      for (size_t w = 0; w < n; ++w) {
        const float* s = stacked.data.data() + int64_t(w) * classes;
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (s[c] > s[best]) best = c;
        double total = 0;
        for (int64_t c = 0; c < classes; ++c) total += std::exp(double(s[c]) - double(s[best]));
        predicted[w] = int(best);
        confidence += 1.0 / total / double(n);
      }
      if (confidence >= kConfident) break;
    }
    Decoded decoded;
    decoded.total = int64_t(n);
    for (size_t w = 0; w < n; ++w) decoded.correct += predicted[w] == tags[w];
    co_return decoded;
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    std::vector<Expr> below = embedded(trace, i);
    for (int k = 0; k < kLayers; ++k) {
      below = layer(trace, k, below);
      for (size_t w = 0; w < below.size(); ++w) output({exit_scores(trace, k, below[w]), tag_ids_[i][w]});
    }
  }

 private:
  struct Layer { Parameter w, u, b, w_out, b_out; };

  std::vector<Expr> embedded(Trace& trace, size_t i) const {
    std::vector<Expr> xs;
    for (int id : word_ids_.at(i)) xs.push_back(trace.lookup(embeddings_, id));
    return xs;
  }

  // Layer k's LSTM step as a cell: (x, h, c) -> (h', c').
  Cell step_cell(int k) const {
    const int h = hidden_, below = k == 0 ? embed_ : hidden_;
    return Cell("earlyexit_step_" + std::to_string(k + 1), {{below, 1}, {h, 1}, {h, 1}},
                [this, k, h](Trace& trace, std::span<const Expr> in) {
                  const Layer& l = layers_[size_t(k)];
                  const Expr gates = affine({trace.param(l.b), trace.param(l.w), in[0], trace.param(l.u), in[1]});
                  const LstmState next = lstm_update(gates, in[2], h);
                  return std::vector<Expr>{next.h, next.c};
                });
  }

  // Layer k over the values below it: an LSTM left to right from zeros.
  std::vector<Expr> layer(Trace& trace, int k, const std::vector<Expr>& below) const {
    const Expr zero = trace.input(zeros_hidden_);
    LstmState state{zero, zero};
    std::vector<Expr> out(below.size());
    for (size_t w = 0; w < below.size(); ++w) {
      const std::vector<Expr> next = (*steps_[size_t(k)])(trace, {below[w], state.h, state.c});
      state = {next[0], next[1]};
      out[w] = state.h;
    }
    return out;
  }

  Expr exit_scores(Trace& trace, int k, const Expr& h) const {
    const Layer& l = layers_[size_t(k)];
    return affine({trace.param(l.b_out), trace.param(l.w_out), h});
  }

  Model model_;
  int embed_, hidden_;
  std::vector<float> zeros_hidden_;
  std::vector<TaggedSentence> sentences_;
  std::vector<std::vector<int>> word_ids_, tag_ids_;
  Vocabulary vocabulary_, tags_;
  std::string source_;
  LookupTable embeddings_;
  std::vector<Layer> layers_;
  std::optional<Cell> steps_[kLayers];
};

}  // namespace

std::unique_ptr<SampleModel> make_earlyexit(const ModelConfig& config) {
  return std::make_unique<EarlyExitTagger>(config);
}

}  // namespace edb::samples
