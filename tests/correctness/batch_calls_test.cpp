// Batch calls (ir::CallBatch): under the jit, a backward pass records one call of a cell's
// backward body per forward batch of its calls, reading each member's gradients where they lie.
// The gradients equal the reference's (cells off) and the per-call backward's, under every policy,
// both planners and two threads; the trace holds one batch call per forward batch of calls and no
// per-call backward call.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "tests/support/test_support.h"
#include "trace/inspect.h"

namespace edb {
namespace {

using testing::expect_same_gradients;

// Chains of 1 to 5 steps of an LSTM-like cell over looked-up words, so that the forward batches
// of calls have 5 down to 1 members and a batch call's members differ in what they are sent:
// - h goes to its step's loss and to the next step (two terms, summed as the batch call reads
//   them), but the last step's h only to its loss (one or two terms: padded with a zero);
// - c goes to its step's loss and the next step; the last step of an odd chain's is sent nothing
//   (a zero term);
// - x is a word's row (its gradient read in place as the table's) on even steps, and tanh of one
//   on odd steps (its gradient a view of the batch call's frames, then tanh's rule);
// - a per-step matrix m (a matvec in the body: its gradient a matrix view of the frames);
// - the loss reads concat(h, c, tanh(word)): each part's gradient is read in place at its rows of
//   the concat's (h's and c's go on to the calls as terms, tanh's rule reads a view of it).
struct Chains {
  static constexpr int kEmbed = 6, kHidden = 8, kWords = 11, kLabels = 3;
  Model model{"chains", 7};
  LookupTable words = model.add_lookup("words", kWords, kEmbed);
  Parameter w = model.add_parameter("W", 4 * kHidden, kEmbed), u = model.add_parameter("U", 4 * kHidden, kHidden);
  Parameter b = model.add_parameter("b", 4 * kHidden, 1), v = model.add_parameter("V", kLabels, 2 * kHidden + kEmbed);
  Parameter mix = model.add_parameter("M", kHidden * kHidden, kEmbed);
  Cell step{"chain_step",
            {{kEmbed, 1}, {kHidden, 1}, {kHidden, 1}, {kHidden, kHidden}},
            [this](Trace& t, std::span<const Expr> in) {
              const Expr gates = affine({t.param(b), t.param(w), in[0], t.param(u), in[1]});
              const int h = kHidden;
              const Expr i = sigmoid(slice(gates, 0, h)), f = sigmoid(slice(gates, h, 2 * h));
              const Expr o = sigmoid(slice(gates, 2 * h, 3 * h)), g = tanh(slice(gates, 3 * h, 4 * h));
              const Expr c = cmult(f, in[2]) + cmult(i, g);
              return std::vector<Expr>{cmult(o, tanh(c + matvec(in[3], in[1]))), c};
            }};

  std::vector<const Parameter*> parameters() const { return {&w, &u, &b, &v, &mix}; }

