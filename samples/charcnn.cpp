// A tagger over word vectors from a character CNN (issue 46's second model for layer_norm and
// conv1d): per word its letters' embeddings as a kCharEmbed x n matrix, a pointwise product to
// kFilters channels, conv1d_wide with a kWidth filter per channel, tanh, kmax_pooling to the
// largest value per channel; that beside the word's embedding (<unk> for words seen fewer than
// kFrequent times), layer_norm, then tanh(MLP) -> tag logits -> a loss per word.

#include <map>
#include <string>
#include <vector>

#include "samples/data/data.h"
#include "samples/models.h"

namespace edb::samples {

namespace {

constexpr int kCharEmbed = 16;
constexpr int kFilters = 32;
constexpr int kWidth = 3;     // conv1d_wide's filter: a letter and its neighbours
constexpr int kFrequent = 5;  // words seen this often have an embedding of their own

class CharCnnTagger final : public SampleModel {
 public:
  explicit CharCnnTagger(const ModelConfig& config) : model_("charcnn", config.seed) {
    sentences_ = load_instances<TaggedSentence>(config, "charcnn", "sentences", read_tagged,
                                                generate_spelled_tagged, source_);
    ids_ = tagged_ids(sentences_, kFrequent, Spell::every, vocabulary_, chars_, tags_, config, "charcnn");
    const int features = config.embed + kFilters;
    embeddings_ = model_.add_lookup("E", vocabulary_.size(), config.embed);
    char_embeddings_ = model_.add_lookup("C", chars_.size(), kCharEmbed);
    w_channels_ = model_.add_parameter("W_channels", kFilters, kCharEmbed);
    filter_ = model_.add_parameter("F", kFilters, kWidth);
    gain_ = model_.add_parameter("g_norm", features, 1);
    for (float& g : gain_.values()) g = 1.0f;  // layer_norm starts as the identity's scale
    bias_ = model_.add_parameter("b_norm", features, 1);
    for (float& b : bias_.values()) b = 0.0f;
    w_mlp_ = model_.add_parameter("W_mlp", config.hidden, features);
    b_mlp_ = model_.add_parameter("b_mlp", config.hidden, 1);
    w_out_ = model_.add_parameter("W_out", tags_.size() - 1, config.hidden);
    b_out_ = model_.add_parameter("b_out", tags_.size() - 1, 1);
  }

  size_t instance_count() const override { return sentences_.size(); }
  double instance_cost(size_t i) const override { return double(ids_.words.at(i).size()); }
  Model& model() override { return model_; }
  std::string describe_data() const override {
    return std::to_string(sentences_.size()) + " sentences, " + std::to_string(vocabulary_.size()) +
           " frequent word types, " + std::to_string(chars_.size() - 1) + " chars, " + std::to_string(tags_.size() - 1) +
           " tags, " + source_;
  }
  std::string accuracy_unit() const override { return "word"; }
  std::vector<std::pair<std::string, const Vocabulary*>> vocabularies() const override {
    return {{"words", &vocabulary_}, {"chars", &chars_}, {"tags", &tags_}};
  }

 protected:
  void record(Trace& trace, size_t i, const std::function<void(const Prediction&)>& output) override {
    const std::vector<int>& words = ids_.words[i];
    for (size_t w = 0; w < words.size(); ++w) {
      const Expr features = concat({trace.lookup(embeddings_, words[w]), spelled(trace, ids_.letters[i][w])});
      const Expr normal = layer_norm(features, trace.param(gain_), trace.param(bias_));
      const Expr mlp = tanh(affine({trace.param(b_mlp_), trace.param(w_mlp_), normal}));
      output({affine({trace.param(b_out_), trace.param(w_out_), mlp}), ids_.tags[i][w]});
    }
  }

 private:
  // The char CNN of a word's letters: kFilters x 1, a call of the encoder cell of the word's
  // length (a cell's arguments have one shape), so words of one length batch as one call each and,
  // under jit, run as one compiled kernel per batch.
  Expr spelled(Trace& trace, const std::vector<int>& letters) const {
    const int n = int(letters.size());
    std::vector<Expr> columns;
    for (int letter : letters) columns.push_back(trace.lookup(char_embeddings_, letter));
    // The letters' columns stacked, then viewed as kCharEmbed x n (column-major: column j is letter j).
    const Expr x = reshape(concat(columns), kCharEmbed, n);
    const Expr channels = matmul(trace.param(w_channels_), x);  // kFilters x n
    return encoder(n)(trace, {channels})[0];
  }

  // The encoder of words of n letters, over their kFilters x n channels: kmax_pooling(tanh(
  // conv1d_wide(channels, F)), 1). Every value in it has kFilters rows, the compiled cell's block
  // height (the channels' product with W_channels stays outside: its gradient for the letters has
  // kCharEmbed rows).
  const Cell& encoder(int n) const {
    auto it = encoders_.find(n);
    if (it == encoders_.end()) {
      const Parameter filter = filter_;
      it = encoders_
               .emplace(n, Cell("char_cnn_" + std::to_string(n), {{kFilters, n}},
                                [filter](Trace& t, std::span<const Expr> in) {
                                  return std::vector<Expr>{kmax_pooling(tanh(conv1d_wide(in[0], t.param(filter))), 1)};
                                }))
               .first;
    }
    return it->second;
  }

  Model model_;
  std::vector<TaggedSentence> sentences_;
  TaggedIds ids_;  // letters: every word's
  Vocabulary vocabulary_, chars_, tags_;
  std::string source_;
  LookupTable embeddings_, char_embeddings_;
  Parameter w_channels_, filter_, gain_, bias_, w_mlp_, b_mlp_, w_out_, b_out_;
  mutable std::map<int, Cell> encoders_;  // by word length, made on first use
};

}  // namespace

std::unique_ptr<SampleModel> make_charcnn(const ModelConfig& config) { return std::make_unique<CharCnnTagger>(config); }

}  // namespace edb::samples
