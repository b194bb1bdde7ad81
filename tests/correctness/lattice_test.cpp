// The Lattice LSTM and Lattice GRU samples through the engine equal a direct Eigen implementation
// written here, independently of the IR, from the models' own parameter values.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <fstream>

#include "samples/data/data.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tests/support/test_support.h"
#include "tests/support/tree_reference.h"

namespace edb {
namespace {

using Eigen::MatrixXf;
using Eigen::VectorXf;
using testing::matrix_of;

VectorXf sigmoid(const VectorXf& x) { return (1.0f + (-x.array()).exp()).inverse().matrix(); }
VectorXf tanh_of(const VectorXf& x) { return x.array().tanh().matrix(); }

VectorXf row_of(const LookupTable& table, int id) {
  return Eigen::Map<const VectorXf>(table.values().data() + size_t(id) * table.dim(), table.dim());
}

// Ids as the samples assign them: first appearance in file order; chars and words from 1 (0 is
// <unk>), labels from 0.
struct Ids {
  std::vector<std::vector<int>> chars, words, labels;
  int label_count = 0;
};

Ids ids_of(const std::vector<samples::Lattice>& lattices) {
  samples::Vocabulary chars, words, labels;
  Ids ids;
  for (const samples::Lattice& lattice : lattices) {
    auto& c = ids.chars.emplace_back();
    auto& l = ids.labels.emplace_back();
    auto& w = ids.words.emplace_back();
    for (size_t j = 0; j < lattice.chars.size(); ++j) {
      c.push_back(chars.add(lattice.chars[j]));
      l.push_back(labels.add(lattice.labels[j]) - 1);
    }
    for (const samples::LatticeArc& arc : lattice.words) w.push_back(words.add(arc.word));
  }
  ids.label_count = labels.size() - 1;
  return ids;
}

// The pieces both models share: embeddings, the arc gate, the output layer, the walk over chars.
struct Shared {
  LookupTable chars, words;
  MatrixXf w_gate, u_gate, b_gate, w_out, b_out;
  explicit Shared(const Model& model)
      : chars(model.lookup("E_char")), words(model.lookup("E_word")),
        w_gate(matrix_of(model.parameter("W_gate"))), u_gate(matrix_of(model.parameter("U_gate"))),
        b_gate(matrix_of(model.parameter("b_gate"))), w_out(matrix_of(model.parameter("W_out"))),
        b_out(matrix_of(model.parameter("b_out"))) {}
  // g_w * state with g_w = sigmoid(W_gate x_end + U_gate state + b_gate).
  VectorXf gated(const VectorXf& x_end, const VectorXf& state) const {
    return sigmoid(w_gate * x_end + u_gate * state + b_gate).cwiseProduct(state);
  }
  double loss(const VectorXf& h, int label) const { return testing::neg_log_softmax(w_out * h + b_out, label); }
};

// Lattice LSTM, written straight from the equations in samples/lattice.cpp's banner.
double direct_lstm_loss(const Model& model, const samples::Lattice& lattice, const std::vector<int>& chars,
                        const std::vector<int>& words, const std::vector<int>& labels, int hidden) {
  const Shared shared(model);
  const MatrixXf w = matrix_of(model.parameter("W_char")), u = matrix_of(model.parameter("U_char")),
                 b = matrix_of(model.parameter("b_char"));
  const MatrixXf w_word = matrix_of(model.parameter("W_word")), u_word = matrix_of(model.parameter("U_word")),
                 b_word = matrix_of(model.parameter("b_word"));
  const int n = hidden;
  const size_t length = lattice.chars.size();
  std::vector<VectorXf> hs(length), cs(length), word_c(lattice.words.size());
  double loss = 0;
  for (size_t j = 0; j < length; ++j) {
    const VectorXf x = row_of(shared.chars, chars[j]);
    const VectorXf h_prev = j == 0 ? VectorXf::Zero(n) : hs[j - 1];
    const VectorXf c_prev = j == 0 ? VectorXf::Zero(n) : cs[j - 1];
    const VectorXf gates = w * x + u * h_prev + b;
    const VectorXf own = sigmoid(gates.segment(0, n)).cwiseProduct(tanh_of(gates.segment(3 * n, n)));
    VectorXf arcs = VectorXf::Zero(n);
    int incoming = 0;
    for (size_t a = 0; a < lattice.words.size(); ++a) {
      if (size_t(lattice.words[a].end) != j) continue;
      arcs += shared.gated(x, word_c[a]);
      ++incoming;
    }
    if (incoming == 0) {
      cs[j] = sigmoid(gates.segment(n, n)).cwiseProduct(c_prev) + own;
    } else {
      cs[j] = (own + arcs) / float(1 + incoming);
    }
    hs[j] = sigmoid(gates.segment(2 * n, n)).cwiseProduct(tanh_of(cs[j]));
    for (size_t a = 0; a < lattice.words.size(); ++a) {
      if (size_t(lattice.words[a].start) != j) continue;
      const VectorXf word_gates = w_word * row_of(shared.words, words[a]) + u_word * hs[j] + b_word;
      word_c[a] = sigmoid(word_gates.segment(n, n)).cwiseProduct(cs[j]) +
                  sigmoid(word_gates.segment(0, n)).cwiseProduct(tanh_of(word_gates.segment(2 * n, n)));
    }
    loss += shared.loss(hs[j], labels[j]);
  }
  return loss;
}

struct DirectGru {
  MatrixXf w, u, b, w_c, u_c, b_c;
  DirectGru(const Model& model, const std::string& kind)
      : w(matrix_of(model.parameter("W_" + kind))), u(matrix_of(model.parameter("U_" + kind))),
        b(matrix_of(model.parameter("b_" + kind))), w_c(matrix_of(model.parameter("W_" + kind + "_c"))),
        u_c(matrix_of(model.parameter("U_" + kind + "_c"))), b_c(matrix_of(model.parameter("b_" + kind + "_c"))) {}
  // [z; r] = sigmoid(W x + U h + b); u = tanh(W_c x + U_c (r*h) + b_c); (1 - z)*h + z*u.
  VectorXf step(const VectorXf& x, const VectorXf& h) const {
    const int n = int(h.size());
    const VectorXf gates = sigmoid(w * x + u * h + b);
    const VectorXf z = gates.segment(0, n);
    const VectorXf candidate = tanh_of(w_c * x + u_c * gates.segment(n, n).cwiseProduct(h) + b_c);
    return (VectorXf::Ones(n) - z).cwiseProduct(h) + z.cwiseProduct(candidate);
  }
};

double direct_gru_loss(const Model& model, const samples::Lattice& lattice, const std::vector<int>& chars,
                       const std::vector<int>& words, const std::vector<int>& labels, int hidden) {
  const Shared shared(model);
  const DirectGru char_gru(model, "char"), word_gru(model, "word");
  const size_t length = lattice.chars.size();
  std::vector<VectorXf> hs(length), word_h(lattice.words.size());
  double loss = 0;
  for (size_t j = 0; j < length; ++j) {
    const VectorXf x = row_of(shared.chars, chars[j]);
    hs[j] = char_gru.step(x, j == 0 ? VectorXf::Zero(hidden) : hs[j - 1]);
    int incoming = 0;
    VectorXf arcs = VectorXf::Zero(hidden);
    for (size_t a = 0; a < lattice.words.size(); ++a) {
      if (size_t(lattice.words[a].end) != j) continue;
      arcs += shared.gated(x, word_h[a]);
      ++incoming;
    }
    if (incoming > 0) hs[j] = (hs[j] + arcs) / float(1 + incoming);
    for (size_t a = 0; a < lattice.words.size(); ++a)
      if (size_t(lattice.words[a].start) == j) word_h[a] = word_gru.step(row_of(shared.words, words[a]), hs[j]);
    loss += shared.loss(hs[j], labels[j]);
  }
  return loss;
}

using DirectLoss = double (*)(const Model&, const samples::Lattice&, const std::vector<int>&,
                              const std::vector<int>&, const std::vector<int>&, int);
using Maker = std::unique_ptr<samples::SampleModel> (*)(const samples::ModelConfig&);

struct Case {
  const char* name;
  Maker make;
  DirectLoss direct;
};

class LatticeReference : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    lattices_ = samples::generate_lattices(10, 7);
    path_ = dir_.file("lattices.jsonl");
    std::ofstream out(path_);
    for (const samples::Lattice& lattice : lattices_) samples::write_lattice(out, lattice);
  }
  samples::ModelConfig config(int embed, int hidden) const {
    samples::ModelConfig c;
    c.data_path = path_;
    c.embed = embed;
    c.hidden = hidden;
    c.seed = 3;
    return c;
  }
  double direct(samples::SampleModel& sample, size_t i, int hidden) const {
    const Ids ids = ids_of(lattices_);
    return GetParam().direct(sample.model(), lattices_[i], ids.chars[i],
                             ids.words[i], ids.labels[i], hidden);
  }
  testing::TempDir dir_;
  std::vector<samples::Lattice> lattices_;
  std::string path_;
};