  Expr loss(Trace& t) const {
    std::vector<Expr> terms;
    for (int chain = 0; chain < 5; ++chain) {
      Expr h = t.input(kHidden, 1, std::vector<float>(kHidden, 0.1f * float(chain))), c = h;
      for (int k = 0; k <= chain; ++k) {
        const Expr word = t.lookup(words, (chain * 3 + k * 5) % kWords);
        const Expr x = k % 2 == 0 ? word : tanh(word);
        const Expr m = reshape(tanh(matmul(t.param(mix), word)), kHidden, kHidden) * 0.3f;
        const std::vector<Expr> hc = step(t, {x, h, c, m});
        h = hc[0];
        c = hc[1];
        // The last step of an odd chain reads h twice, not c: its c is sent nothing.
        const Expr second = chain % 2 == 1 && k == chain ? h : c;
        terms.push_back(pick_neg_log_softmax(matmul(t.param(v), concat({h, second, tanh(word)})), (chain + k) % kLabels));
      }
    }
    return sum(terms);
  }
};

struct Calls {
  int batch = 0;     // batch calls
  int per_call = 0;  // backward calls of one call each
  int members = 0;   // the batch calls' members
};

Calls backward_calls(const Expr& loss) {
  const detail::EvaluatedTrace trace = detail::evaluated_trace(loss);
  Calls calls;
  for (ir::NodeId id = 0; id < trace.graph.size(); ++id) {
    const ir::Node& n = trace.graph.node(id);
    if (n.op != ir::Op::call || trace.graph.cell(n.attrs.index).name.rfind("backward of", 0) != 0) continue;
    if (ir::is_call_batch(n)) {
      ++calls.batch;
      calls.members += n.attrs.end;
    } else {
      ++calls.per_call;
    }
  }
  return calls;
}

TEST(BatchCalls, OnePerForwardBatchAndTheReferencesGradients) {
  const Chains chains;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return chains.loss(t); });
  EngineOptions options;
  options.verify = true;
  Engine engine(options);
  {
    Trace forward_only(engine);
    chains.loss(forward_only).scalar();
  }
  EXPECT_EQ(engine.stats().time.record_backward_ms, 0.0);  // no backward pass recorded yet
  for (int round = 0; round < 3; ++round) {  // the first relays the calls out for training
    SCOPED_TRACE("trace " + std::to_string(round + 1));
    Trace trace(engine);
    const Expr loss = chains.loss(trace);
    const Gradients got = trace.backward(loss);
    ASSERT_NO_FATAL_FAILURE(expect_same_gradients(got, want, chains.parameters(), chains.words, "jit"));
    const Calls calls = backward_calls(loss);
    EXPECT_EQ(calls.per_call, 0);
    EXPECT_EQ(calls.batch, 5);     // the forward batches: step k of every chain longer than k
    EXPECT_EQ(calls.members, 15);  // every call of the 5 chains (1 + 2 + 3 + 4 + 5 steps)
    EXPECT_NE(trace.dump().find(" members="), std::string::npos);
  }
  EXPECT_GT(engine.stats().time.record_backward_ms, 0.0);  // Stats counts the recording
}

TEST(BatchCalls, EqualThePerCallBackwardUnderEveryPolicyPlannerAndThreads) {
  const Chains chains;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return chains.loss(t); });
  testing::for_each_backward_combination([&](EngineOptions options, const std::string& what) {
    for (bool batched : {true, false}) {
      options.batched_backward = batched;
      Engine engine(options);
      for (int round = 0; round < 2; ++round) {
        Trace trace(engine);
        const Expr loss = chains.loss(trace);
        const Gradients got = trace.backward(loss);
        ASSERT_NO_FATAL_FAILURE(expect_same_gradients(got, want, chains.parameters(), chains.words, what));
        const Calls calls = backward_calls(loss);
        EXPECT_EQ(calls.members, batched ? 15 : 0);
        EXPECT_EQ(calls.per_call, batched ? 0 : 15);
      }
    }
  });
}

// Two backward passes in one trace, each after its own forward pass: the second's batch calls and
// their views are planned in a later evaluation than the first's.
TEST(BatchCalls, TwoBackwardPassesInOneTrace) {
  const Chains chains;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return chains.loss(t); });
  for (bool memplan : {false, true}) {
    EngineOptions options;
    options.memplan = memplan;
    options.verify = true;
    Engine engine(options);
    Trace trace(engine);
    Expr loss;
    for (int pass = 0; pass < 2; ++pass) {
      const std::string what = std::string("planner ") + (memplan ? "on" : "off") + ", pass " + std::to_string(pass + 1);
      loss = chains.loss(trace);
      const Gradients got = trace.backward(loss);
      ASSERT_NO_FATAL_FAILURE(expect_same_gradients(got, want, chains.parameters(), chains.words, what));
    }
    EXPECT_EQ(backward_calls(loss).members, 30);  // both passes' calls
  }
}

// Where the executor does not compile cells, or check_finite reads every value, each call keeps
// a backward call of its own.
TEST(BatchCalls, OnlyWhereCellsCompile) {
  const Chains chains;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return chains.loss(t); });
  for (int k = 0; k < 3; ++k) {
    EngineOptions options;
    options.executor = k == 0 ? "batched" : k == 1 ? "reference" : "jit";
    options.check_finite = k == 2;
    options.verify = true;
    Engine engine(options);
    Trace trace(engine);
    const Expr loss = chains.loss(trace);
    const Gradients got = trace.backward(loss);
    ASSERT_NO_FATAL_FAILURE(expect_same_gradients(got, want, chains.parameters(), chains.words, options.executor));
    const Calls calls = backward_calls(loss);
    EXPECT_EQ(calls.batch, 0) << options.executor;
    EXPECT_EQ(calls.per_call, 15) << options.executor;
  }
}

}  // namespace
}  // namespace edb
