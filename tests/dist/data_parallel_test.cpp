// Data-parallel training under mpirun: 2 ranks train as 1 rank and as one process do on the same
// global batches (every step's loss, held-out accuracy), the same from run to run, resume on any
// number of ranks, and end every rank with a clear message on a bad configuration or a dead rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using edb::testing::edb_run_binary;
using edb::testing::run_program;
using edb::testing::TempDir;

// Open MPI's mpirun (EDB_MPIEXEC, found by CMake) runs them; these are its arguments before the
// program. Root (as CI runs) needs --allow-run-as-root, and 3 ranks on a 2-core machine
// --oversubscribe.
std::string mpirun(int ranks) {
  return "--oversubscribe --allow-run-as-root -np " + std::to_string(ranks) + " ";
}

// A small generated TreeLSTM workload: 200 trees, 180 trained in 6 global batches of 32 (the last 20),
// 20 held out.
const std::string kSmall = "treelstm --limit 200 --hidden 16 --embed 16 --batch 32 --train --json";

testing::ProgramRun run_ranks(int ranks, const std::string& args) {
  return run_program(EDB_MPIEXEC, mpirun(ranks) + edb_run_binary() + " " + args);
}

nlohmann::json run_json(int ranks, const std::string& args) {
  const testing::ProgramRun o = ranks == 0 ? testing::run_edb(args) : run_ranks(ranks, args);
  EXPECT_EQ(o.status, 0) << ranks << " ranks: " << args << "\n" << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << ranks << " ranks: " << args << "\n" << o.out << o.err;
  return j.is_object() ? j : nlohmann::json::object();
}

std::vector<double> step_losses(const nlohmann::json& j) {
  std::vector<double> losses;
  if (!j.contains("epochs")) return losses;
  for (const nlohmann::json& epoch : j["epochs"])
    for (const nlohmann::json& loss : epoch["step_losses"]) losses.push_back(loss.get<double>());
  return losses;
}

// Every step's loss within 1e-5 relative, and every epoch's held-out accuracy equal.
void expect_same_training(const nlohmann::json& a, const nlohmann::json& b, const std::string& what) {
  const std::vector<double> x = step_losses(a), y = step_losses(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  ASSERT_FALSE(x.empty()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LE(std::abs(x[i] - y[i]), 1e-5 * std::abs(x[i])) << what << ": step " << i << ": " << x[i] << " against " << y[i];
  ASSERT_EQ(a["epochs"].size(), b["epochs"].size()) << what;
  for (size_t e = 0; e < a["epochs"].size(); ++e) {
    EXPECT_EQ(a["epochs"][e]["heldout_accuracy"], b["epochs"][e]["heldout_accuracy"]) << what << ": epoch " << e;
    EXPECT_NEAR(a["epochs"][e]["heldout_loss"].get<double>(), b["epochs"][e]["heldout_loss"].get<double>(),
                1e-5 * std::abs(a["epochs"][e]["heldout_loss"].get<double>()))
        << what << ": epoch " << e;
  }
}

class DataParallelTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(edb_run_binary()))
      GTEST_FAIL() << "edb-run not found at " << edb_run_binary() << " (set EDB_RUN_BINARY)";
  }
};

TEST_F(DataParallelTraining, TwoRanksTrainAsOneRankAndAsOneProcess) {
  const std::string args = kSmall + " --epochs 3";
  const nlohmann::json alone = run_json(0, args), one = run_json(1, args), two = run_json(2, args);
  EXPECT_EQ(one.value("ranks", 0), 1);
  EXPECT_EQ(two.value("ranks", 0), 2);
  EXPECT_EQ(step_losses(two).size(), 3u * 6u);
  expect_same_training(alone, one, "1 rank against one process");
  expect_same_training(one, two, "2 ranks against 1 rank");
  // The loss fell: the run trained, and a test of equal numbers is not one of two runs doing nothing.
  EXPECT_LT(two["epochs"][2].value("train_loss", 0.0), two["epochs"][0].value("train_loss", 0.0));
  for (const nlohmann::json& epoch : two["epochs"]) {
    ASSERT_TRUE(epoch.contains("distributed")) << epoch.dump();
    const nlohmann::json& d = epoch["distributed"];
    EXPECT_EQ(d.value("ranks", 0), 2);
    EXPECT_EQ(d.value("steps", 0), 6);
    // At least the dense parameters' floats and a few table rows every step.
    EXPECT_GT(d.value("bytes_reduced_per_step", 0.0), 4.0 * (16 * 3 * 16 * 3));
    EXPECT_GE(d.value("reduce_wait_ms_per_step", -1.0), 0.0);
  }
}

TEST_F(DataParallelTraining, ThreeRanksWithUnevenSharesTrainAsOneRank) {
  // 32 split 10/11/11 and the last batch of 20 7/6/7 (rows of the table read by one rank only).
  const std::string args = kSmall + " --epochs 2";
  expect_same_training(run_json(1, args), run_json(3, args), "3 ranks against 1 rank");
}

