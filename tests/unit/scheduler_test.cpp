// Unit tests for scheduler/: exact batch counts of every policy on small hand-made graphs (worked
// out by hand in the comments), the lower bound, the schedule checker rejecting bad schedules,
// greedy against the lower bound and the other policies on TreeLSTM traces, and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "ir/signature.h"
#include "samples/data/data.h"
#include "samples/models.h"
#include "scheduler/lower_bound.h"
#include "scheduler/schedule.h"

namespace edb::scheduler {
namespace {

using ir::NodeId;
using ir::Op;
using ir::Shape;
using ir::TypeId;

// Builds graphs by hand: zero inputs and ops whose shapes are inferred.
struct Builder {
  NodeId input(int rows = 4) {
    const std::vector<float> zeros(size_t(rows), 0.0f);
    ir::Attributes attrs;
    attrs.index = graph.add_constants(zeros);
    return graph.add(Op::input, {}, Shape{rows, 1}, attrs);
  }
  NodeId op(Op op, std::vector<NodeId> args) {
    std::vector<Shape> shapes;
    for (NodeId a : args) shapes.push_back(graph.node(a).shape);
    return graph.add(op, args, ir::infer_shape(op, shapes, {}), {});
  }
  ir::Graph graph;
};

// Each instance: x -> tanh -> sigmoid -> tanh, twice (two chains per instance, same shapes).
// Every policy runs one batch per level: 3. LB: tanh twice on a path + sigmoid once = 3.
void chains(Builder& b, int instances) {
  for (int i = 0; i < instances; ++i)
    for (int chain = 0; chain < 2; ++chain)
      b.op(Op::tanh, {b.op(Op::sigmoid, {b.op(Op::tanh, {b.input()})})});
}

// Two long instances x -> tanh -> tanh -> sigmoid, then two short ones x -> sigmoid.
// depth: (1, tanh) (1, sigmoid) (2, tanh) (3, sigmoid) = 4 batches.
// agenda: tanh and sigmoid tie at average depth 1, tanh (seen first) runs; then the short
//   sigmoids (depth 1) beat the second tanhs (depth 2) and run alone: 4 batches.
// greedy: tanh 2/2 beats sigmoid 2/4 twice, then all 4 sigmoids at once: 3 = LB (tanh 2 + sigmoid 1).
void depth_worse(Builder& b) {
  for (int i = 0; i < 2; ++i) b.op(Op::sigmoid, {b.op(Op::tanh, {b.op(Op::tanh, {b.input()})})});
  for (int i = 0; i < 2; ++i) b.op(Op::sigmoid, {b.input()});
}

// t = tanh(x); add(sigmoid(t), relu(t)): 4 levels, 4 types, every policy 4 = LB.
void diamond(Builder& b, int instances) {
  for (int i = 0; i < instances; ++i) {
    const NodeId t = b.op(Op::tanh, {b.input()});
    const NodeId l = b.op(Op::sigmoid, {t});
    b.op(Op::add, {l, b.op(Op::relu, {t})});
  }
}

// t = tanh(x); add(sigmoid(t), sigmoid(relu(t))): the two sigmoids sit at depths 2 and 3.
// depth: tanh, (2, sigmoid), (2, relu), (3, sigmoid), add = 5.
// agenda: sigmoid and relu tie at depth 2, sigmoid (seen first) runs alone: 5.
// greedy: relu 3/3 beats sigmoid 3/6, then all 6 sigmoids together: 4 = LB (one of each type).
void lopsided_diamond(Builder& b, int instances) {
  for (int i = 0; i < instances; ++i) {
    const NodeId t = b.op(Op::tanh, {b.input()});
    const NodeId l = b.op(Op::sigmoid, {t});
    const NodeId r = b.op(Op::sigmoid, {b.op(Op::relu, {t})});
    b.op(Op::add, {l, r});
  }
}

// tanh of 4 rows and tanh of 8 rows are different types: 2 batches (and LB 2) however many instances.
void shapes_split(Builder& b, int instances) {
  for (int i = 0; i < instances; ++i) {
    b.op(Op::tanh, {b.input(4)});
    b.op(Op::tanh, {b.input(8)});
  }
}

Schedule schedule_with(std::string_view policy, const ir::Graph& graph, const std::vector<TypeId>& types,
                       NodeId begin = 0) {
  Schedule schedule;
  const ScheduleInput input{graph, types, begin};
  make_policy(policy)->schedule(input, schedule);
  verify(input, schedule);
  return schedule;
}

struct GraphCase {
  std::string name;
  std::function<void(Builder&)> build;
  size_t nodes, depth, agenda, greedy;
  int64_t lower_bound;
};

std::vector<GraphCase> graph_cases() {
  return {
      {"Chains", [](Builder& b) { chains(b, 3); }, 18, 3, 3, 3, 3},
      {"DepthWorseThanGreedy", depth_worse, 8, 4, 4, 3, 3},
      {"Diamond", [](Builder& b) { diamond(b, 3); }, 12, 4, 4, 4, 4},
      {"LopsidedDiamond", [](Builder& b) { lopsided_diamond(b, 3); }, 15, 5, 5, 4, 4},
      {"ShapesSplitBatches", [](Builder& b) { shapes_split(b, 3); }, 6, 2, 2, 2, 2},
  };
}

void PrintTo(const GraphCase& c, std::ostream* out) { *out << c.name; }

class PolicyBatchCounts : public ::testing::TestWithParam<GraphCase> {};

TEST_P(PolicyBatchCounts, ExactCountsAndLowerBound) {
  const GraphCase& c = GetParam();
  Builder b;
  c.build(b);
  ir::SignatureTable table;
  const std::vector<TypeId> types = table.assign(b.graph);
  EXPECT_EQ(schedule_with("sequential", b.graph, types).batch_count(), c.nodes);
  EXPECT_EQ(schedule_with("depth", b.graph, types).batch_count(), c.depth);
  EXPECT_EQ(schedule_with("agenda", b.graph, types).batch_count(), c.agenda);
  EXPECT_EQ(schedule_with("greedy", b.graph, types).batch_count(), c.greedy);
  EXPECT_EQ(lower_bound(ScheduleInput{b.graph, types}), c.lower_bound);
}

INSTANTIATE_TEST_SUITE_P(HandMadeGraphs, PolicyBatchCounts, ::testing::ValuesIn(graph_cases()),
                         [](const ::testing::TestParamInfo<GraphCase>& info) { return info.param.name; });

TEST(PolicyBatches, MembersOfEachBatch) {
  Builder b;
  depth_worse(b);  // ids: x0 t1 t2 s3 | x4 t5 t6 s7 | x8 s9 | x10 s11
  ir::SignatureTable table;
  const std::vector<TypeId> types = table.assign(b.graph);
  const Schedule greedy = schedule_with("greedy", b.graph, types);
  ASSERT_EQ(greedy.batch_count(), 3u);
  EXPECT_EQ(std::vector<NodeId>(greedy.batch(0).begin(), greedy.batch(0).end()), (std::vector<NodeId>{1, 5}));
  EXPECT_EQ(std::vector<NodeId>(greedy.batch(1).begin(), greedy.batch(1).end()), (std::vector<NodeId>{2, 6}));
  std::vector<NodeId> last(greedy.batch(2).begin(), greedy.batch(2).end());
  std::sort(last.begin(), last.end());
  EXPECT_EQ(last, (std::vector<NodeId>{3, 7, 9, 11}));
  EXPECT_EQ(greedy.batch_type[0], types[1]);
  EXPECT_EQ(greedy.batch_type[0], greedy.batch_type[1]);
  EXPECT_EQ(greedy.batch_type[2], types[3]);
  const Schedule agenda = schedule_with("agenda", b.graph, types);
  ASSERT_EQ(agenda.batch_count(), 4u);
  EXPECT_EQ(agenda.batch(1).size(), 2u);  // the short sigmoids 9 and 11, run early
  EXPECT_EQ(agenda.batch_type[1], types[9]);
}

// Nodes before ScheduleInput::begin count as evaluated: only the rest are scheduled.
TEST(PolicyBatches, OnlyTheUnevaluatedRange) {
  Builder b;
  chains(b, 2);
  const NodeId begin = NodeId(b.graph.size());
  chains(b, 1);
  ir::SignatureTable table;
  const std::vector<TypeId> types = table.assign(b.graph);
  for (const std::string& policy : policy_names()) {
    const Schedule s = schedule_with(policy, b.graph, types, begin);
    EXPECT_EQ(s.nodes.size(), 6u) << policy;
    EXPECT_EQ(s.batch_count(), policy == "sequential" ? 6u : 3u) << policy;
  }
  EXPECT_EQ(lower_bound(ScheduleInput{b.graph, types, begin}), 3);
}

// The same counts through the public API: recorded with a Trace, counted by Engine::stats().
TEST(PolicyBatches, ThroughTheEngine) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"sequential", 8}, {"depth", 4}, {"agenda", 4}, {"greedy", 3}, {"fsm", 3},  // untrained fsm: greedy
      {"learned", 3}, {"search", 3}};  // untrained learned: greedy
  ASSERT_EQ(policy_names().size(), expected.size());
  for (const auto& [policy, batches] : expected) {
    EngineOptions options;
    options.policy = policy;
    options.verify = true;
    Engine engine(options);
    Trace trace(engine);
    const std::vector<float> zeros(4, 0.1f);
    for (int i = 0; i < 2; ++i) sigmoid(tanh(tanh(trace.input(zeros))));
    for (int i = 0; i < 2; ++i) sigmoid(trace.input(zeros));
    trace.run();
    EXPECT_EQ(engine.stats().batches, batches) << policy;
    EXPECT_EQ(engine.stats().lower_bound, 3) << policy;
    EXPECT_EQ(engine.stats().nodes, 8) << policy;
  }
}

