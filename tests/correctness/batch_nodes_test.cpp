// Backward rules by batch (ir::NodeBatch): under the jit a backward pass runs the rule of a
// forward batch once for all its members, recording one batch node where each member's rule would
// record a node and passing terms on in place. The gradients equal the reference's and the
// per-node backward's under every policy, both planners and two threads; the IR checks a batch
// node's table, and batch nodes of one op share a type whatever their number of members.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "edbatch/errors.h"
#include "ir/ir.h"
#include "ir/signature.h"
#include "tests/support/test_support.h"
#include "trace/inspect.h"

namespace edb {
namespace {

using testing::expect_same_gradients;

// Per instance, outside any cell, every op with a rule by batch: an affine of two products whose
// x's are a looked-up word and a tanh of it, the activations, cmult, scale, add, sub, add_const,
// sum, concat, square, div, exp, log, softmax, log_softmax, sqrt, abs, cube, softsign, silu,
// elu, selu, log_sigmoid, max, min, sum_elements and mean_elements, a product by a weight that is computed (no rule by batch: each member's own
// rule), and the loss, over 7 instances (so each forward batch has several members) whose second
// half also runs a deeper branch (batches of different sizes).
struct Mlp {
  static constexpr int kEmbed = 5, kHidden = 6, kWords = 9, kLabels = 4;
  Model model{"mlp", 11};
  LookupTable words = model.add_lookup("words", kWords, kEmbed);
  Parameter w1 = model.add_parameter("W1", kHidden, kEmbed), w2 = model.add_parameter("W2", kHidden, kEmbed);
  Parameter b1 = model.add_parameter("b1", kHidden, 1), v = model.add_parameter("V", kLabels, 2 * kHidden);
  Parameter u = model.add_parameter("U", kHidden, kHidden);

  std::vector<const Parameter*> parameters() const { return {&w1, &w2, &b1, &v, &u}; }

  Expr loss(Trace& t) const {
    std::vector<Expr> terms;
    const Expr computed = tanh(t.param(u));  // a weight that is not a parameter
    for (int k = 0; k < 7; ++k) {
      const Expr word = t.lookup(words, (3 * k + 1) % kWords);
      const Expr a = affine({t.param(b1), t.param(w1), word, t.param(w2), tanh(word)});
      const Expr s = sigmoid(a), r = relu(a), h = tanh(a);
      Expr mixed = cmult(h, s) + r * 0.5f - (s - h);
      mixed = sum({mixed, r + 0.25f, matmul(computed, h)});
      if (k >= 3) mixed = tanh(matmul(t.param(u), mixed)) + s;
      mixed = mixed + square(h) + div(s, exp(h * 0.5f)) + log(s + 1.0f);
      mixed = mixed + sqrt(s + 0.5f) + abs(a) + cube(h) + softsign(a) + silu(a) + elu(a, 0.7f) + selu(a) +
              log_sigmoid(a) + max(a, h) + min(s, r);
      const Expr logits = matmul(t.param(v), concat({mixed, h}));
      terms.push_back(pick_neg_log_softmax(logits, k % kLabels));
      terms.push_back(sum_elements(cmult(softmax(logits), log_softmax(logits))) * 0.1f);
      terms.push_back(mean_elements(square(h - s)) * 0.5f);
    }
    return sum(terms);
  }
};

// Per op, the members of the trace's batch nodes.
std::map<std::string, int> batch_members(const Expr& loss) {
  const detail::EvaluatedTrace trace = detail::evaluated_trace(loss);
  std::map<std::string, int> members;
  for (ir::NodeId id = 0; id < trace.graph.size(); ++id)
    if (const ir::Node& n = trace.graph.node(id); ir::is_node_batch(n)) members[std::string(ir::op_name(n.op))] += n.attrs.members;
  return members;
}

TEST(BatchNodes, OnePerForwardBatchAndTheReferencesGradients) {
  const Mlp mlp;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return mlp.loss(t); });
  EngineOptions options;
  options.verify = true;
  Engine engine(options);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("trace " + std::to_string(round + 1));
    Trace trace(engine);
    const Expr loss = mlp.loss(trace);
    ASSERT_NO_FATAL_FAILURE(expect_same_gradients(trace.backward(loss), want, mlp.parameters(), mlp.words, "jit"));
    const std::map<std::string, int> members = batch_members(loss);
    // One member per instance (or per deeper instance) and per node its rule would have recorded.
    EXPECT_EQ(members.at("pick_neg_log_softmax_grad"), 7);
    EXPECT_EQ(members.at("tanh_grad"), 7 + 7 + 4);  // tanh(word), h, the deeper tanh (tanh(U) is one node)
    EXPECT_EQ(members.at("sigmoid_grad"), 7);
    EXPECT_EQ(members.at("relu_grad"), 7 + 2 * 7 + 2 * 7 + 2 * 7 + 7 + 7);  // relu, abs, elu, selu, max, min
    // cmult(h, s) and cmult(softmax, log_softmax) to both arguments, exp's, both squares', div's,
    // cube's, log_sigmoid's, silu's two, elu's and selu's.
    EXPECT_EQ(members.at("cmult"), 2 * 7 + 2 * 7 + 7 + 2 * 7 + 7 + 7 + 7 + 2 * 7 + 7 + 7);
    EXPECT_EQ(members.at("div"), 3 * 7 + 7 + 7);  // log's, div's to either argument, sqrt's, softsign's
    EXPECT_EQ(members.at("sub"), 4 * 7 + 2 * 7 + 2 * 7);  // abs, silu, elu, selu; max's and min's two
    EXPECT_EQ(members.at("add"), 3 * 7);                  // silu, elu, selu
    EXPECT_EQ(members.at("add_const"), 3 * 7);            // softsign, elu, selu
    EXPECT_EQ(members.at("sigmoid"), 2 * 7);              // log_sigmoid, silu
    EXPECT_EQ(members.at("square"), 2 * 7);               // cube, softsign
    EXPECT_EQ(members.at("abs"), 7);                      // softsign
    EXPECT_EQ(members.at("matmul"), 2 * 7);               // sum_elements' and mean_elements' spread
    EXPECT_EQ(members.at("softmax_grad"), 7);
    EXPECT_EQ(members.at("log_softmax_grad"), 7);
    EXPECT_GE(members.at("scale"), 2 * 7);  // r * 0.5 and the sub's -1
    // V's x, U's (the deeper branch), W1's (a word: the table's rows) and W2's.
    EXPECT_EQ(members.at("matmul_tn"), 7 + 4 + 7 + 7);
    EXPECT_NE(trace.dump().find(" members="), std::string::npos);
  }
}

