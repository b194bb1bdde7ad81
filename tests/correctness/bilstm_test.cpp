// The BiLSTM tagger samples (word embeddings only, and with a char BiLSTM for rare words) through the
// engine equal a direct Eigen implementation written here, independently of the IR, from the
// model's own parameter values.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using Eigen::MatrixXf;
using Eigen::VectorXf;

MatrixXf matrix_of(const Parameter& p) {
  return Eigen::Map<const MatrixXf>(p.values().data(), p.rows(), p.cols());
}

VectorXf sigmoid(const VectorXf& x) { return (1.0f + (-x.array()).exp()).inverse().matrix(); }
VectorXf tanh_of(const VectorXf& x) { return x.array().tanh().matrix(); }

double neg_log_softmax(const VectorXf& logits, int label) {
  const double max = logits.maxCoeff();
  return max + std::log((logits.array() - float(max)).exp().sum()) - logits(label);
}

struct Ids {
  std::vector<std::vector<int>> words, tags;
  int tag_count = 0;
};

// Word and tag ids as the sample assigns them: first appearance in file order; words from 1
// (0 is <unk>), tags from 0.
Ids ids_of(const std::vector<samples::TaggedSentence>& sentences) {
  samples::Vocabulary words, tags;
  Ids ids;
  for (const samples::TaggedSentence& s : sentences) {
    auto& w = ids.words.emplace_back();
    auto& t = ids.tags.emplace_back();
    for (size_t i = 0; i < s.words.size(); ++i) {
      w.push_back(words.add(s.words[i]));
      t.push_back(tags.add(s.tags[i]) - 1);
    }
  }
  ids.tag_count = tags.size() - 1;
  return ids;
}

struct Lstm {
  MatrixXf w, u, b;
  Lstm(const Model& model, const std::string& direction)
      : w(matrix_of(model.parameter("W_" + direction))),
        u(matrix_of(model.parameter("U_" + direction))),
        b(matrix_of(model.parameter("b_" + direction))) {}
  // [i; f; o; g] = W x + U h + b;  c = f*c + i*g;  h = o*tanh(c).
  void step(const VectorXf& x, VectorXf& h, VectorXf& c) const {
    const int n = int(h.size());
    const VectorXf gates = w * x + u * h + b;
    c = sigmoid(gates.segment(n, n)).cwiseProduct(c) +
        sigmoid(gates.segment(0, n)).cwiseProduct(tanh_of(gates.segment(3 * n, n)));
    h = sigmoid(gates.segment(2 * n, n)).cwiseProduct(tanh_of(c));
  }
};

VectorXf row_of(const LookupTable& table, int id) {
  return Eigen::Map<const VectorXf>(table.values().data() + size_t(id) * table.dim(), table.dim());
}

// A forward and a backward LSTM over the word vectors `xs`, then per word tanh(MLP [fwd; bwd]) ->
// logits -> loss, summed.
double direct_sentence_loss(const Model& model, const std::vector<VectorXf>& xs, const std::vector<int>& tags,
                            int hidden) {
  const Lstm forward(model, "fwd"), backward(model, "bwd");
  const MatrixXf w_mlp = matrix_of(model.parameter("W_mlp")), b_mlp = matrix_of(model.parameter("b_mlp"));
  const MatrixXf w_out = matrix_of(model.parameter("W_out")), b_out = matrix_of(model.parameter("b_out"));
  const size_t length = xs.size();
  std::vector<VectorXf> forward_h(length), backward_h(length);
  VectorXf h = VectorXf::Zero(hidden), c = VectorXf::Zero(hidden);
  for (size_t i = 0; i < length; ++i) {
    forward.step(xs[i], h, c);
    forward_h[i] = h;
  }
  h.setZero();
  c.setZero();
  for (size_t i = length; i-- > 0;) {
    backward.step(xs[i], h, c);
    backward_h[i] = h;
  }
  double loss = 0;
  for (size_t i = 0; i < length; ++i) {
    VectorXf both(2 * hidden);
    both << forward_h[i], backward_h[i];
    const VectorXf mlp = tanh_of(w_mlp * both + b_mlp);
    loss += neg_log_softmax(w_out * mlp + b_out, tags[i]);
  }
  return loss;
}

