// Training the sample models (samples/training.h): every model's predictions are the scores its
// loss reads, the held-out split is the last instances, epochs continue their shuffles, and a
// TreeLSTM learns a tree task whose labels follow from the words, beating the majority class.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "samples/models.h"
#include "samples/training.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;
using testing::TempDir;
using testing::usage_error;

samples::ModelConfig small_config(int limit) {
  samples::ModelConfig config;
  config.limit = limit;
  config.embed = 8;
  config.hidden = 8;
  config.seed = 3;
  return config;
}

OptimizerOptions adam() {
  OptimizerOptions options;
  options.kind = "adam";
  options.learning_rate = 0.01f;
  return options;
}

// record_predictions gives the positions record_loss sums, in order: their losses add up to it.
TEST(SampleTraining, PredictionsAreWhatTheLossReads) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    const std::unique_ptr<samples::SampleModel> sample = entry.make(small_config(4));
    Engine engine(testing::checked_options("jit"));
    for (size_t i = 0; i < sample->instance_count(); ++i) {
      Trace trace(engine);
      const Expr loss = sample->record_loss(trace, i);
      const std::vector<samples::Prediction> predictions = sample->record_predictions(trace, i);
      ASSERT_FALSE(predictions.empty());
      std::vector<Expr> losses;
      int roots = 0;
      for (const samples::Prediction& p : predictions) {
        EXPECT_EQ(p.scores.cols(), 1);
        EXPECT_GE(p.gold, 0);
        EXPECT_LT(p.gold, p.scores.rows());
        roots += p.root;
        losses.push_back(pick_neg_log_softmax(p.scores, p.gold));
      }
      EXPECT_TRUE(std::isfinite(loss.scalar()));  // two NaNs would agree below
      EXPECT_TRUE(near_relative(sum(losses).scalar(), loss.scalar()));
      if (sample->accuracy_unit() == "root") {
        EXPECT_EQ(roots, 1);
        EXPECT_TRUE(predictions.back().root);  // nodes are in post-order
      } else {
        EXPECT_EQ(roots, 0);
      }
    }
  }
}

TEST(SampleTraining, HeldOutInstancesAreTheLast) {
  EXPECT_EQ(samples::split_instances(100, 0.1).train, 90u);
  EXPECT_EQ(samples::split_instances(100, 0.1).heldout, 10u);
  EXPECT_EQ(samples::split_instances(10, 0.01).heldout, 1u);  // at least one when asked for any
  EXPECT_EQ(samples::split_instances(10, 0.0).heldout, 0u);
  EXPECT_EQ(usage_error([] { samples::split_instances(1, 0.5); }),
            "--holdout 0.5 leaves no training instance of 1");
  EXPECT_EQ(usage_error([] { samples::split_instances(10, 1.0); }), "--holdout must be in [0, 1), got 1");
  EXPECT_EQ(usage_error([] { samples::split_instances(10, -0.1); }), "--holdout must be in [0, 1), got -0.1");
}

// Counts of a held-out split: every node of each tree is a position, its root the counted one,
// and the majority is the most frequent gold root class.
TEST(SampleTraining, EvaluationCountsRootsAndPositions) {
  TempDir dir;
  testing::write_file(dir.file("trees.txt"),
                      "(3 (2 a) (4 b))\n(1 (2 a) (2 (1 c) (2 d)))\n(3 (2 b) (0 c))\n(0 (3 d) (2 a))\n");
  samples::ModelConfig config = small_config(-1);
  config.data_path = dir.file("trees.txt");
  const std::unique_ptr<samples::SampleModel> sample = samples::make_treelstm(config);
  Engine engine(testing::checked_options("jit"));
  const samples::Evaluation e = samples::evaluate(*sample, engine, 0, 4, 3);
  EXPECT_EQ(e.instances, 4);
  EXPECT_EQ(e.counted, 4);
  EXPECT_EQ(e.majority, 2);  // roots 3, 1, 3, 0
  EXPECT_EQ(e.positions, 3 + 5 + 3 + 3);
  EXPECT_EQ(e.positions_majority, 6);  // label 2
  EXPECT_GE(e.correct, 0);
  EXPECT_LE(e.correct, e.counted);
  double loss = 0;
  for (size_t i = 0; i < 4; ++i) {
    Trace trace(engine);
    loss += sample->record_loss(trace, i).scalar();
  }
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_TRUE(near_relative(e.loss, loss / 4));
}

// A tree task that can be learned: words p* count +1, n* -1, x* 0, and every node's label is 4, 0
// or 2 as its span's count is positive, negative or zero.
std::string learnable_trees(int count, uint64_t seed) {
  uint64_t state = seed;
  auto below = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  struct Node { std::string text; int score; };
  std::function<Node(const std::vector<std::string>&, size_t, size_t)> build =
      [&](const std::vector<std::string>& words, size_t begin, size_t end) -> Node {
    Node node;
    if (end - begin == 1) {
      const char kind = words[begin][0];
      node.score = kind == 'p' ? 1 : kind == 'n' ? -1 : 0;
      node.text = words[begin];
    } else {
      const size_t split = begin + 1 + below(end - begin - 1);
      const Node left = build(words, begin, split), right = build(words, split, end);
      node.score = left.score + right.score;
      node.text = left.text + " " + right.text;
    }
    node.text = "(" + std::to_string(node.score > 0 ? 4 : node.score < 0 ? 0 : 2) + " " + node.text + ")";
    return node;
  };
  std::string file;
  for (int t = 0; t < count; ++t) {
    std::vector<std::string> words(2 + below(6));
    for (std::string& word : words) word = std::string(1, "pnxx"[below(4)]) + std::to_string(below(5));
    file += build(words, 0, words.size()).text + "\n";
  }
  return file;
}

