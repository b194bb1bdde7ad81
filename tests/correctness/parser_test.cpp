// The parser sample (samples/parser.cpp): its gold transitions, its decoding from its own
// predictions run as programs together against each instance alone under the reference executor,
// one-at-a-time decoding, and that it learns (heads found well above attaching to a neighbour).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <edbatch/train.h>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "samples/training.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

samples::ModelConfig parser_config(int64_t limit) {
  samples::ModelConfig config;
  config.limit = limit;
  config.embed = 24;
  config.hidden = 32;
  config.seed = 5;
  return config;
}

// Every generated parse is a projective tree with one root, and its gold transitions are 2n - 1.
TEST(Parser, GeneratedParsesAreProjectiveTrees) {
  const std::vector<samples::TaggedSentence> parses = samples::generate_parses(300, 9);
  size_t longest = 0, total = 0;
  for (const samples::TaggedSentence& s : parses) {
    longest = std::max(longest, s.words.size());
    total += s.words.size();
  }
  EXPECT_GE(longest, 12u);
  EXPECT_GT(double(total) / 300.0, 4.0);
  const std::unique_ptr<samples::SampleModel> parser = samples::make_parser(parser_config(40));
  Engine engine(testing::checked_options("jit"));
  for (size_t i = 0; i < parser->instance_count(); ++i) {
    Trace trace(engine);
    const std::vector<samples::Prediction> steps = parser->record_predictions(trace, i);
    const samples::Decoded decoded = [&] {
      std::vector<Program<samples::Decoded>> one;
      one.push_back(parser->decode(trace, i));
      run_instances(trace, one);
      return one[0].result();
    }();
    EXPECT_EQ(int64_t(steps.size()), 2 * decoded.total - 1) << i;
  }
}

// Batched decoding: the same heads per instance as each instance alone under the reference
// executor, under every executor, at 1 and 2 threads, cells on and off.
TEST(Parser, DecodingTogetherMatchesEachInstanceAloneUnderTheReference) {
  const std::unique_ptr<samples::SampleModel> parser = samples::make_parser(parser_config(48));
  const size_t n = parser->instance_count();
  EngineOptions alone_options = testing::checked_options("reference");
  alone_options.policy = "sequential";
  Engine alone(alone_options);
  std::vector<samples::Decoded> expected;
  int64_t most_rounds = 0;
  for (size_t i = 0; i < n; ++i) {
    Trace trace(alone);
    std::vector<Program<samples::Decoded>> one;
    one.push_back(parser->decode(trace, i));
    most_rounds = std::max(most_rounds, run_instances(trace, one).rounds);
    expected.push_back(one[0].result());
  }
  struct Setting { const char* executor; bool cells; int threads; };
  for (const Setting s : {Setting{"reference", true, 1}, Setting{"batched", true, 1}, Setting{"jit", true, 1},
                          Setting{"jit", false, 1}, Setting{"jit", true, 2}}) {
    SCOPED_TRACE(std::string(s.executor) + (s.cells ? " cells" : " inline") + " threads " + std::to_string(s.threads));
    EngineOptions options = testing::checked_options(s.executor, s.threads);
    options.cells = s.cells;
    Engine engine(options);
    Trace trace(engine);
    std::vector<Program<samples::Decoded>> programs;
    for (size_t i = 0; i < n; ++i) programs.push_back(parser->decode(trace, i));
    const InstanceReport report = run_instances(trace, programs);
    EXPECT_EQ(report.rounds, most_rounds);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(programs[i].result().correct, expected[i].correct) << i;
      EXPECT_EQ(programs[i].result().total, expected[i].total) << i;
    }
  }
}