double direct_sentence_loss(const Model& model, const std::vector<int>& words, const std::vector<int>& tags,
                            int hidden) {
  std::vector<VectorXf> xs;
  for (int id : words) xs.push_back(row_of(model.lookup("E"), id));
  return direct_sentence_loss(model, xs, tags, hidden);
}

// The char tagger's word vectors: a word seen fewer than 5 times in the file is [fwd_h after its
// last char; bwd_h after its first] of the char LSTMs (hidden embed/2) over the "C" embeddings;
// others their "E" row. Ids by first appearance: frequent words from 1, rare words' chars from 1.
std::vector<std::vector<VectorXf>> char_tagger_inputs(const Model& model, const std::vector<samples::TaggedSentence>& sentences,
                                                      int embed) {
  std::map<std::string, int> seen;
  for (const samples::TaggedSentence& s : sentences)
    for (const std::string& w : s.words) ++seen[w];
  samples::Vocabulary words, chars;
  const Lstm forward(model, "char_fwd"), backward(model, "char_bwd");
  std::vector<std::vector<VectorXf>> inputs;
  for (const samples::TaggedSentence& s : sentences) {
    std::vector<VectorXf>& xs = inputs.emplace_back();
    for (const std::string& w : s.words) {
      if (seen[w] >= 5) {
        xs.push_back(row_of(model.lookup("E"), words.add(w)));
        continue;
      }
      std::vector<VectorXf> letters;
      for (char c : w) letters.push_back(row_of(model.lookup("C"), chars.add(std::string(1, c))));
      VectorXf hf = VectorXf::Zero(embed / 2), cf = hf, hb = hf, cb = hf;
      for (const VectorXf& x : letters) forward.step(x, hf, cf);
      for (size_t j = letters.size(); j-- > 0;) backward.step(letters[j], hb, cb);
      VectorXf both(embed);
      both << hf, hb;
      xs.push_back(both);
    }
  }
  return inputs;
}

// The oracle: the sequential policy under the reference executor, verifying.
EngineOptions oracle_options() {
  EngineOptions options;
  options.policy = "sequential";
  options.executor = "reference";
  options.verify = true;
  return options;
}

class BiLstmReference : public ::testing::Test {
 protected:
  void SetUp() override {
    sentences_ = samples::generate_tagged(10, 5);
    path_ = dir_.file("tagged.txt");
    std::ofstream out(path_);
    for (const samples::TaggedSentence& s : sentences_) samples::write_tagged(out, s);
  }
  testing::TempDir dir_;
  std::vector<samples::TaggedSentence> sentences_;
  std::string path_;
};

TEST_F(BiLstmReference, EachSentenceLossEqualsDirectEigen) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 20;
  config.hidden = 12;
  config.seed = 3;
  auto sample = samples::make_bilstm(config);
  ASSERT_EQ(sample->instance_count(), sentences_.size());
  const Ids ids = ids_of(sentences_);
  // One output row per tag seen in the data, and the MLP is 32 wide as in the DyNet benchmark.
  EXPECT_EQ(sample->model().parameter("W_out").rows(), ids.tag_count);
  EXPECT_EQ(sample->model().parameter("W_mlp").rows(), 32);
  Engine engine(oracle_options());
  for (size_t i = 0; i < sentences_.size(); ++i) {
    Trace trace(engine);
    const double engine_loss = sample->record_loss(trace, i).scalar();
    const double direct = direct_sentence_loss(sample->model(), ids.words[i], ids.tags[i], config.hidden);
    EXPECT_TRUE(testing::near_relative(engine_loss, direct, 1e-5)) << "sentence " << i;
  }
}