TEST_F(DataParallelTraining, RanksOfTwoThreadsTrainAsOneRankOfOne) {
  // With threads the next step records while this one runs, not while MPI reduces.
  expect_same_training(run_json(1, kSmall + " --epochs 2"), run_json(2, kSmall + " --epochs 2 --threads 2"),
                       "2 ranks x 2 threads against 1 rank x 1 thread");
}

TEST_F(DataParallelTraining, ARankWithAnEmptyShareTrainsAsOneRank) {
  // 18 trees trained in batches of 8: the last batch of 2 leaves one of 3 ranks without an instance,
  // which then reduces empty gradients (no loss, no parameter, no table row).
  const std::string args = "treelstm --limit 20 --hidden 16 --embed 16 --batch 8 --train --json --epochs 2";
  const nlohmann::json one = run_json(1, args), three = run_json(3, args);
  EXPECT_EQ(one.value("train_instances", 0), 18);
  expect_same_training(one, three, "3 ranks, one with an empty share, against 1 rank");
}

TEST_F(DataParallelTraining, DeterministicFromRunToRun) {
  TempDir dir;
  const std::string args = kSmall + " --epochs 2 --save ";
  const nlohmann::json a = run_json(2, args + dir.file("a.model")), b = run_json(2, args + dir.file("b.model"));
  EXPECT_EQ(step_losses(a), step_losses(b));
  EXPECT_EQ(testing::read_file(dir.file("a.model")), testing::read_file(dir.file("b.model")));
  EXPECT_FALSE(testing::read_file(dir.file("a.model")).empty());
}

TEST_F(DataParallelTraining, ResumesOnAnotherNumberOfRanks) {
  TempDir dir;
  const std::string path = dir.file("t.model");
  const nlohmann::json whole = run_json(1, kSmall + " --epochs 2");
  run_json(2, kSmall + " --epochs 1 --save " + path);
  const nlohmann::json rest = run_json(3, kSmall + " --epochs 1 --load " + path);
  ASSERT_EQ(rest["epochs"].size(), 1u);
  EXPECT_EQ(rest["epochs"][0].value("epoch", 0), 2);
  std::vector<double> second = step_losses(whole);
  second.erase(second.begin(), second.begin() + 6);
  const std::vector<double> resumed = step_losses(rest);
  ASSERT_EQ(second.size(), resumed.size());
  for (size_t i = 0; i < second.size(); ++i)
    EXPECT_LE(std::abs(second[i] - resumed[i]), 1e-5 * std::abs(second[i])) << "step " << i;
}

// A failing mpirun: non-zero, within `seconds`, and stderr holding `expected`.
void expect_failure(const std::string& command, const std::string& expected, double seconds = 60) {
  const auto start = std::chrono::steady_clock::now();
  const testing::ProgramRun o = run_program(EDB_MPIEXEC, command);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(o.status, 0) << command << "\n" << o.err;
  EXPECT_NE(o.err.find(expected), std::string::npos) << command << "\n" << o.err;
  EXPECT_LT(took, seconds) << command;
  EXPECT_EQ(o.out, "") << command;
}

TEST_F(DataParallelTraining, ABatchSmallerThanTheRanksIsAnErrorOnEveryRank) {
  expect_failure(mpirun(3) + edb_run_binary() + " " + kSmall + " --batch 2",
                 "rank 0 of 3: --batch 2 is the global batch, split across 3 ranks");
}

TEST_F(DataParallelTraining, FewerTrainingTreesThanRanksIsAnError) {
  expect_failure(mpirun(3) + edb_run_binary() + " treelstm --limit 4 --holdout 0.5 --batch 8 --train --json",
                 "2 training instances cannot be split across 3 ranks");
}

TEST_F(DataParallelTraining, MismatchedOptionsBetweenRanksNameTheRank) {
  const std::string base = edb_run_binary() + " " + kSmall;
  // Same model shapes, another learning rate on rank 1: the command lines differ.
  expect_failure(mpirun(1) + base + " --lr 0.01 : -np 1 " + base + " --lr 0.02",
                 "the command lines differ between ranks: rank 1 has");
  // Another seed: other data, so another vocabulary and table size.
  expect_failure(mpirun(1) + base + " --seed 1 : -np 1 " + base + " --seed 2", "rank 1 has");
}

TEST_F(DataParallelTraining, ARankThatDiesEndsEveryRank) {
  TempDir dir;
  const std::string path = dir.file("never.model");
  const std::string args = " treelstm --limit 2000 --train --json --epochs 1000 --save " + path;
  // Rank 1 is killed two seconds into training; rank 0 must not wait for it forever, nor save.
  // mpirun names the rank that ended first: "Process name: [[JOB,1],1]", rank 1 of job step 1.
  const std::string killer = "bash -c '\"$0\" \"$@\" & p=$!; sleep 2; kill -9 $p; wait $p' ";
  expect_failure(mpirun(1) + edb_run_binary() + args + " : -np 1 " + killer + edb_run_binary() + args, ",1],1]", 60);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(DataParallelTraining, InferenceUnderSeveralRanksIsRefused) {
  expect_failure(mpirun(2) + edb_run_binary() + " treelstm --limit 20", "only --train runs across ranks");
}

}  // namespace
}  // namespace edb
