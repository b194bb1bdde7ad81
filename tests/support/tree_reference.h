// Shared pieces of the tree models' reference tests: a small tree file, the word ids the samples
// assign, the oracle engine options, and the two checks every tree model runs against a direct
// Eigen implementation written in its own test.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <functional>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/data/data.h"
#include "samples/models.h"
#include "tests/support/test_support.h"

namespace edb::testing {

Eigen::MatrixXf matrix_of(const Parameter& p);
double neg_log_softmax(const Eigen::VectorXf& logits, int label);

// The oracle: sequential policy, reference executor, checks between stages.
EngineOptions oracle_options();

// A direct implementation: one tree's summed loss from the model's values and the word ids.
using DirectTreeLoss =
    std::function<double(const Model&, const samples::Tree&, const std::vector<int>&)>;

class TreeFileTest : public ::testing::Test {
 protected:
  // Writes `count` generated trees into a temporary file (path_).
  void write_trees(int count, uint64_t seed);
  // Word ids as the samples assign them: first appearance in file order, from 1 (0 is <unk>).
  std::vector<std::vector<int>> word_ids() const;

  // Each tree in its own trace equals the direct loss (1e-5 relative).
  void expect_each_tree_matches(samples::SampleModel& sample, const DirectTreeLoss& direct) const;
  // run_inference over all trees in uneven traces (5, 5, 2), twice, sums the direct losses.
  void expect_batched_run_matches(samples::SampleModel& sample, const DirectTreeLoss& direct) const;

  TempDir dir_;
  std::vector<samples::Tree> trees_;
  std::string path_;
};

}  // namespace edb::testing