TEST_P(LatticeReference, TheWorkloadHasMergesOfSeveralArcs) {
  // The checks below only mean something if some char merges two or more arcs and some none.
  int most = 0, none = 0;
  for (const samples::Lattice& lattice : lattices_) {
    std::vector<int> incoming(lattice.chars.size(), 0);
    for (const samples::LatticeArc& arc : lattice.words) ++incoming[size_t(arc.end)];
    for (int n : incoming) {
      most = std::max(most, n);
      none += n == 0;
    }
  }
  EXPECT_GE(most, 2);
  EXPECT_GT(none, 0);
}

TEST_P(LatticeReference, EachLatticeLossEqualsDirectEigen) {
  const samples::ModelConfig c = config(12, 10);
  auto sample = GetParam().make(c);
  ASSERT_EQ(sample->instance_count(), lattices_.size());
  EXPECT_EQ(sample->model().parameter("W_out").rows(), ids_of(lattices_).label_count);
  Engine engine(testing::oracle_options());
  for (size_t i = 0; i < lattices_.size(); ++i) {
    Trace trace(engine);
    const double engine_loss = sample->record_loss(trace, i).scalar();
    EXPECT_TRUE(testing::near_relative(engine_loss, direct(*sample, i, c.hidden), 1e-5)) << "lattice " << i;
  }
}