// ---- scheduler::verify ----

std::string verify_error(const ScheduleInput& input, const Schedule& schedule) {
  try {
    verify(input, schedule);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

class VerifySchedule : public ::testing::Test {
 protected:
  void SetUp() override {
    x = b.input();
    a = b.op(Op::tanh, {x});
    s = b.op(Op::sigmoid, {a});
    c = b.op(Op::tanh, {x});
    d = b.op(Op::tanh, {a});
    types = table.assign(b.graph);
    tanh_type = types[a];
    sigmoid_type = types[s];
  }
  Schedule make(std::vector<std::pair<TypeId, std::vector<NodeId>>> batches) const {
    Schedule schedule;
    for (const auto& [type, members] : batches) schedule.add_batch(type, members);
    return schedule;
  }
  std::string error(std::vector<std::pair<TypeId, std::vector<NodeId>>> batches) const {
    return verify_error(ScheduleInput{b.graph, types}, make(std::move(batches)));
  }
  Builder b;
  ir::SignatureTable table;
  std::vector<TypeId> types;
  NodeId x = 0, a = 0, s = 0, c = 0, d = 0;
  TypeId tanh_type = 0, sigmoid_type = 0;
};

TEST_F(VerifySchedule, AcceptsAValidSchedule) {
  ASSERT_EQ(types[c], tanh_type);
  ASSERT_EQ(types[d], tanh_type);
  ASSERT_NE(tanh_type, sigmoid_type);
  EXPECT_EQ(error({{tanh_type, {a, c}}, {sigmoid_type, {s}}, {tanh_type, {d}}}), "");
}

TEST_F(VerifySchedule, RejectsANodeTwice) {
  const std::string e = error({{tanh_type, {a, c}}, {sigmoid_type, {s}}, {tanh_type, {d, a}}});
  EXPECT_NE(e.find("%1 appears twice"), std::string::npos) << e;
}

TEST_F(VerifySchedule, RejectsANodeBeforeItsArgument) {
  const std::string e = error({{sigmoid_type, {s}}, {tanh_type, {a, c, d}}});
  EXPECT_NE(e.find("argument %1"), std::string::npos) << e;
}

TEST_F(VerifySchedule, RejectsANodeInItsArgumentsBatch) {
  const std::string e = error({{tanh_type, {a, c, d}}, {sigmoid_type, {s}}});
  EXPECT_NE(e.find("argument %1"), std::string::npos) << e;
}

TEST_F(VerifySchedule, RejectsAMissingNode) {
  const std::string e = error({{tanh_type, {a}}, {sigmoid_type, {s}}, {tanh_type, {d}}});
  EXPECT_NE(e.find("%3 is never scheduled"), std::string::npos) << e;
}

TEST_F(VerifySchedule, RejectsTheWrongType) {
  EXPECT_NE(error({{tanh_type, {a, c}}, {tanh_type, {s}}, {tanh_type, {d}}}).find("%2"), std::string::npos);
  EXPECT_NE(error({{tanh_type, {a, c}}, {sigmoid_type, {s, d}}}).find("%4"), std::string::npos);
}

TEST_F(VerifySchedule, RejectsALeafAndAnEmptyBatch) {
  EXPECT_NE(error({{tanh_type, {x}}, {tanh_type, {a, c}}, {sigmoid_type, {s}}, {tanh_type, {d}}}).find("leaf %0"),
            std::string::npos);
  EXPECT_NE(error({{tanh_type, {a, c}}, {tanh_type, {}}, {sigmoid_type, {s}}, {tanh_type, {d}}}), "");
}

// ---- TreeLSTM traces: greedy against the lower bound and the other policies ----

struct TraceCount {
  int64_t batches, lower_bound, nodes;
};

// One TraceCount per trace of `batch` trees (16 generated trees, embed and hidden 8).
std::vector<TraceCount> treelstm_counts(const std::string& policy, uint64_t seed, int batch) {
  samples::ModelConfig config;
  config.limit = 16;
  config.embed = 8;
  config.hidden = 8;
  config.seed = seed;
  auto sample = samples::make_treelstm(config);
  EngineOptions options;
  options.policy = policy;
  options.verify = true;
  Engine engine(options);
  std::vector<TraceCount> counts;
  for (size_t first = 0; first < sample->instance_count(); first += size_t(batch)) {
    engine.reset_stats();
    Trace trace(engine);
    for (size_t i = first; i < std::min(sample->instance_count(), first + size_t(batch)); ++i)
      sample->record_loss(trace, i);
    trace.run();
    counts.push_back({engine.stats().batches, engine.stats().lower_bound, engine.stats().nodes});
  }
  return counts;
}

constexpr uint64_t kTreeSeeds[] = {1, 2, 3, 4};
constexpr int kTreeBatches[] = {1, 8};

TEST(GreedyOnTreeLstm, NoWorseThanAgendaOrDepth) {
  for (uint64_t seed : kTreeSeeds)
    for (int batch : kTreeBatches) {
      const auto greedy = treelstm_counts("greedy", seed, batch);
      const auto agenda = treelstm_counts("agenda", seed, batch);
      const auto depth = treelstm_counts("depth", seed, batch);
      ASSERT_EQ(greedy.size(), size_t(16 / batch));
      ASSERT_EQ(agenda.size(), greedy.size());
      ASSERT_EQ(depth.size(), greedy.size());
      for (size_t t = 0; t < greedy.size(); ++t) {
        SCOPED_TRACE("seed " + std::to_string(seed) + ", batch " + std::to_string(batch) + ", trace " +
                     std::to_string(t));
        EXPECT_EQ(agenda[t].lower_bound, greedy[t].lower_bound);
        EXPECT_EQ(depth[t].lower_bound, greedy[t].lower_bound);
        EXPECT_EQ(agenda[t].nodes, greedy[t].nodes);
        EXPECT_GE(greedy[t].batches, greedy[t].lower_bound);
        EXPECT_LE(greedy[t].batches, agenda[t].batches);
        EXPECT_LE(greedy[t].batches, depth[t].batches);
        EXPECT_LT(greedy[t].batches, greedy[t].nodes);
      }
    }
}

// Greedy reaches the lower bound exactly on tree-structured graphs: a tree RNN (leaf
// h = tanh(W x + b), internal h = tanh(U [h_l; h_r] + c)) over generated trees, with a label loss
// at the root only and at every node; agenda needs many more batches on the same graphs.
TEST(SchedulerLowerBound, GreedyReachesLowerBoundOnTreeRnn) {
  for (bool loss_everywhere : {false, true})
    for (uint64_t seed : {1, 2, 3, 4}) {
      const auto trees = samples::generate_trees(16, seed);
      int64_t greedy_batches = 0, agenda_batches = 0;
      for (const char* policy : {"greedy", "agenda"}) {
        EngineOptions options;
        options.policy = policy;
        options.executor = "reference";
        options.verify = true;
        Engine engine(options);
        Model model("rnn", 1);
        const LookupTable words = model.add_lookup("E", 5000, 4);
        const Parameter w = model.add_parameter("W", 4, 4), b = model.add_parameter("b", 4, 1);
        const Parameter u = model.add_parameter("U", 4, 8), c = model.add_parameter("c", 4, 1);
        const Parameter out = model.add_parameter("O", 5, 4), d = model.add_parameter("d", 5, 1);
        Trace trace(engine);
        std::vector<Expr> losses;
        for (const samples::Tree& tree : trees) {
          std::vector<Expr> h(tree.nodes.size());
          for (size_t n = 0; n < tree.nodes.size(); ++n) {
            const samples::TreeNode& node = tree.nodes[n];
            if (node.is_leaf())
              h[n] = tanh(affine({trace.param(b), trace.param(w), trace.lookup(words, std::stoi(node.word.substr(1)))}));
            else
              h[n] = tanh(affine({trace.param(c), trace.param(u), concat({h[size_t(node.left)], h[size_t(node.right)]})}));
            if (loss_everywhere || n + 1 == tree.nodes.size())
              losses.push_back(pick_neg_log_softmax(affine({trace.param(d), trace.param(out), h[n]}), node.label));
          }
        }
        sum(losses);
        trace.run();
        (std::string(policy) == "greedy" ? greedy_batches : agenda_batches) = engine.stats().batches;
        if (std::string(policy) == "greedy") {
          EXPECT_EQ(engine.stats().batches, engine.stats().lower_bound) << "seed " << seed << ", loss everywhere " << loss_everywhere;
        }
      }
      EXPECT_LT(greedy_batches, agenda_batches) << "seed " << seed;
    }
}

// DISABLED: greedy does not reach the lower bound on TreeLSTM traces. Measured (16 generated trees,
// embed = hidden = 8; batches summed over the traces, greedy / agenda / depth / LB):
//   seed 1: batch 1  2277 / 2774 / 2774 / 2116 (greedy = LB in 2 of 16 traces);  batch 8  444 / 513 / 513 / 379
//   seed 2: batch 1  2394 / 2950 / 2950 / 2250 (8 of 16);                         batch 8  498 / 560 / 560 / 418
//   seed 3: batch 1  2434 / 2921 / 2921 / 2220 (2 of 16);                         batch 8  538 / 625 / 625 / 465
//   seed 4: batch 1  2043 / 2524 / 2524 / 1943 (3 of 16);                         batch 8  401 / 475 / 475 / 360
// (per batch-8 trace, seed 1: 209 vs LB 178 and 235 vs 201). Run with
// --gtest_also_run_disabled_tests to see where it stands.
TEST(SchedulerLowerBound, DISABLED_GreedyReachesLowerBoundOnTreeLstm) {
  for (uint64_t seed : kTreeSeeds)
    for (int batch : kTreeBatches) {
      const auto greedy = treelstm_counts("greedy", seed, batch);
      for (size_t t = 0; t < greedy.size(); ++t)
        EXPECT_EQ(greedy[t].batches, greedy[t].lower_bound)
            << "seed " << seed << ", batch " << batch << ", trace " << t;
    }
}

// ---- determinism ----

TEST(PolicyDeterminism, SameGraphSameSchedule) {
  Builder one, other;
  for (int i = 0; i < 3; ++i) {
    chains(one, 2);
    depth_worse(one);
    lopsided_diamond(one, 2);
    diamond(one, 1);
    shapes_split(one, 2);
  }
  lopsided_diamond(other, 4);
  ir::SignatureTable table;
  const std::vector<TypeId> types = table.assign(one.graph), other_types = table.assign(other.graph);
  const ScheduleInput input{one.graph, types}, other_input{other.graph, other_types};
  for (const std::string& name : policy_names()) {
    SCOPED_TRACE(name);
    auto reused = make_policy(name);
    Schedule first, between, again, fresh;
    reused->schedule(input, first);
    reused->schedule(other_input, between);  // buffers reused on another graph must not leak
    reused->schedule(input, again);
    make_policy(name)->schedule(input, fresh);
    verify(input, first);
    EXPECT_EQ(first.nodes, again.nodes);
    EXPECT_EQ(first.batch_begin, again.batch_begin);
    EXPECT_EQ(first.batch_type, again.batch_type);
    EXPECT_EQ(first.nodes, fresh.nodes);
    EXPECT_EQ(first.batch_begin, fresh.batch_begin);
    EXPECT_EQ(first.batch_type, fresh.batch_type);
  }
}

}  // namespace
}  // namespace edb::scheduler