// run_decoding together and one at a time: the same heads; one at a time runs a round per
// instance's choice, together a round per trace's longest.
TEST(Parser, RunDecodingTogetherAndOneAtATime) {
  const std::unique_ptr<samples::SampleModel> parser = samples::make_parser(parser_config(64));
  samples::RunOptions options;
  options.batch = 32;
  options.repeat = 1;
  Engine together_engine(testing::checked_options("jit")), alone_engine(testing::checked_options("jit"));
  const samples::DecodeResult together = samples::run_decoding(*parser, together_engine, options, false);
  const samples::DecodeResult alone = samples::run_decoding(*parser, alone_engine, options, true);
  EXPECT_EQ(together.decoded.correct, alone.decoded.correct);
  EXPECT_EQ(together.decoded.total, alone.decoded.total);
  EXPECT_EQ(together.stats.nodes, alone.stats.nodes);
  EXPECT_LT(together.rounds * 5, alone.rounds);
  EXPECT_LT(together.stats.batches * 5, alone.stats.batches);
  // Models that do not decode say so.
  samples::ModelConfig config;
  config.limit = 2;
  const std::unique_ptr<samples::SampleModel> tagger = samples::make_bilstm(config);
  Engine engine;
  EXPECT_NE(testing::usage_error([&] { samples::run_decoding(*tagger, engine, options, false); }).find("--decode is for"),
            std::string::npos);
}

// Trained on gold transitions, it parses held-out sentences from its own predictions well above
// attaching each word to a neighbour.
TEST(Parser, LearnsToParseFromItsOwnPredictions) {
  samples::ModelConfig config = parser_config(600);
  const std::unique_ptr<samples::SampleModel> parser = samples::make_parser(config);
  Engine engine(testing::checked_options("jit"));
  OptimizerOptions adam;
  adam.kind = "adam";
  adam.learning_rate = 0.01f;
  Optimizer optimizer(parser->model(), adam);
  samples::TrainOptions options;
  options.epochs = 4;
  options.batch = 32;
  options.holdout = 0.2;
  const samples::TrainResult result = samples::train(*parser, engine, optimizer, options);
  const size_t first = result.split.train, last = parser->instance_count();

  samples::Decoded decoded;
  Trace trace(engine);
  std::vector<Program<samples::Decoded>> programs;
  for (size_t i = first; i < last; ++i) programs.push_back(parser->decode(trace, i));
  run_instances(trace, programs);
  for (const Program<samples::Decoded>& p : programs) decoded += p.result();
  // The baselines: each word's head is the word after it (the last word the root), or before it.
  const std::vector<samples::TaggedSentence> parses = samples::generate_parses(int(last), config.seed);
  int64_t next = 0, previous = 0, words = 0;
  for (size_t i = first; i < last; ++i) {
    const std::vector<std::string>& heads = parses[i].tags;
    const int n = int(heads.size());
    for (int w = 0; w < n; ++w) {
      next += std::stoi(heads[size_t(w)]) == (w + 1 < n ? w + 2 : 0);
      previous += std::stoi(heads[size_t(w)]) == w;  // w is the 1-based previous word, 0 for the first
    }
    words += n;
  }
  ASSERT_EQ(words, decoded.total);
  const double accuracy = double(decoded.correct) / double(words);
  const double baseline = double(std::max(next, previous)) / double(words);
  EXPECT_GT(accuracy, baseline + 0.2) << "heads " << accuracy << ", best neighbour baseline " << baseline;
}

TEST(Parser, HeadsThatAreNotAProjectiveTreeAreUsageErrors) {
  testing::TempDir dir;
  auto error = [&](const std::string& text) {
    testing::write_file(dir.file("p.txt"), text);
    samples::ModelConfig config = parser_config(-1);
    config.data_path = dir.file("p.txt");
    return testing::usage_error([&] { samples::make_parser(config); });
  };
  EXPECT_EQ(error("w1|2 w2|0\n"), "");
  EXPECT_NE(error("w1|2 w2|0 w3|9\n").find("sentence 1 of " + dir.file("p.txt") + ": head '9' is not"),
            std::string::npos);
  EXPECT_NE(error("w1|2 w2|0\nw1|0 w2|0\n").find("sentence 2"), std::string::npos);
  EXPECT_NE(error("w1|3 w2|4 w3|0 w4|3\n").find("not one projective tree"), std::string::npos);  // crossing arcs
  EXPECT_NE(error("w1|x w2|0\n").find("head 'x'"), std::string::npos);
}

}  // namespace
}  // namespace edb