// The char tagger (words seen fewer than 5 times read by a char BiLSTM) against the direct Eigen
// model, on spelled words, where some words are frequent and some rare.
TEST(BiLstmCharReference, EachSentenceLossEqualsDirectEigen) {
  const std::vector<samples::TaggedSentence> sentences = samples::generate_spelled_tagged(30, 5);
  testing::TempDir dir;
  const std::string path = dir.file("spelled.txt");
  {
    std::ofstream out(path);
    for (const samples::TaggedSentence& s : sentences) samples::write_tagged(out, s);
  }
  samples::ModelConfig config;
  config.data_path = path;
  config.embed = 20;
  config.hidden = 12;
  config.seed = 3;
  auto sample = samples::make_bilstm_char(config);
  ASSERT_EQ(sample->instance_count(), sentences.size());
  const std::vector<std::vector<VectorXf>> inputs = char_tagger_inputs(sample->model(), sentences, config.embed);
  const Ids ids = ids_of(sentences);
  size_t rare = 0, frequent = 0;
  std::map<std::string, int> seen;
  for (const samples::TaggedSentence& s : sentences)
    for (const std::string& w : s.words) ++seen[w];
  for (const auto& [word, count] : seen) (count < 5 ? rare : frequent) += 1;
  ASSERT_GT(rare, 10u);
  ASSERT_GT(frequent, 3u);
  Engine engine(oracle_options());
  for (size_t i = 0; i < sentences.size(); ++i) {
    Trace trace(engine);
    const double engine_loss = sample->record_loss(trace, i).scalar();
    const double direct = direct_sentence_loss(sample->model(), inputs[i], ids.tags[i], config.hidden);
    EXPECT_TRUE(testing::near_relative(engine_loss, direct, 1e-5)) << "sentence " << i;
  }
}

TEST(BiLstmCharReference, AnOddEmbeddingIsAUsageErrorAndTheModelIsRegistered) {
  samples::ModelConfig config;
  config.limit = 5;
  config.embed = 9;
  config.hidden = 8;
  try {
    samples::make_bilstm_char(config);
    FAIL() << "an odd --embed was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--embed must be even"), std::string::npos) << e.what();
  }
  config.embed = 8;
  EXPECT_EQ(samples::make_bilstm_char(config)->instance_count(), 5u);
  const samples::ModelEntry* entry = samples::find_model("bilstmchar");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_embed, 128);
}

TEST_F(BiLstmReference, BatchOfSentencesInOneTraceSumsTheSameLosses) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.embed = 16;
  config.hidden = 16;
  auto sample = samples::make_bilstm(config);
  Engine engine(oracle_options());
  samples::RunOptions run;
  run.batch = 4;  // uneven: the last trace holds 2 sentences
  run.repeat = 2;
  const samples::RunResult result = samples::run_inference(*sample, engine, run);
  const Ids ids = ids_of(sentences_);
  double direct = 0;
  for (size_t i = 0; i < sentences_.size(); ++i)
    direct += direct_sentence_loss(sample->model(), ids.words[i], ids.tags[i], 16);
  EXPECT_TRUE(testing::near_relative(result.loss, direct, 1e-5));
  EXPECT_EQ(result.instances, 10);
  EXPECT_EQ(result.stats.batches, result.stats.nodes);  // sequential policy
  EXPECT_GT(result.stats.flops, 0);
}

TEST_F(BiLstmReference, LimitTruncatesTheFile) {
  samples::ModelConfig config;
  config.data_path = path_;
  config.limit = 3;
  config.embed = 8;
  config.hidden = 8;
  EXPECT_EQ(samples::make_bilstm(config)->instance_count(), 3u);
}

TEST(BiLstmSample, GeneratesDataWithoutAFileAndIsRegistered) {
  samples::ModelConfig config;
  config.limit = 5;
  config.embed = 8;
  config.hidden = 8;
  EXPECT_EQ(samples::make_bilstm(config)->instance_count(), 5u);
  const samples::ModelEntry* entry = samples::find_model("bilstm");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_embed, 128);
  EXPECT_EQ(entry->default_hidden, 50);
}

}  // namespace
}  // namespace edb
