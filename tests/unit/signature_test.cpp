// Unit tests for ir/signature: exact signature strings, and the cases where DyNet's hashed
// signatures batched wrong things together (or failed to batch equal ones).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "ir/signature.h"

namespace edb::ir {
namespace {

// Builds graphs by hand: leaves and parameters with chosen identities.
class Builder {
 public:
  NodeId input(Shape s) {
    std::vector<float> zeros(size_t(s.size()), 0.0f);
    Attributes a;
    a.index = graph.add_constants(zeros);
    return graph.add(Op::input, {}, s, a);
  }
  NodeId param(uint64_t uid, const std::string& name, Shape s) {
    Attributes a;
    a.parameter = graph.add_parameter({uid, name, s, nullptr});
    return graph.add(Op::parameter, {}, s, a);
  }
  NodeId lookup(uint64_t uid, const std::string& name, Shape table, int64_t entry) {
    Attributes a;
    a.parameter = graph.add_parameter({uid, name, table, nullptr});
    a.index = entry;
    return graph.add(Op::lookup, {}, {table.rows, 1}, a);
  }
  NodeId op(Op op, std::vector<NodeId> args, const Attributes& attrs = {}) {
    std::vector<Shape> shapes;
    for (NodeId a : args) shapes.push_back(graph.node(a).shape);
    return graph.add(op, args, infer_shape(op, shapes, attrs), attrs);
  }
  NodeId scale(NodeId x, float c) {
    Attributes a;
    a.constant = c;
    return op(Op::scale, {x}, a);
  }
  NodeId add_const(NodeId x, float c) {
    Attributes a;
    a.constant = c;
    return op(Op::add_const, {x}, a);
  }
  NodeId slice(NodeId x, int begin, int end) {
    Attributes a;
    a.begin = begin;
    a.end = end;
    return op(Op::slice, {x}, a);
  }
  NodeId pick(NodeId x, int64_t label) {
    Attributes a;
    a.index = label;
    return op(Op::pick_neg_log_softmax, {x}, a);
  }
  Graph graph;
};

TEST(Signature, ExactStrings) {
  Builder g;
  const NodeId b = g.param(1, "model/b_iou", {384, 1});
  const NodeId u = g.param(2, "model/U_iou", {384, 256});
  const NodeId x = g.input({256, 1});
  const NodeId affine = g.op(Op::affine, {b, u, x});
  EXPECT_EQ(signature(g.graph, affine),
            "affine(param:model/b_iou:384x1, param:model/U_iou:384x256, 256x1)->384x1");
  const NodeId v = g.input({3, 1});
  EXPECT_EQ(signature(g.graph, g.scale(v, 0.1f)), "scale(3x1) constant=0x3dcccccd->3x1");
  EXPECT_EQ(signature(g.graph, g.add_const(v, -2.0f)), "add_const(3x1) constant=0xc0000000->3x1");
  EXPECT_EQ(signature(g.graph, g.slice(affine, 2, 5)), "slice(384x1) rows=[2,5)->3x1");
  EXPECT_EQ(signature(g.graph, g.lookup(3, "model/E", {8, 100}, 17)),
            "lookup(table:model/E:8x100)->8x1");
  EXPECT_EQ(signature(g.graph, g.pick(v, 1)), "pick_neg_log_softmax(3x1)->1x1");
  EXPECT_EQ(signature(g.graph, g.op(Op::cmult, {v, v})), "cmult(3x1, 3x1)->3x1");
  EXPECT_EQ(signature(g.graph, g.op(Op::concat, {v, v, v})), "concat(3x1, 3x1, 3x1)->9x1");
  EXPECT_EQ(signature(g.graph, g.op(Op::matmul, {u, g.input({256, 4})})),
            "matmul(param:model/U_iou:384x256, 256x4)->384x4");
}

// A long argument list that repeats one group (a weight gradient's (dy, x) pairs, a sum of many
// values of one shape) is named and keyed by the group and its repetitions: still one type per
// exact list, but a key of a few words however long the list (issue 31: the types of every
// distinct length were kept, each as long as its list, and a training run's memory grew with them).
TEST(Signature, LongRepeatedArgumentListsAreKeyedByTheirGroup) {
  Builder g;
  const NodeId dy = g.input({5, 1}), x = g.input({1, 1}), z = g.input({2, 1});
  auto pairs = [&](int n, NodeId second) {
    std::vector<NodeId> args;
    for (int i = 0; i < n; ++i) {
      args.push_back(dy);
      args.push_back(second);
    }
    return args;
  };
  const NodeId long1 = g.op(Op::matmul_nt, pairs(1000, x)), long2 = g.op(Op::matmul_nt, pairs(1000, x));
  const NodeId longer = g.op(Op::matmul_nt, pairs(1001, x)), other = g.op(Op::matmul_nt, pairs(1000, z));
  EXPECT_EQ(signature(g.graph, long1), "matmul_nt(1000 x (5x1, 1x1))->5x1");
  EXPECT_EQ(signature(g.graph, other), "matmul_nt(1000 x (5x1, 2x1))->5x2");
  SignatureTable table;
  const TypeId t = table.intern(g.graph, long1);
  EXPECT_EQ(table.intern(g.graph, long2), t);
  EXPECT_NE(table.intern(g.graph, longer), t);
  EXPECT_NE(table.intern(g.graph, other), t);
  // A short list, or a long one that does not repeat, is keyed argument by argument as before.
  EXPECT_EQ(signature(g.graph, g.op(Op::matmul_nt, pairs(4, x))), "matmul_nt(5x1, 1x1, 5x1, 1x1, 5x1, 1x1, 5x1, 1x1)->5x1");
  std::vector<NodeId> mixed = pairs(6, x);
  mixed.push_back(dy);
  mixed.push_back(g.param(7, "m/p", {1, 1}));  // a parameter: another identity, so no repetition
  const NodeId irregular = g.op(Op::matmul_nt, mixed);
  EXPECT_EQ(signature(g.graph, irregular).rfind("matmul_nt(5x1, 1x1, 5x1, 1x1,", 0), 0u);
  EXPECT_NE(table.intern(g.graph, irregular), table.intern(g.graph, g.op(Op::matmul_nt, pairs(7, x))));
}

TEST(Signature, BytesGrowWithEachNewTypeAndResetForgetsThem) {
  Builder b;
  const NodeId x = b.input({4, 1});
  const NodeId tanh = b.op(Op::tanh, {x});
  const NodeId sigmoid = b.op(Op::sigmoid, {x});
  SignatureTable table;
  const size_t empty = table.bytes();
  table.intern(b.graph, tanh);
  const size_t one = table.bytes();
  EXPECT_GT(one, empty);
  table.intern(b.graph, tanh);  // seen: nothing new
  EXPECT_EQ(table.bytes(), one);
  table.intern(b.graph, sigmoid);
  // The second type adds its key and its name, which print longer than nothing.
  EXPECT_GE(table.bytes() - one, table.name(table.intern(b.graph, sigmoid)).size() * 2);
  table.reset();
  EXPECT_EQ(table.bytes(), empty);
}

TEST(Signature, LeavesHaveNoType) {
  Builder g;
  const NodeId x = g.input({3, 1});
  const NodeId w = g.param(1, "m/W", {3, 3});
  SignatureTable table;
  EXPECT_EQ(table.intern(g.graph, x), kNoType);
  EXPECT_EQ(table.intern(g.graph, w), kNoType);
  EXPECT_EQ(table.size(), 0u);
}

TEST(Signature, DifferentConstantsNeverShare) {
  Builder g;
  const NodeId x = g.input({3, 1});
  const NodeId a = g.scale(x, 0.1f), b = g.scale(x, 0.10000001f), c = g.scale(x, 0.1f);
  const NodeId d = g.add_const(x, 0.1f), e = g.scale(x, 0.0f), f = g.scale(x, -0.0f);
  ASSERT_NE(0.1f, 0.10000001f);
  SignatureTable table;
  const std::vector<TypeId> types = table.assign(g.graph);
  EXPECT_NE(types[a], types[b]);
  EXPECT_EQ(types[a], types[c]);
  EXPECT_NE(types[a], types[d]);
  EXPECT_NE(types[e], types[f]);  // exact bits: 0 and -0 differ
  EXPECT_EQ(table.name(types[b]), "scale(3x1) constant=0x3dccccce->3x1");
  EXPECT_EQ(table.size(), 5u);
}

TEST(Signature, DifferentWeightNeverSharesEvenWithEqualShapes) {
  Builder g;
  const NodeId w1 = g.param(1, "m/W1", {4, 3}), w2 = g.param(2, "m/W2", {4, 3});
  const NodeId b1 = g.param(3, "m/b1", {4, 1}), b2 = g.param(4, "m/b2", {4, 1});
  const NodeId x = g.input({3, 1}), y = g.input({3, 1}), m = g.input({4, 3});
  const NodeId mm1 = g.op(Op::matmul, {w1, x}), mm2 = g.op(Op::matmul, {w2, x});
  const NodeId mm1y = g.op(Op::matmul, {w1, y});
  const NodeId mm_input = g.op(Op::matmul, {m, x});  // an input matrix, not a shared weight
  const NodeId af1 = g.op(Op::affine, {b1, w1, x}), af2 = g.op(Op::affine, {b2, w1, x});
  const NodeId af3 = g.op(Op::affine, {b1, w2, y}), af1y = g.op(Op::affine, {b1, w1, y});
  SignatureTable table;
  const std::vector<TypeId> t = table.assign(g.graph);
  EXPECT_NE(t[mm1], t[mm2]);
  EXPECT_EQ(t[mm1], t[mm1y]);
  EXPECT_NE(t[mm1], t[mm_input]);
  EXPECT_NE(t[af1], t[af2]);  // only the bias differs
  EXPECT_NE(t[af1], t[af3]);  // only the weight differs
  EXPECT_EQ(t[af1], t[af1y]);
}

TEST(Signature, SameOpWeightsAndShapesShareAcrossGraphs) {
  Builder g1;
  const NodeId b = g1.param(11, "m/b", {4, 1}), w = g1.param(12, "m/W", {4, 3});
  const NodeId x = g1.input({3, 1});
  const NodeId af = g1.op(Op::affine, {b, w, x});
  const NodeId th = g1.op(Op::tanh, {af});

  // Different node ids and parameter registration order, same computation.
  Builder g2;
  const NodeId y = g2.input({3, 1});
  const NodeId other = g2.op(Op::sigmoid, {y});
  const NodeId w2 = g2.param(12, "m/W", {4, 3}), b2 = g2.param(11, "m/b", {4, 1});
  const NodeId af2 = g2.op(Op::affine, {b2, w2, other});
  const NodeId th2 = g2.op(Op::tanh, {af2});
  ASSERT_NE(af, af2);
  ASSERT_NE(g1.graph.node(w).attrs.parameter, g2.graph.node(w2).attrs.parameter);

  SignatureTable table;
  const std::vector<TypeId> t1 = table.assign(g1.graph);
  EXPECT_EQ(t1[af], 0u);  // dense ids in first-seen order
  EXPECT_EQ(t1[th], 1u);
  const std::vector<TypeId> t2 = table.assign(g2.graph);
  EXPECT_EQ(t2[af2], t1[af]);
  EXPECT_EQ(t2[th2], t1[th]);
  EXPECT_EQ(t2[other], 2u);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.find("affine(param:m/b:4x1, param:m/W:4x3, 3x1)->4x1"), std::optional<TypeId>(0));
  EXPECT_EQ(table.find("tanh(4x1)->4x1"), std::optional<TypeId>(1));
  EXPECT_EQ(table.find("tanh(5x1)->5x1"), std::nullopt);

