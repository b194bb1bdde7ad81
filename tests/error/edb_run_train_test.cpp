// edb-run --train: the JSON report's fields, a falling loss, clear errors for bad training flags,
// and --save then --load continuing exactly where a longer run would be.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using edb::testing::edb_run_binary;
using edb::testing::leftovers;
using edb::testing::one_error_line;
using edb::testing::run_edb;
using edb::testing::TempDir;



// A small generated TreeLSTM workload: 60 trees, 54 trained and 6 held out, batches of 16.
const std::string kSmall = "treelstm --limit 60 --hidden 8 --embed 8 --batch 16 --train --json";

nlohmann::json run_json(const std::string& args) {
  const testing::ProgramRun o = run_edb(args);
  EXPECT_EQ(o.status, 0) << args << "\n" << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << args << "\n" << o.out;
  return j.is_object() ? j : nlohmann::json::object();
}


class EdbRunTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(edb_run_binary()))
      GTEST_FAIL() << "edb-run not found at " << edb_run_binary() << " (set EDB_RUN_BINARY)";
  }
};

TEST_F(EdbRunTrain, JsonReportsEveryEpochAndTheLossFalls) {
  const nlohmann::json j = run_json(kSmall + " --epochs 3");
  EXPECT_EQ(j.value("model", ""), "treelstm");
  EXPECT_EQ(j.value("batch", 0), 16);
  EXPECT_EQ(j.value("train_instances", 0), 54);
  EXPECT_EQ(j.value("heldout_instances", 0), 6);
  EXPECT_EQ(j.value("accuracy_unit", ""), "root");
  ASSERT_TRUE(j.contains("optimizer"));
  EXPECT_EQ(j["optimizer"].value("kind", ""), "adam");
  EXPECT_FLOAT_EQ(j["optimizer"].value("learning_rate", 0.0f), 0.01f);
  ASSERT_TRUE(j.contains("initial"));
  EXPECT_GT(j["initial"].value("heldout_loss", 0.0), 0.0);
  ASSERT_TRUE(j.contains("epochs") && j["epochs"].is_array());
  ASSERT_EQ(j["epochs"].size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    const nlohmann::json& epoch = j["epochs"][e];
    SCOPED_TRACE(e);
    EXPECT_EQ(epoch.value("epoch", 0), int(e) + 1);
    for (const char* field : {"train_loss", "heldout_loss", "heldout_accuracy", "majority_accuracy",
                              "heldout_position_accuracy", "majority_position_accuracy", "instances_per_sec",
                              "forward_ms", "backward_ms", "optimizer_ms", "backward_over_forward", "gradient_norm"})
      EXPECT_TRUE(epoch.contains(field) && epoch[field].is_number()) << field;
    for (const char* fraction : {"heldout_accuracy", "majority_accuracy"}) {
      EXPECT_GE(epoch.value(fraction, -1.0), 0.0) << fraction;
      EXPECT_LE(epoch.value(fraction, 2.0), 1.0) << fraction;
    }
    EXPECT_GT(epoch.value("instances_per_sec", 0.0), 0.0);
    EXPECT_GT(epoch.value("forward_ms", 0.0), 0.0);
    EXPECT_GT(epoch.value("backward_ms", 0.0), 0.0);
    EXPECT_GT(epoch.value("backward_over_forward", 0.0), 0.0);
    // The engine's caches after the epoch, each within its bound; the signatures hold this model's types.
    ASSERT_TRUE(epoch.contains("caches") && epoch["caches"].is_object());
    for (const auto& [name, cache] : epoch["caches"].items()) {
      if (cache.value("max_entries", 0) > 0) {
        EXPECT_LE(cache.value("entries", 0), cache.value("max_entries", 0)) << name;
      }
      if (cache.value("max_bytes", 0) > 0) {
        EXPECT_LE(cache.value("bytes", 0), cache.value("max_bytes", 0)) << name;
      }
    }
    EXPECT_GT(epoch["caches"]["signatures"].value("entries", 0), 0);
    EXPECT_EQ(epoch["caches"]["cell_records"].value("max_entries", 0), 1024);
  }
  EXPECT_LT(j["epochs"][2].value("train_loss", 1e9), j["epochs"][0].value("train_loss", 0.0));
  EXPECT_LT(j["epochs"][2].value("heldout_loss", 1e9), j["initial"].value("heldout_loss", 0.0));
}

TEST_F(EdbRunTrain, TableNamesTheAccuracyAndTheMajority) {
  const testing::ProgramRun o = run_edb("bilstm --limit 20 --hidden 8 --embed 8 --train --epochs 1 --optimizer sgd");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("optimizer sgd, lr 0.1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("18 training, 2 held-out instances"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("word accuracy"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| epoch | train loss | held-out loss | word acc | majority |"), std::string::npos) << o.out;
}

TEST_F(EdbRunTrain, HelpListsTheTrainingFlags) {
  const testing::ProgramRun o = run_edb("--help");
  ASSERT_EQ(o.status, 0);
  for (const char* flag : {"--train", "--epochs N", "--optimizer NAME", "--lr X", "--momentum X", "--clip X",
                           "--holdout F", "--save PATH", "--load PATH"})
    EXPECT_NE(o.out.find("  " + std::string(flag)), std::string::npos) << flag;
}