TEST_P(LatticeReference, UnevenBatchesSumTheSameLosses) {
  const samples::ModelConfig c = config(16, 16);
  auto sample = GetParam().make(c);
  Engine engine(testing::oracle_options());
  samples::RunOptions run;
  run.batch = 4;  // uneven: the last trace holds 2 lattices
  run.repeat = 2;
  const samples::RunResult result = samples::run_inference(*sample, engine, run);
  double expected = 0;
  for (size_t i = 0; i < lattices_.size(); ++i) expected += direct(*sample, i, c.hidden);
  EXPECT_TRUE(testing::near_relative(result.loss, expected, 1e-5));
  EXPECT_EQ(result.instances, 10);
  EXPECT_EQ(result.stats.batches, result.stats.nodes);  // sequential policy
  EXPECT_GT(result.stats.flops, 0);
}

TEST_P(LatticeReference, BatchingPoliciesGiveTheOracleLoss) {
  const samples::ModelConfig c = config(8, 8);
  auto sample = GetParam().make(c);
  double expected = 0;
  for (size_t i = 0; i < lattices_.size(); ++i) expected += direct(*sample, i, c.hidden);
  for (const char* policy : {"depth", "agenda", "greedy"}) {
    EngineOptions options;
    options.policy = policy;
    options.verify = true;
    Engine engine(options);
    samples::RunOptions run;
    run.batch = 3;
    run.repeat = 1;
    const samples::RunResult result = samples::run_inference(*sample, engine, run);
    EXPECT_TRUE(testing::near_relative(result.loss, expected, 1e-5)) << policy;
    EXPECT_LT(result.stats.batches, result.stats.nodes) << policy;
  }
}

// The learned policy, trained on the traces it then runs, keeps the oracle loss and never needs
// more batches than greedy (training keeps a table only when its rollout beats greedy's; on other
// traces a table may do worse).
TEST_P(LatticeReference, TrainedFsmMatchesTheOracleWithNoMoreBatchesThanGreedy) {
  samples::ModelConfig c = config(8, 8);
  c.limit = 8;
  auto sample = GetParam().make(c);
  double expected = 0;
  for (size_t i = 0; i < 8; ++i) expected += direct(*sample, i, c.hidden);
  samples::RunOptions run;
  run.batch = 4;  // two traces, the two it learns from
  run.repeat = 1;
  EngineOptions options;
  options.verify = true;
  options.policy = "greedy";
  Engine greedy(options);
  const samples::RunResult by_greedy = samples::run_inference(*sample, greedy, run);
  options.policy = "fsm";
  Engine fsm(options);
  PolicyTraining training;
  training.episodes = 200;
  training.seed = 3;
  samples::train_policy(*sample, fsm, 2, run.batch, training);
  const samples::RunResult by_fsm = samples::run_inference(*sample, fsm, run);
  EXPECT_TRUE(testing::near_relative(by_fsm.loss, expected, 1e-5));
  EXPECT_LE(by_fsm.stats.batches, by_greedy.stats.batches);
  EXPECT_GT(by_fsm.stats.policy_decisions, 0);
}

TEST_P(LatticeReference, LimitTruncatesTheFile) {
  samples::ModelConfig c = config(8, 8);
  c.limit = 3;
  EXPECT_EQ(GetParam().make(c)->instance_count(), 3u);
}

TEST_P(LatticeReference, GeneratesDataWithoutAFileAndIsRegistered) {
  samples::ModelConfig c;
  c.limit = 5;
  c.embed = 8;
  c.hidden = 8;
  auto sample = GetParam().make(c);
  EXPECT_EQ(sample->instance_count(), 5u);
  Engine engine(testing::oracle_options());
  Trace trace(engine);
  EXPECT_GT(sample->record_loss(trace, 0).scalar(), 0.0f);
  const samples::ModelEntry* entry = samples::find_model(GetParam().name);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->default_embed, 128);
  EXPECT_EQ(entry->default_hidden, 128);
  EXPECT_EQ(entry->make(c)->instance_count(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Models, LatticeReference,
                         ::testing::Values(Case{"latticelstm", samples::make_latticelstm, direct_lstm_loss},
                                           Case{"latticegru", samples::make_latticegru, direct_gru_loss}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace edb