samples::TrainResult train_learnable(const std::string& path, const OptimizerOptions& optimizer_options, int epochs) {
  samples::ModelConfig config = small_config(-1);
  config.embed = config.hidden = 16;
  config.data_path = path;
  const std::unique_ptr<samples::SampleModel> sample = samples::make_treelstm(config);
  Engine engine;
  Optimizer optimizer(sample->model(), optimizer_options);
  samples::TrainOptions options;
  options.epochs = epochs;
  options.batch = 16;
  options.holdout = 0.2;
  return samples::train(*sample, engine, optimizer, options);
}

TEST(SampleTraining, TreeLstmBeatsTheMajorityClassOnALearnableTask) {
  TempDir dir;
  testing::write_file(dir.file("trees.txt"), learnable_trees(300, 7));
  const samples::TrainResult result = train_learnable(dir.file("trees.txt"), adam(), 4);
  ASSERT_EQ(result.epochs.size(), 4u);
  EXPECT_EQ(result.split.train, 240u);
  EXPECT_EQ(result.split.heldout, 60u);
  const samples::EpochResult &first = result.epochs.front(), &last = result.epochs.back();
  EXPECT_EQ(first.epoch, 1);
  EXPECT_EQ(last.epoch, 4);
  EXPECT_LT(last.train_loss, 0.5 * first.train_loss);
  EXPECT_LT(last.heldout.loss, 0.5 * result.initial.loss);
  EXPECT_EQ(last.heldout.counted, 60);
  EXPECT_GT(last.heldout.accuracy(), last.heldout.majority_accuracy() + 0.2)
      << last.heldout.correct << " of " << last.heldout.counted << ", majority " << last.heldout.majority;
  EXPECT_GT(last.heldout.position_accuracy(), last.heldout.position_majority_accuracy());
  EXPECT_GT(first.gradient_norm, 0.0);
}

TEST(SampleTraining, SgdWithMomentumLowersTheLoss) {
  TempDir dir;
  testing::write_file(dir.file("trees.txt"), learnable_trees(100, 9));
  OptimizerOptions sgd;
  sgd.kind = "sgd";
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  sgd.clip_norm = 5.0f;
  const samples::TrainResult result = train_learnable(dir.file("trees.txt"), sgd, 3);
  EXPECT_LT(result.epochs.back().train_loss, result.epochs.front().train_loss);
  EXPECT_LT(result.epochs.back().heldout.loss, result.initial.loss);
}

// Epoch e's shuffle depends on (seed, e) alone: two epochs in one call, or one and then one more
// with epochs_done = 1, end with the same parameters.
TEST(SampleTraining, EpochsDoneContinuesTheShuffles) {
  const samples::ModelConfig config = small_config(40);
  auto run = [&](bool split_in_two) {
    const std::unique_ptr<samples::SampleModel> sample = samples::make_treelstm(config);
    Engine engine(testing::checked_options("jit"));
    Optimizer optimizer(sample->model(), adam());
    samples::TrainOptions options;
    options.batch = 8;
    options.seed = 5;
    options.epochs = split_in_two ? 1 : 2;
    samples::TrainResult result = samples::train(*sample, engine, optimizer, options);
    if (split_in_two) {
      options.epochs_done = 1;
      result = samples::train(*sample, engine, optimizer, options);
    }
    const std::span<const float> values = sample->model().parameter("W_out").values();
    return std::make_pair(result.epochs.back(), std::vector<float>(values.begin(), values.end()));
  };
  const auto [together, together_values] = run(false);
  const auto [apart, apart_values] = run(true);
  EXPECT_EQ(together.epoch, 2);
  EXPECT_EQ(apart.epoch, 2);
  // Finite, since two NaNs agree in near_relative (a value left unwritten is NaN under verify).
  EXPECT_TRUE(std::isfinite(together.train_loss) && std::isfinite(together.heldout.loss));
  EXPECT_TRUE(near_relative(apart.train_loss, together.train_loss));
  EXPECT_TRUE(near_relative(apart.heldout.loss, together.heldout.loss));
  ASSERT_EQ(apart_values.size(), together_values.size());
  for (size_t i = 0; i < apart_values.size(); ++i) {
    EXPECT_TRUE(std::isfinite(together_values[i])) << i;
    EXPECT_TRUE(near_relative(apart_values[i], together_values[i])) << i;
  }

  // Another seed trains on another order.
  const std::unique_ptr<samples::SampleModel> sample = samples::make_treelstm(config);
  Engine engine(testing::checked_options("jit"));
  Optimizer optimizer(sample->model(), adam());
  samples::TrainOptions options;
  options.batch = 8;
  options.seed = 6;
  options.epochs = 2;
  const double other_order = samples::train(*sample, engine, optimizer, options).epochs.back().train_loss;
  EXPECT_TRUE(std::isfinite(other_order));  // a NaN would differ from anything
  EXPECT_NE(other_order, together.train_loss);
}

TEST(SampleTraining, BadOptionsAreUsageErrors) {
  const std::unique_ptr<samples::SampleModel> sample = samples::make_treelstm(small_config(4));
  Engine engine;
  Optimizer optimizer(sample->model());
  samples::TrainOptions options;
  options.epochs = 0;
  EXPECT_EQ(usage_error([&] { samples::train(*sample, engine, optimizer, options); }),
            "--epochs must be at least 1, got 0");
  options.epochs = 1;
  options.batch = 0;
  EXPECT_EQ(usage_error([&] { samples::train(*sample, engine, optimizer, options); }),
            "--batch must be at least 1, got 0");
}

}  // namespace
}  // namespace edb