  // A second table (another engine or process) prints the same strings.
  SignatureTable fresh;
  const std::vector<TypeId> t3 = fresh.assign(g2.graph);
  EXPECT_EQ(fresh.name(t3[af2]), table.name(t1[af]));
}

TEST(Signature, AssignFromAnOffsetKeepsEarlierTypes) {
  Builder g;
  const NodeId x = g.input({2, 1});
  const NodeId a = g.op(Op::tanh, {x});
  SignatureTable table;
  std::vector<TypeId> types;
  table.assign(g.graph, 0, types);
  const NodeId b = g.op(Op::relu, {a});
  const NodeId c = g.op(Op::tanh, {b});
  table.assign(g.graph, b, types);
  ASSERT_EQ(types.size(), 4u);
  EXPECT_EQ(types[x], kNoType);
  EXPECT_EQ(types[a], 0u);
  EXPECT_EQ(types[b], 1u);
  EXPECT_EQ(types[c], 0u);
}

TEST(Signature, LookupsSharePerTableNotPerRow) {
  Builder g;
  const NodeId e3 = g.lookup(1, "m/E", {8, 100}, 3), e97 = g.lookup(1, "m/E", {8, 100}, 97);
  const NodeId f3 = g.lookup(2, "m/F", {8, 100}, 3);
  SignatureTable table;
  const std::vector<TypeId> t = table.assign(g.graph);
  EXPECT_EQ(t[e3], t[e97]);
  EXPECT_NE(t[e3], t[f3]);
  EXPECT_EQ(g.graph.parameters().size(), 2u);
}

TEST(Signature, PickLabelsShareSliceRangesDoNot) {
  Builder g;
  const NodeId x = g.input({5, 1}), y = g.input({5, 1});
  const NodeId p0 = g.pick(x, 0), p4 = g.pick(y, 4);
  const NodeId s02 = g.slice(x, 0, 2), s13 = g.slice(x, 1, 3), s02y = g.slice(y, 0, 2);
  SignatureTable table;
  const std::vector<TypeId> t = table.assign(g.graph);
  EXPECT_EQ(t[p0], t[p4]);
  EXPECT_NE(t[s02], t[s13]);
  EXPECT_EQ(t[s02], t[s02y]);
  EXPECT_EQ(table.name(t[s13]), "slice(5x1) rows=[1,3)->2x1");
}

TEST(Signature, ArgumentShapesAreKeyed) {
  Builder g;
  const NodeId a = g.op(Op::tanh, {g.input({4, 1})});
  const NodeId b = g.op(Op::tanh, {g.input({4, 2})});
  const NodeId c = g.op(Op::tanh, {g.input({2, 4})});
  SignatureTable table;
  const std::vector<TypeId> t = table.assign(g.graph);
  EXPECT_NE(t[a], t[b]);
  EXPECT_NE(t[b], t[c]);
}

TEST(Signature, SameNamedParametersOfDifferentModelsGetASuffix) {
  Builder g;
  const NodeId w1 = g.param(101, "model/W", {2, 2}), w2 = g.param(102, "model/W", {2, 2});
  const NodeId w3 = g.param(103, "model/W", {2, 2});
  const NodeId x = g.input({2, 1});
  const NodeId a = g.op(Op::matmul, {w1, x}), b = g.op(Op::matmul, {w2, x});
  const NodeId c = g.op(Op::matmul, {w3, x}), a2 = g.op(Op::matmul, {w1, x});
  SignatureTable table;
  const std::vector<TypeId> t = table.assign(g.graph);
  EXPECT_NE(t[a], t[b]);
  EXPECT_NE(t[b], t[c]);
  EXPECT_EQ(t[a], t[a2]);
  const std::string base = "matmul(param:model/W:2x2, 2x1)->2x1";
  EXPECT_EQ(table.name(t[a]), base);
  EXPECT_EQ(table.name(t[b]), base + " #2");
  EXPECT_EQ(table.name(t[c]), base + " #3");
  EXPECT_EQ(table.find(base + " #2"), std::optional<TypeId>(t[b]));
}

TEST(Signature, TwoModelsThroughThePublicApi) {
  Model first("model", 1), second("model", 2);
  const Parameter w1 = first.add_parameter("W", 2, 2), w2 = second.add_parameter("W", 2, 2);
  Engine engine;
  Trace trace(engine);
  const Expr x = trace.input({1.0f, 2.0f});
  const Expr a = matmul(trace.param(w1), x), b = matmul(trace.param(w2), x);
  const Expr c = matmul(trace.param(w1), x * 3.0f);
  trace.run();
  EXPECT_EQ(engine.signature_count(), 3u);  // two matmuls by weight, one scale
  EXPECT_NE(a.value().data, b.value().data);
  EXPECT_FLOAT_EQ(c.value()(1), 3 * a.value()(1));
}

}  // namespace
}  // namespace edb::ir