TEST_F(EdbRunTrain, BadTrainingFlagsAreOneClearLine) {
  EXPECT_EQ(one_error_line("treelstm --epochs 2"), "edb-run: --epochs is for training; add --train");
  EXPECT_EQ(one_error_line("treelstm --save m.bin"), "edb-run: --save is for training; add --train");
  EXPECT_EQ(one_error_line("treelstm --train --repeat 2"),
            "edb-run: --repeat measures inference; with --train use --epochs");
  EXPECT_EQ(one_error_line("treelstm --train --epochs 0"), "edb-run: --epochs must be in [1, 1000000], got 0");
  EXPECT_EQ(one_error_line("treelstm --train --lr abc"), "edb-run: --lr expects a number, got 'abc'");
  EXPECT_EQ(one_error_line("treelstm --train --lr 0"), "edb-run: --lr must be above 0, got 0");
  EXPECT_EQ(one_error_line("treelstm --train --lr -1"), "edb-run: --lr must be in [0, 1e+06], got -1");
  EXPECT_EQ(one_error_line("treelstm --train --lr nan"), "edb-run: --lr expects a number, got 'nan'");
  EXPECT_EQ(one_error_line("treelstm --train --optimizer rmsprop"),
            "edb-run: --optimizer takes sgd or adam, not 'rmsprop'");
  EXPECT_EQ(one_error_line("treelstm --train --momentum 0.9"), "edb-run: --momentum is for --optimizer sgd");
  EXPECT_EQ(one_error_line("treelstm --train --optimizer sgd --momentum 1"), "edb-run: --momentum must be below 1, got 1");
  EXPECT_EQ(one_error_line("treelstm --train --clip -2"), "edb-run: --clip must be in [0, 1e+30], got -2");
  EXPECT_EQ(one_error_line("treelstm --train --holdout 1"), "edb-run: --holdout must be below 1, got 1");
  EXPECT_EQ(one_error_line("treelstm --train --holdout 0.5 --limit 1"),
            "--holdout 0.5 leaves no training instance of 1");
  TempDir dir;
  EXPECT_NE(one_error_line("treelstm --train --save " + dir.file("missing/m.bin")).find("--save: cannot write '"),
            std::string::npos);
}

// Two trainings saving to one path at once (--load D/m --save D/m, different --lr), three at a time,
// five times: all exit 0 (before, one in two or three failed renaming PATH.tmp, and the files could
// be a failed saver's), what they leave loads as one pair, and nothing is left behind.
TEST_F(EdbRunTrain, TrainingsSavingToOnePathAtOnceAllSucceed) {
  TempDir dir;
  const std::string model = dir.file("m");
  const std::string base = "treelstm --limit 8 --hidden 4 --embed 4 --batch 4 --train --json --epochs 1";
  ASSERT_EQ(run_edb(base + " --save " + model).status, 0);
  for (int round = 0; round < 5; ++round) {
    std::vector<testing::ProgramRun> runs(3);
    std::vector<std::thread> trainings;
    for (size_t i = 0; i < runs.size(); ++i)
      trainings.emplace_back([&, i] {
        runs[i] = run_edb(base + " --load " + model + " --save " + model + " --lr 0.0" + std::to_string(i + 1));
      });
    for (std::thread& t : trainings) t.join();
    for (const testing::ProgramRun& run : runs) EXPECT_EQ(run.status, 0) << "round " << round << ": " << run.err;
    const testing::ProgramRun after = run_edb(base + " --load " + model);
    EXPECT_EQ(after.status, 0) << "round " << round << ": " << after.err;
    EXPECT_EQ(leftovers(dir.path()), std::vector<std::string>{}) << "round " << round;
  }
}