TEST(BatchNodes, EqualThePerNodeBackwardUnderEveryPolicyPlannerAndThreads) {
  const Mlp mlp;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return mlp.loss(t); });
  testing::for_each_backward_combination([&](EngineOptions options, const std::string& what) {
    for (bool batched : {true, false}) {
      options.batched_backward = batched;
      Engine engine(options);
      for (int round = 0; round < 2; ++round) {
        Trace trace(engine);
        const Expr loss = mlp.loss(trace);
        ASSERT_NO_FATAL_FAILURE(expect_same_gradients(trace.backward(loss), want, mlp.parameters(), mlp.words, what));
        // Node by node (sequential) every forward batch has one member: no rule by batch.
        EXPECT_EQ(batch_members(loss).empty(), !batched || options.policy == "sequential");
      }
    }
  });
}

// Where the executor does not compile cells, or check_finite reads every value, no batch node.
TEST(BatchNodes, OnlyWhereCellsCompile) {
  const Mlp mlp;
  const Gradients want = testing::reference_gradients([&](Trace& t) { return mlp.loss(t); });
  for (const char* executor : {"batched", "reference", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.check_finite = std::string(executor) == "jit";
    Engine engine(options);
    Trace trace(engine);
    const Expr loss = mlp.loss(trace);
    ASSERT_NO_FATAL_FAILURE(expect_same_gradients(trace.backward(loss), want, mlp.parameters(), mlp.words, executor));
    EXPECT_TRUE(batch_members(loss).empty()) << executor;
  }
}

// A graph with two batch nodes of one op and 2 and 3 members: one type; the table is checked.
TEST(BatchNodes, IrTableAndType) {
  ir::Graph graph;
  const std::vector<float> values(64, 0.5f);
  ir::Attributes constants;
  constants.index = graph.add_constants(values);
  const ir::NodeId y = graph.add(ir::Op::input, {}, ir::Shape{12, 1}, constants);
  const ir::NodeId dy = graph.add(ir::Op::input, {}, ir::Shape{4, 1}, constants);
  const ir::Shape shapes[] = {{4, 1}, {4, 1}};
  const ir::NodeId two_args[] = {y, dy, y, dy};
  const int32_t two_rows[] = {0, 0, 4, 0};
  const ir::NodeId two = ir::add_node_batch(graph, ir::Op::tanh_grad, ir::Shape{4, 1}, shapes, two_args, two_rows, {}, {});
  const ir::NodeId three_args[] = {y, dy, y, dy, y, dy};
  const int32_t three_rows[] = {0, 0, 4, 0, 8, 0};
  const ir::NodeId three =
      ir::add_node_batch(graph, ir::Op::tanh_grad, ir::Shape{4, 1}, shapes, three_args, three_rows, {}, {});
  EXPECT_EQ(graph.node(two).shape, (ir::Shape{8, 1}));
  EXPECT_EQ(graph.node(three).shape, (ir::Shape{12, 1}));
  EXPECT_EQ(ir::member_shape(graph.node(three)), (ir::Shape{4, 1}));
  EXPECT_NO_THROW(ir::verify(graph));
  ir::SignatureTable table;
  EXPECT_EQ(table.intern(graph, two), table.intern(graph, three));
  EXPECT_EQ(ir::node_batch(graph, three).rows[4], 8);
  EXPECT_NE(ir::print(graph).find("members=3 at=0,0,4,0,8,0"), std::string::npos);
  EXPECT_EQ(ir::node_flops(graph, three), 3 * 12);
  // A member's argument past its node's end: named by member and argument.
  const int32_t outside[] = {0, 0, 10, 0};
  ir::add_node_batch(graph, ir::Op::tanh_grad, ir::Shape{4, 1}, shapes, two_args, outside, {}, {});
  try {
    ir::verify(graph);
    ADD_FAILURE() << "verify accepted a member's argument outside its node";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("member 2's argument 1 (4x1) at row 10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace edb
