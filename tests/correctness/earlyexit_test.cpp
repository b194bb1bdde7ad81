// The early-exit tagger sample (samples/earlyexit.cpp): its decoding from its own confidence run as
// programs together against each instance alone under the reference executor, with sentences
// leaving at different depths, and that it learns (tags decoded well above the majority tag).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <edbatch/program.h>
#include <edbatch/train.h>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "samples/training.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

samples::ModelConfig exit_config(int64_t limit) {
  samples::ModelConfig config;
  config.limit = limit;
  config.embed = 16;
  config.hidden = 24;
  config.seed = 7;
  return config;
}

// Exits near the confidence threshold (0.8 on average over a sentence's words): their weights scaled
// up so that the words move each sentence's confidence either way, the second and third favouring
// one tag by a bias where its probability is about 0.8 (e^5 / (e^5 + 39)). Half the sentences then
// leave at the first layer and most of the rest at the third.
void sharpen_exits(Model& model) {
  const float bias[] = {0.0f, 4.95f, 6.0f}, scale = 80.0f;
  for (int k = 0; k < 3; ++k) {
    for (float& v : model.parameter("W_out_" + std::to_string(k + 1)).values()) v *= scale;
    model.parameter("b_out_" + std::to_string(k + 1)).values()[0] = bias[k];
  }
}

TEST(EarlyExit, DecodingTogetherMatchesEachInstanceAloneUnderTheReference) {
  const std::unique_ptr<samples::SampleModel> tagger = samples::make_earlyexit(exit_config(40));
  sharpen_exits(tagger->model());
  const size_t n = tagger->instance_count();
  EngineOptions alone_options = testing::checked_options("reference");
  alone_options.policy = "sequential";
  Engine alone(alone_options);
  std::vector<samples::Decoded> expected;
  std::set<int64_t> depths;
  for (size_t i = 0; i < n; ++i) {
    Trace trace(alone);
    std::vector<Program<samples::Decoded>> one;
    one.push_back(tagger->decode(trace, i));
    depths.insert(run_instances(trace, one).rounds);
    expected.push_back(one[0].result());
  }
  ASSERT_GE(depths.size(), 2u) << "every sentence left at layer " << *depths.begin();
  ASSERT_LE(*depths.rbegin(), 4);
  struct Setting { const char* executor; bool cells; int threads; };
  for (const Setting s : {Setting{"reference", true, 1}, Setting{"batched", true, 1}, Setting{"jit", true, 1},
                          Setting{"jit", false, 1}, Setting{"jit", true, 2}}) {
    SCOPED_TRACE(std::string(s.executor) + (s.cells ? " cells" : " inline") + " threads " + std::to_string(s.threads));
    EngineOptions options = testing::checked_options(s.executor, s.threads);
    options.cells = s.cells;
    Engine engine(options);
    Trace trace(engine);
    std::vector<Program<samples::Decoded>> programs;
    for (size_t i = 0; i < n; ++i) programs.push_back(tagger->decode(trace, i));
    const InstanceReport report = run_instances(trace, programs);
    EXPECT_EQ(report.rounds, *depths.rbegin());  // a round per layer of the deepest sentence
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(programs[i].result().correct, expected[i].correct) << i;
      EXPECT_EQ(programs[i].result().total, expected[i].total) << i;
    }
  }
}

// Trained on every exit's gold tags, it tags held-out sentences from its own exits well above the
// majority tag.
TEST(EarlyExit, LearnsToTagFromItsOwnExits) {
  samples::ModelConfig config = exit_config(500);
  config.embed = 32;
  config.hidden = 32;
  const std::unique_ptr<samples::SampleModel> tagger = samples::make_earlyexit(config);
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
  const size_t first = result.split.train, last = tagger->instance_count();
  samples::Decoded decoded;
  Trace trace(engine);
  std::vector<Program<samples::Decoded>> programs;
  for (size_t i = first; i < last; ++i) programs.push_back(tagger->decode(trace, i));
  run_instances(trace, programs);
  for (const Program<samples::Decoded>& p : programs) decoded += p.result();
  // The majority tag of the held-out words.
  const std::vector<samples::TaggedSentence> sentences = samples::generate_tagged(int(last), config.seed);
  std::map<std::string, int64_t> counts;
  int64_t words = 0;
  for (size_t i = first; i < last; ++i)
    for (const std::string& tag : sentences[i].tags) {
      ++counts[tag];
      ++words;
    }
  ASSERT_EQ(words, decoded.total);
  int64_t majority = 0;
  for (const auto& [tag, count] : counts) majority = std::max(majority, count);
  const double accuracy = double(decoded.correct) / double(words), baseline = double(majority) / double(words);
  EXPECT_GT(accuracy, baseline + 0.1) << "tags " << accuracy << ", majority tag " << baseline;
}

}  // namespace
}  // namespace edb