// Two epochs in one run, or one epoch saved and loaded and one more: the same second epoch (its
// shuffle is seeded by the epoch number, which the loaded optimizer's step count gives back) and
// the same saved model, byte for byte.
TEST_F(EdbRunTrain, SaveThenLoadContinuesTheRun) {
  TempDir dir;
  const nlohmann::json together = run_json(kSmall + " --epochs 2 --save " + dir.file("together.model"));
  const nlohmann::json first = run_json(kSmall + " --epochs 1 --save " + dir.file("first.model"));
  ASSERT_TRUE(std::filesystem::exists(dir.file("first.model.optimizer")));
  const nlohmann::json second =
      run_json(kSmall + " --epochs 1 --load " + dir.file("first.model") + " --save " + dir.file("second.model"));
  ASSERT_EQ(together["epochs"].size(), 2u);
  ASSERT_EQ(second["epochs"].size(), 1u);
  EXPECT_EQ(second.value("loaded", ""), dir.file("first.model"));
  EXPECT_EQ(second["epochs"][0].value("epoch", 0), 2);
  EXPECT_TRUE(testing::near_relative(second["epochs"][0].value("train_loss", 0.0),
                                     together["epochs"][1].value("train_loss", 1.0)));
  EXPECT_TRUE(testing::near_relative(second["epochs"][0].value("heldout_loss", 0.0),
                                     together["epochs"][1].value("heldout_loss", 1.0)));
  // The loaded model starts where the first run ended.
  EXPECT_TRUE(testing::near_relative(second["initial"].value("heldout_loss", 0.0),
                                     first["epochs"][0].value("heldout_loss", 1.0)));
  EXPECT_EQ(testing::read_file(dir.file("second.model")), testing::read_file(dir.file("together.model")));

  // Without the optimizer's file the model still loads, the optimizer starts fresh, and stderr says so.
  std::filesystem::remove(dir.file("first.model.optimizer"));
  const testing::ProgramRun fresh = run_edb(kSmall + " --load " + dir.file("first.model"));
  EXPECT_EQ(fresh.status, 0) << fresh.err;
  EXPECT_NE(fresh.err.find("no optimizer state at " + dir.file("first.model.optimizer")), std::string::npos)
      << fresh.err;
  const nlohmann::json fresh_json = nlohmann::json::parse(fresh.out, nullptr, false);
  ASSERT_TRUE(fresh_json.is_object()) << fresh.out;
  EXPECT_EQ(fresh_json["epochs"][0].value("epoch", 0), 1);

  // A saved optimizer's options hold; a different --clip is refused rather than ignored.
  run_json(kSmall + " --save " + dir.file("clipped.model") + " --clip 5");
  EXPECT_EQ(one_error_line(kSmall + " --load " + dir.file("clipped.model") + " --clip 1"),
            "edb-run: --clip 1 differs from 5 in " + dir.file("clipped.model") +
                ".optimizer (only --lr can change when loading)");
  const nlohmann::json kept = run_json(kSmall + " --load " + dir.file("clipped.model"));
  EXPECT_FLOAT_EQ(kept["optimizer"].value("clip", 0.0f), 5.0f);
}

// Inference after --load runs with the loaded parameters: the trained model's loss, not a fresh one's.
TEST_F(EdbRunTrain, InferenceLoadsTheModel) {
  TempDir dir;
  run_json(kSmall + " --epochs 2 --save " + dir.file("m.model"));
  const std::string inference = "treelstm --limit 60 --hidden 8 --embed 8 --repeat 1 --json";
  const nlohmann::json fresh = run_json(inference);
  const nlohmann::json loaded = run_json(inference + " --load " + dir.file("m.model"));
  EXPECT_LT(loaded.value("loss", 1e9), fresh.value("loss", 0.0));
}

// A model saved after training reads other data with the training's ids (PATH.vocab): inference
// on the next instances of a generated tagger and lattice workload (other words, so another
// vocabulary) runs, and beats a fresh model's loss there. Without PATH.vocab (a save of before)
// the vocabularies come from the data, whose sizes the model's tables do not have: a clear error.
// A tag the training never saw is an error naming it; a damaged PATH.vocab one naming its line.
TEST_F(EdbRunTrain, LoadReadsOtherDataWithTheSavedVocabularies) {
  TempDir dir;
  for (const std::string model : {"bilstm", "latticelstm"}) {
    SCOPED_TRACE(model);
    const std::string sizes = model + " --hidden 8 --embed 8";
    const std::string saved = dir.file(model + ".model");
    run_json(sizes + " --limit 120 --batch 16 --train --epochs 3 --json --save " + saved);
    ASSERT_TRUE(std::filesystem::exists(saved + ".vocab"));
    const std::string other = sizes + " --skip 120 --limit 60 --repeat 1 --json";
    const nlohmann::json loaded = run_json(other + " --load " + saved);
    const nlohmann::json fresh = run_json(other);
    EXPECT_LT(loaded.value("loss", 1e9), fresh.value("loss", 0.0));
  }
  const std::string saved = dir.file("bilstm.model");
  std::filesystem::rename(saved + ".vocab", dir.file("kept.vocab"));
  EXPECT_NE(one_error_line("bilstm --hidden 8 --embed 8 --skip 120 --limit 60 --load " + saved).find("'E' is 8x"),
            std::string::npos);
  std::filesystem::rename(dir.file("kept.vocab"), saved + ".vocab");
  testing::write_file(dir.file("tagged.txt"), "w1|T1 w2|NEWTAG\n");
  EXPECT_EQ(one_error_line("bilstm --hidden 8 --embed 8 --data " + dir.file("tagged.txt") + " --load " + saved),
            "edb-run bilstm: tag 'NEWTAG' is not one of the 40 the model was trained with (" + saved +
                ".vocab)");
  testing::write_file(saved + ".vocab", "edbatch vocabularies 1\nwords 2\n<unk>\n");
  EXPECT_EQ(one_error_line("bilstm --hidden 8 --embed 8 --load " + saved),
            "edb-run: --load: " + saved + ".vocab:4:1: expected entry 2 of 2 of vocabulary 'words', found end of file");
}

}  // namespace
}  // namespace edb
