// The char-CNN tagger sample (charcnn) through the engine equals a direct implementation in double
// written here from the model's own parameter values (conv1d_wide, kmax_pooling and layer_norm
// by their definitions), and it learns to tag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <edbatch/train.h>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/training.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [row][column]

Matrix matrix_of(std::span<const float> values, int rows, int cols) {
  Matrix m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) m[size_t(r)][size_t(c)] = values[size_t(c * rows + r)];
  return m;
}
Matrix parameter(const Model& model, const std::string& name) {
  const Parameter p = model.parameter(name);
  return matrix_of(p.values(), p.rows(), p.cols());
}
std::vector<double> column(const LookupTable& table, int entry) {
  const std::span<const float> v = table.values();
  return {v.begin() + entry * table.dim(), v.begin() + (entry + 1) * table.dim()};
}
std::vector<double> affine(const Matrix& b, const Matrix& w, const std::vector<double>& x) {
  std::vector<double> y(w.size());
  for (size_t r = 0; r < w.size(); ++r) {
    y[r] = b[r][0];
    for (size_t k = 0; k < x.size(); ++k) y[r] += w[r][k] * x[k];
  }
  return y;
}

// One sentence's loss, as the sample defines it: per word [E(word); max over time of
// tanh(conv1d_wide(W_channels X, F))], layer_norm, tanh(MLP), -log softmax at the gold tag.
double direct_loss(const Model& model, const std::vector<int>& words, const std::vector<std::vector<int>>& letters,
                   const std::vector<int>& tags) {
  const Matrix channels = parameter(model, "W_channels"), filter = parameter(model, "F");
  const Matrix g = parameter(model, "g_norm"), b = parameter(model, "b_norm");
  const Matrix w_mlp = parameter(model, "W_mlp"), b_mlp = parameter(model, "b_mlp");
  const Matrix w_out = parameter(model, "W_out"), b_out = parameter(model, "b_out");
  const int width = int(filter[0].size());
  double loss = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    std::vector<double> features = column(model.lookup("E"), words[w]);
    const int n = int(letters[w].size());
    for (size_t f = 0; f < channels.size(); ++f) {
      std::vector<double> row(static_cast<size_t>(n), 0.0);  // channel f over the letters
      for (int j = 0; j < n; ++j) {
        const std::vector<double> c = column(model.lookup("C"), letters[w][size_t(j)]);
        for (size_t k = 0; k < c.size(); ++k) row[size_t(j)] += channels[f][k] * c[k];
      }
      double best = -INFINITY;
      for (int j = 0; j < n + width - 1; ++j) {  // wide: the row padded with width - 1 zeros each side
        double sum = 0;
        for (int k = 0; k < width; ++k) {
          const int at = j + k - (width - 1);
          if (at >= 0 && at < n) sum += row[size_t(at)] * filter[f][size_t(k)];
        }
        best = std::max(best, std::tanh(sum));
      }
      features.push_back(best);
    }
    double mean = 0, deviation = 0;
    for (double v : features) mean += v / double(features.size());
    for (double v : features) deviation += (v - mean) * (v - mean) / double(features.size());
    std::vector<double> normal;
    for (size_t r = 0; r < features.size(); ++r)
      normal.push_back(g[r][0] * (features[r] - mean) / (std::sqrt(deviation) + 1e-8) + b[r][0]);
    std::vector<double> hidden = affine(b_mlp, w_mlp, normal);
    for (double& h : hidden) h = std::tanh(h);
    const std::vector<double> scores = affine(b_out, w_out, hidden);
    const double top = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double s : scores) sum += std::exp(s - top);
    loss += top + std::log(sum) - scores[size_t(tags[w])];
  }
  return loss;
}

TEST(CharCnnReference, EachSentenceLossEqualsADirectComputation) {
  const std::vector<samples::TaggedSentence> sentences = samples::generate_spelled_tagged(30, 5);
  testing::TempDir dir;
  const std::string path = dir.file("spelled.txt");
  {
    std::ofstream out(path);
    for (const samples::TaggedSentence& s : sentences) samples::write_tagged(out, s);
  }
  samples::ModelConfig config;
  config.data_path = path;
  config.embed = 12;
  config.hidden = 10;
  config.seed = 3;
  auto sample = samples::make_charcnn(config);
  ASSERT_EQ(sample->instance_count(), sentences.size());
  // Ids as the sample assigns them: words seen 5 times or more by first appearance (others 0),
  // letters and tags by first appearance (tags from 0).
  std::map<std::string, int> seen;
  for (const samples::TaggedSentence& s : sentences)
    for (const std::string& w : s.words) ++seen[w];
  samples::Vocabulary words, chars, tags;
  for (const char* executor : {"reference", "batched", "jit"}) {
    Engine engine(testing::checked_options(executor));
    Trace trace(engine);
    std::vector<Expr> losses;
    for (size_t i = 0; i < sentences.size(); ++i) losses.push_back(sample->record_loss(trace, i));  // one trace: batched
    for (size_t i = 0; i < sentences.size(); ++i) {
      std::vector<int> word_ids, tag_ids;
      std::vector<std::vector<int>> letters;
      for (size_t w = 0; w < sentences[i].words.size(); ++w) {
        const std::string& word = sentences[i].words[w];
        word_ids.push_back(seen[word] < 5 ? 0 : words.add(word));
        std::vector<int>& spelled = letters.emplace_back();
        for (char c : word) spelled.push_back(chars.add(std::string(1, c)));
        tag_ids.push_back(tags.add(sentences[i].tags[w]) - 1);
      }
      const double direct = direct_loss(sample->model(), word_ids, letters, tag_ids);
      EXPECT_TRUE(testing::near_relative(losses[i].scalar(), direct, 1e-5)) << executor << " sentence " << i;
    }
  }
  const samples::ModelEntry* entry = samples::find_model("charcnn");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_embed, 32);
}

TEST(CharCnn, LearnsToTagFromSpellings) {
  samples::ModelConfig config;
  config.limit = 500;
  config.embed = 16;
  config.hidden = 32;
  config.seed = 2;
  const std::unique_ptr<samples::SampleModel> tagger = samples::make_charcnn(config);
  Engine engine(testing::checked_options("jit"));
  OptimizerOptions adam;
  adam.kind = "adam";
  adam.learning_rate = 0.02f;
  Optimizer optimizer(tagger->model(), adam);
  samples::TrainOptions options;
  options.epochs = 4;
  options.batch = 32;
  options.holdout = 0.2;
  const samples::TrainResult result = samples::train(*tagger, engine, optimizer, options);
  const samples::Evaluation& last = result.epochs.back().heldout;
  EXPECT_GT(last.accuracy(), last.majority_accuracy() + 0.15)
      << "held-out words " << last.accuracy() << ", majority tag " << last.majority_accuracy();
  EXPECT_LT(last.loss, result.initial.loss);
}

}  // namespace
}  // namespace edb
