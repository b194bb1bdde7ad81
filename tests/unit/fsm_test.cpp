// The learned (fsm) policy: training is deterministic and never worse than greedy on its training
// traces, the policy file round-trips and refuses damaged or wrong files, unseen states fall back
// to greedy and are counted.
#include <gtest/gtest.h>

#include <memory>

#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::usage_error;

using testing::read_file;
using testing::TempDir;
using testing::write_file;

EngineOptions fsm_options(const std::string& file = "") {
  EngineOptions o;
  o.policy = "fsm";
  o.executor = "reference";
  o.verify = true;
  o.policy_file = file;
  // Node by node: with cells, small TreeLSTM traces leave the policy no real decision to make.
  o.cells = false;
  return o;
}

std::unique_ptr<samples::SampleModel> small_treelstm() {
  samples::ModelConfig config;
  config.limit = 24;
  config.embed = 8;
  config.hidden = 8;
  config.seed = 5;
  return samples::make_treelstm(config);
}

PolicyTraining quick() {
  PolicyTraining t;
  t.episodes = 120;
  t.seed = 7;
  return t;
}

// Batches of one pass of `batch`-instance traces under the engine's policy.
int64_t batches_of(samples::SampleModel& model, Engine& engine, int batch) {
  samples::RunOptions run;
  run.batch = batch;
  run.repeat = 1;
  return samples::run_inference(model, engine, run).stats.batches;
}

TEST(FsmPolicy, TrainingIsDeterministicAndKeepsTheBestTable) {
  TempDir dir;
  auto model = small_treelstm();
  Engine first(fsm_options()), second(fsm_options());
  const PolicyProgress a = samples::train_policy(*model, first, 3, 8, quick());
  const PolicyProgress b = samples::train_policy(*model, second, 3, 8, quick());
  EXPECT_EQ(a.best_batches, b.best_batches);
  EXPECT_EQ(a.episode, b.episode);
  first.save_policy(dir.file("a.json"));
  second.save_policy(dir.file("b.json"));
  EXPECT_EQ(read_file(dir.file("a.json")), read_file(dir.file("b.json")));
  EXPECT_GE(a.best_batches, a.lower_bound);
  EXPECT_GT(a.lower_bound, 0);
}

TEST(FsmPolicy, FileRoundTripSchedulesAlike) {
  TempDir dir;
  auto model = small_treelstm();
  Engine trained(fsm_options());
  samples::train_policy(*model, trained, 3, 8, quick());
  trained.save_policy(dir.file("policy.json"));
  Engine loaded(fsm_options(dir.file("policy.json")));
  EXPECT_EQ(batches_of(*model, trained, 8), batches_of(*model, loaded, 8));
  EXPECT_EQ(trained.stats().policy_unseen, loaded.stats().policy_unseen);
  EXPECT_GT(loaded.stats().policy_decisions, 0);
}

// Untrained, every step is greedy's choice, so the schedules are greedy's.
TEST(FsmPolicy, UntrainedTableFallsBackToGreedyEveryDecision) {
  auto model = small_treelstm();
  Engine fsm(fsm_options());
  EngineOptions greedy_options = fsm_options();
  greedy_options.policy = "greedy";
  Engine greedy(greedy_options);
  EXPECT_EQ(batches_of(*model, fsm, 8), batches_of(*model, greedy, 8));
  EXPECT_GT(fsm.stats().policy_decisions, 0);
  EXPECT_EQ(fsm.stats().policy_unseen, fsm.stats().policy_decisions);
}

// Scheduling traces whose types the table never saw (another hidden size) leaves the table as
// trained: only training adds type names, so a policy serving many structures keeps its size.
TEST(FsmPolicy, SchedulingUnseenTypesLeavesTheTableAsTrained) {
  TempDir dir;
  auto model = small_treelstm();
  Engine engine(fsm_options());
  samples::train_policy(*model, engine, 3, 8, quick());
  engine.save_policy(dir.file("trained.json"));
  samples::ModelConfig config;
  config.limit = 24;
  config.embed = 8;
  config.hidden = 12;
  const int64_t unseen_before = engine.stats().policy_unseen;
  batches_of(*samples::make_treelstm(config), engine, 8);
  EXPECT_GT(engine.stats().policy_unseen, unseen_before);  // its states were new to the table
  engine.save_policy(dir.file("after.json"));
  EXPECT_EQ(read_file(dir.file("after.json")), read_file(dir.file("trained.json")));
  // And the trained traces still schedule as the table says.
  Engine loaded(fsm_options(dir.file("after.json")));
  EXPECT_EQ(batches_of(*model, loaded, 8), batches_of(*model, engine, 8));
}

TEST(FsmPolicy, DamagedOrWrongFilesAreClearErrors) {
  TempDir dir;
  auto model = small_treelstm();
  Engine trained(fsm_options());
  samples::train_policy(*model, trained, 2, 8, quick());
  const std::string good = dir.file("good.json");
  trained.save_policy(good);
  const std::string text = read_file(good);
  auto load_error = [&](const std::string& contents) {
    const std::string path = dir.file("bad.json");
    write_file(path, contents);
    return usage_error([&] { Engine e(fsm_options(path)); });
  };
  const std::string prefix = "edb::Engine: policy file '" + dir.file("bad.json") + "': ";
  EXPECT_EQ(load_error("{not json"), prefix + "not valid JSON (byte 3)");
  EXPECT_EQ(load_error("{\"format\": \"something else\"}"), prefix + "not an edbatch-fsm-policy file");
  std::string damaged = text;
  const size_t types = damaged.find("\"types\"");
  ASSERT_NE(types, std::string::npos);
  const size_t letter = damaged.find("affine", types);  // a signature in the type list
  ASSERT_NE(letter, std::string::npos);
  damaged[letter] = 'A';
  EXPECT_EQ(load_error(damaged), prefix + "checksum mismatch (the file is damaged)");
  std::string version = text;
  version.replace(version.find("\"version\": 1"), 12, "\"version\": 9");
  EXPECT_EQ(load_error(version), prefix + "format version 9, this build reads version 1");
  EXPECT_EQ(usage_error([&] { Engine e(fsm_options(dir.file("missing.json"))); }),
            "edb::Engine: policy file '" + dir.file("missing.json") + "': does not exist");
  EngineOptions not_fsm = fsm_options(good);
  not_fsm.policy = "greedy";
  EXPECT_EQ(usage_error([&] { Engine e(not_fsm); }), "edb::Engine: a policy file is for the fsm and learned policies, not 'greedy'");
  not_fsm.policy_file = "";
  Engine greedy(not_fsm);
  EXPECT_EQ(usage_error([&] { samples::train_policy(*model, greedy, 1, 4, quick()); }),
            "edb::Engine::train_policy(): the engine's policy is 'greedy', not fsm or learned");
}

TEST(FsmPolicy, EvaluatedTracesCannotBeLearnedFrom) {
  auto model = small_treelstm();
  Engine engine(fsm_options());
  Trace trace(engine);
  model->record_loss(trace, 0).value();
  Trace* traces[] = {&trace};
  EXPECT_EQ(usage_error([&] { engine.train_policy(traces); }),
            "edb::Engine::train_policy(): a trace was already evaluated; record traces and train before running them");
}

}  // namespace
}  // namespace edb
