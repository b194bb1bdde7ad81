// Unit tests for ir/: the op table, shape inference of every op (good shapes and the exact
// UsageError for bad ones), the verifier on hand-built bad graphs, the printer and flop counts.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <edbatch/errors.h>

#include "ir/ir.h"

namespace edb::ir {
namespace {

Shape infer(Op op, std::vector<Shape> args, const Attributes& attrs = {}) {
  return infer_shape(op, args, attrs);
}

// The UsageError message shape inference raises, or "" when it succeeds.
std::string shape_error(Op op, std::vector<Shape> args, const Attributes& attrs = {}) {
  try {
    infer_shape(op, args, attrs);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

Attributes rows(int begin, int end) {
  Attributes a;
  a.begin = begin;
  a.end = end;
  return a;
}

Attributes label(int64_t index) {
  Attributes a;
  a.index = index;
  return a;
}

Attributes constant(float c) {
  Attributes a;
  a.constant = c;
  return a;
}

const std::vector<Op> kUnaryShapePreserving = {Op::scale,   Op::add_const, Op::tanh,       Op::sigmoid,
                                               Op::relu,    Op::softmax,   Op::log_softmax, Op::exp,
                                               Op::log,     Op::sqrt,      Op::abs,         Op::square,
                                               Op::cube,    Op::softsign,  Op::silu,        Op::elu,
                                               Op::selu,    Op::log_sigmoid, Op::erf,       Op::sin,
                                               Op::cos,     Op::sinh,      Op::cosh,        Op::round,
                                               Op::ceil,    Op::floor,     Op::tan,         Op::asinh,
                                               Op::acosh,   Op::atanh,     Op::asin,        Op::acos,
                                               Op::atan,    Op::scale_gradient};

TEST(IrOps, TableMatchesOpsDef) {
  EXPECT_EQ(kOpCount, 68);  // 57 forward ops, the single-node cell call and the backward pass's 10
  std::set<std::string> names;
  for (int i = 0; i < kOpCount; ++i) names.insert(std::string(op_name(static_cast<Op>(i))));
  EXPECT_EQ(names.size(), size_t(kOpCount));
  EXPECT_EQ(op_name(Op::pick_neg_log_softmax), "pick_neg_log_softmax");
  EXPECT_EQ(op_arity(Op::matmul), 2);
  EXPECT_EQ(op_arity(Op::affine), -1);
  EXPECT_EQ(op_arity(Op::matmul_nt), -1);
  EXPECT_EQ(op_arity(Op::tanh_grad), 2);
  EXPECT_EQ(op_arity(Op::tanh), 1);
  EXPECT_EQ(op_arity(Op::input), 0);
  EXPECT_TRUE(has_flag(Op::input, kLeaf));
  EXPECT_TRUE(has_flag(Op::parameter, kLeaf));
  EXPECT_FALSE(has_flag(Op::lookup, kLeaf));
  EXPECT_TRUE(has_flag(Op::scale, kConstant));
  EXPECT_TRUE(has_flag(Op::slice, kRange));
  EXPECT_TRUE(has_flag(Op::pick_neg_log_softmax, kPerMemberIndex));
  EXPECT_TRUE(has_flag(Op::cmult, kElementwise));
  EXPECT_FALSE(has_flag(Op::softmax, kElementwise));
}

TEST(IrShape, GoodShapesOfEveryOp) {
  EXPECT_EQ(infer(Op::matmul, {{384, 256}, {256, 64}}), (Shape{384, 64}));
  EXPECT_EQ(infer(Op::affine, {{384, 1}, {384, 256}, {256, 1}}), (Shape{384, 1}));
  EXPECT_EQ(infer(Op::affine, {{384, 1}, {384, 256}, {256, 1}, {384, 128}, {128, 1}}),
            (Shape{384, 1}));
  EXPECT_EQ(infer(Op::affine, {{3, 4}, {3, 2}, {2, 4}}), (Shape{3, 4}));
  EXPECT_EQ(infer(Op::matvec, {{4, 3}, {3, 1}}), (Shape{4, 1}));
  for (Op op : {Op::add, Op::sub, Op::cmult, Op::div, Op::max, Op::min})
    EXPECT_EQ(infer(op, {{5, 2}, {5, 2}}), (Shape{5, 2}));
  for (Op op : {Op::sum_elements, Op::mean_elements}) EXPECT_EQ(infer(op, {{5, 2}}), (Shape{1, 1}));
  EXPECT_EQ(infer(Op::transpose, {{5, 2}}), (Shape{2, 5}));
  EXPECT_EQ(infer(Op::transpose, {{5, 1}}), (Shape{1, 5}));
  for (Op op : kUnaryShapePreserving) EXPECT_EQ(infer(op, {{7, 3}}, constant(0.5f)), (Shape{7, 3}));
  EXPECT_EQ(infer(Op::sum, {{4, 1}}), (Shape{4, 1}));
  EXPECT_EQ(infer(Op::sum, {{4, 2}, {4, 2}, {4, 2}}), (Shape{4, 2}));
  EXPECT_EQ(infer(Op::concat, {{2, 1}, {3, 1}, {1, 1}}), (Shape{6, 1}));
  EXPECT_EQ(infer(Op::concat, {{2, 3}}), (Shape{2, 3}));
  EXPECT_EQ(infer(Op::slice, {{10, 2}}, rows(3, 7)), (Shape{4, 2}));
  EXPECT_EQ(infer(Op::slice, {{10, 1}}, rows(0, 10)), (Shape{10, 1}));
  EXPECT_EQ(infer(Op::pick_neg_log_softmax, {{5, 1}}, label(4)), (Shape{1, 1}));
  EXPECT_EQ(infer(Op::pick_neg_log_softmax, {{5, 1}}, label(0)), (Shape{1, 1}));
}

TEST(IrShape, BackwardOps) {
  EXPECT_EQ(infer(Op::matmul_tn, {{4, 3}, {4, 2}}), (Shape{3, 2}));
  EXPECT_EQ(infer(Op::matmul_nt, {{4, 1}, {3, 1}}), (Shape{4, 3}));
  EXPECT_EQ(infer(Op::matmul_nt, {{4, 2}, {3, 2}, {4, 2}, {3, 2}}), (Shape{4, 3}));
  for (Op op : {Op::tanh_grad, Op::sigmoid_grad, Op::relu_grad, Op::softmax_grad, Op::log_softmax_grad})
    EXPECT_EQ(infer(op, {{5, 2}, {5, 2}}), (Shape{5, 2}));
  EXPECT_EQ(infer(Op::pick_neg_log_softmax_grad, {{5, 1}, {1, 1}}, label(4)), (Shape{5, 1}));
  EXPECT_EQ(shape_error(Op::matmul_tn, {{4, 3}, {5, 2}}),
            "edb::matmul_tn(): A is 4x3 but B is 5x2 (A^T B needs as many rows in both)");
  EXPECT_EQ(shape_error(Op::matmul_nt, {{4, 1}, {3, 1}, {4, 1}}),
            "edb::matmul_nt(): takes A1, B1, A2, B2, ...: an even count of at least 2 arguments, got 3");
  EXPECT_EQ(shape_error(Op::matmul_nt, {{4, 1}, {3, 1}, {4, 1}, {2, 1}}),
            "edb::matmul_nt(): pair 2 is 4x1, 2x1 but pair 1 is 4x1, 3x1");
  EXPECT_EQ(shape_error(Op::matmul_nt, {{4, 2}, {3, 1}}),
            "edb::matmul_nt(): A is 4x2 but B is 3x1 (A B^T needs as many columns in both)");
  EXPECT_EQ(shape_error(Op::tanh_grad, {{4, 1}, {3, 1}}), "edb::tanh_grad(): argument 2 is 3x1 but argument 1 is 4x1");
  Attributes at;
  at.target = {4, 3};
  EXPECT_EQ(infer(Op::matmul_nt_rows, {{10, 1}, {3, 1}, {4, 1}, {7, 1}}, at), (Shape{4, 3}));
  EXPECT_EQ(shape_error(Op::matmul_nt_rows, {{10, 1}, {3, 1}, {4, 1}}, at),
            "edb::matmul_nt_rows(): takes A1, B1, A2, B2, ...: an even count of at least 2 arguments, got 3");
  EXPECT_EQ(shape_error(Op::matmul_nt_rows, {{10, 1}, {2, 1}}, at),
            "edb::matmul_nt_rows(): argument 2 is 2x1, not a column of at least 3 rows (the output is 4x3)");
  EXPECT_EQ(shape_error(Op::matmul_nt_rows, {{10, 2}, {3, 2}}, at),
            "edb::matmul_nt_rows(): argument 1 is 10x2, not a column of at least 4 rows (the output is 4x3)");
  EXPECT_EQ(shape_error(Op::matmul_nt_rows, {{10, 1}, {3, 1}}), "edb::matmul_nt_rows(): has no output shape (got 0x0)");
  EXPECT_EQ(shape_error(Op::pick_neg_log_softmax_grad, {{5, 1}, {1, 1}}, label(5)),
            "edb::pick_neg_log_softmax_grad(): label 5 is outside [0, 5) for x of 5x1");
}

TEST(IrShape, MatrixProductErrorsNameBothShapes) {
  EXPECT_EQ(shape_error(Op::matmul, {{3, 4}, {5, 6}}),
            "edb::matmul(): A is 3x4 but B is 5x6 (A's columns must equal B's rows)");
  EXPECT_EQ(shape_error(Op::affine, {{384, 1}, {384, 256}, {128, 1}}),
            "edb::affine(): W1 is 384x256 but x1 has 128 rows");
  EXPECT_EQ(shape_error(Op::affine, {{4, 1}, {4, 3}, {3, 1}, {4, 2}, {5, 1}}),
            "edb::affine(): W2 is 4x2 but x2 has 5 rows");
  EXPECT_EQ(shape_error(Op::affine, {{5, 1}, {4, 3}, {3, 1}}),
            "edb::affine(): W1 is 4x3 but b has 5 rows");
  EXPECT_EQ(shape_error(Op::affine, {{4, 1}, {4, 3}, {3, 2}}),
            "edb::affine(): x1 is 3x2 but b has 1 columns");
  EXPECT_EQ(shape_error(Op::affine, {{4, 1}, {4, 3}}),
            "edb::affine(): takes b, W1, x1, W2, x2, ...: an odd count of at least 3 arguments, "
            "got 2");
  EXPECT_EQ(shape_error(Op::affine, {{4, 1}}),
            "edb::affine(): takes b, W1, x1, W2, x2, ...: an odd count of at least 3 arguments, "
            "got 1");
  EXPECT_EQ(shape_error(Op::matvec, {{4, 3}, {2, 1}}), "edb::matvec(): M is 4x3 but v has 2 rows");
  EXPECT_EQ(shape_error(Op::matvec, {{4, 3}, {3, 2}}),
            "edb::matvec(): v must be a column vector, got 3x2");
}

TEST(IrShape, ElementwiseAndDataMovementErrorsNameBothShapes) {
  for (Op op : {Op::add, Op::sub, Op::cmult, Op::div, Op::max, Op::min}) {
    EXPECT_EQ(shape_error(op, {{3, 1}, {4, 1}}),
              "edb::" + std::string(op_name(op)) + "(): argument 2 is 4x1 but argument 1 is 3x1");
  }
  EXPECT_EQ(shape_error(Op::sum, {{3, 1}, {3, 1}, {3, 2}}),
            "edb::sum(): argument 3 is 3x2 but argument 1 is 3x1");
  EXPECT_EQ(shape_error(Op::sum, {}), "edb::sum(): needs at least 1 arguments, got 0");
  EXPECT_EQ(shape_error(Op::concat, {{2, 1}, {2, 3}}),
            "edb::concat(): argument 2 is 2x3 but argument 1 is 2x1 (column counts must match)");
  EXPECT_EQ(shape_error(Op::concat, {}), "edb::concat(): needs at least 1 arguments, got 0");
  EXPECT_EQ(shape_error(Op::slice, {{10, 2}}, rows(7, 3)),
            "edb::slice(): rows [7, 3) are not a non-empty range inside 10x2");
  EXPECT_EQ(shape_error(Op::slice, {{10, 2}}, rows(0, 11)),
            "edb::slice(): rows [0, 11) are not a non-empty range inside 10x2");
  EXPECT_EQ(shape_error(Op::slice, {{10, 2}}, rows(-1, 2)),
            "edb::slice(): rows [-1, 2) are not a non-empty range inside 10x2");
  EXPECT_EQ(shape_error(Op::slice, {{10, 2}}, rows(3, 3)),
            "edb::slice(): rows [3, 3) are not a non-empty range inside 10x2");
  EXPECT_EQ(shape_error(Op::pick_neg_log_softmax, {{5, 2}}, label(0)),
            "edb::pick_neg_log_softmax(): x must be a column vector, got 5x2");
  EXPECT_EQ(shape_error(Op::pick_neg_log_softmax, {{5, 1}}, label(5)),
            "edb::pick_neg_log_softmax(): label 5 is outside [0, 5) for x of 5x1");
  EXPECT_EQ(shape_error(Op::pick_neg_log_softmax, {{5, 1}}, label(-1)),
            "edb::pick_neg_log_softmax(): label -1 is outside [0, 5) for x of 5x1");
}

TEST(IrShape, ArityAndEmptyShapesOfEveryComputedOp) {
  for (Op op : kUnaryShapePreserving) {
    const std::string prefix = "edb::" + std::string(op_name(op)) + "(): ";
    EXPECT_EQ(shape_error(op, {{3, 1}, {3, 1}}), prefix + "takes 1 arguments, got 2");
    EXPECT_EQ(shape_error(op, {{0, 3}}), prefix + "argument has empty shape 0x3");
  }
  EXPECT_EQ(shape_error(Op::matmul, {{3, 3}}), "edb::matmul(): takes 2 arguments, got 1");
  EXPECT_EQ(shape_error(Op::add, {{3, 1}, {3, 1}, {3, 1}}), "edb::add(): takes 2 arguments, got 3");
  EXPECT_EQ(shape_error(Op::concat, {{2, 1}, {2, 0}}), "edb::concat(): argument has empty shape 2x0");
  for (Op leaf : {Op::input, Op::parameter, Op::lookup})
    EXPECT_THROW(infer(leaf, {}), InternalError) << op_name(leaf);
}

// x: 3x1 input, W: 2x3 parameter "m/W", y = W x, z = tanh(y).
struct TinyGraph {
  Graph graph;
  std::vector<float> w_values = std::vector<float>(6, 0.5f);
  TinyGraph() {
    const float x[3] = {1, 2, 3};
    Attributes in;
    in.index = graph.add_constants(x);
    graph.add(Op::input, {}, {3, 1}, in);
    Attributes p;
    p.parameter = graph.add_parameter({42, "m/W", {2, 3}, w_values.data()});
    graph.add(Op::parameter, {}, {2, 3}, p);
    const NodeId wx[2] = {1, 0};
    graph.add(Op::matmul, wx, {2, 1});
    const NodeId y[1] = {2};
    graph.add(Op::tanh, y, {2, 1});
  }
};

std::string verify_error(const Graph& graph) {
  try {
    verify(graph);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(IrVerify, AcceptsAWellFormedGraph) {
  TinyGraph g;
  EXPECT_NO_THROW(verify(g.graph));
  EXPECT_EQ(g.graph.size(), 4u);
  EXPECT_EQ(g.graph.leaf_data(0)[2], 3.0f);
  EXPECT_EQ(g.graph.leaf_data(1), g.w_values.data());
  EXPECT_EQ(g.graph.leaf_data(2), nullptr);
  EXPECT_EQ(g.graph.add_parameter({42, "m/W", {2, 3}, g.w_values.data()}), 0u);  // deduplicated
}

TEST(IrVerify, ArgumentDefinedAfterUse) {
  TinyGraph g;
  const NodeId later[1] = {5};
  g.graph.add(Op::tanh, later, {2, 1});  // node 4 reads node 5
  const NodeId y[1] = {2};
  g.graph.add(Op::tanh, y, {2, 1});
  EXPECT_EQ(verify_error(g.graph),
            "edbatch internal error: ir::verify: node %4 (tanh): argument %5 is not defined before "
            "use");
  Graph self;
  const NodeId own[1] = {0};
  self.add(Op::relu, own, {1, 1});
  EXPECT_EQ(verify_error(self),
            "edbatch internal error: ir::verify: node %0 (relu): argument %0 is not defined before "
            "use");
}

// matmul_nt_rows's factors must lie inside its arguments at the rows the graph's row pool gives.
TEST(IrVerify, RowsReadInPlaceLieInsideTheirArguments) {
  Graph graph;
  const std::vector<float> values(12, 1.0f);
  auto column = [&](int rows) {
    Attributes attrs;
    attrs.index = graph.add_constants(std::span(values).first(size_t(rows)));
    return graph.add(Op::input, {}, Shape{rows, 1}, attrs);
  };
  const NodeId args[2] = {column(10), column(3)};
  Attributes at;
  at.target = {4, 3};
  const int32_t inside[2] = {6, 0};
  at.index = graph.add_rows(inside);
  graph.add(Op::matmul_nt_rows, args, at.target, at);
  EXPECT_EQ(verify_error(graph), "");
  EXPECT_NE(print(graph).find("matmul_nt_rows(%0, %1) : 4x3 at=6,0"), std::string::npos) << print(graph);
  const int32_t past[2] = {7, 0};
  at.index = graph.add_rows(past);
  graph.add(Op::matmul_nt_rows, args, at.target, at);
  EXPECT_EQ(verify_error(graph),
            "edbatch internal error: ir::verify: node %3 (matmul_nt_rows): argument 1's factor, rows [7, 11), is not "
            "inside its 10x1");
  Graph short_pool;
  const NodeId a = short_pool.add(Op::input, {}, Shape{4, 1}, {});
  short_pool.add_constants(std::span(values).first(4));
  const NodeId pair[2] = {a, a};
  Attributes none;
  none.target = {4, 4};
  short_pool.add(Op::matmul_nt_rows, pair, none.target, none);
  EXPECT_EQ(verify_error(short_pool),
            "edbatch internal error: ir::verify: node %1 (matmul_nt_rows): reads rows [0, 2) of a pool of 0");
}

// A batch call's table: each member's terms lie inside their nodes at the rows it gives, one
// member's terms after another, and its frame holds every member's.
TEST(IrVerify, BatchCallsTermsLieInsideTheirNodes) {
  CellBody cell;
  cell.name = "step";
  cell.arguments = {Shape{3, 1}, Shape{2, 2}};
  cell.frame_floats = 5;
  Graph graph;
  const std::vector<float> values(12, 1.0f);
  Attributes attrs;
  attrs.index = graph.add_constants(values);
  const NodeId column = graph.add(Op::input, {}, Shape{12, 1}, attrs);
  const uint32_t index = graph.add_cell(&cell);
  // Two members; argument 2 is the sum of two terms: rows 0 and 4 of the column.
  const int32_t terms[2] = {1, 2};
  const NodeId args[6] = {column, column, column, column, column, column};
  const int32_t rows[6] = {9, 0, 4, 0, 8, 8};
  const NodeId batch = add_call_batch(graph, index, 2, terms, args, rows);
  EXPECT_EQ(verify_error(graph), "");
  EXPECT_TRUE(is_call_batch(graph.node(batch)));
  EXPECT_EQ(graph.node(batch).shape, (Shape{10, 1}));
  EXPECT_EQ(call_batch(graph, batch).terms_per_member(), 3);
  EXPECT_NE(print(graph).find("cell=step members=2 terms=1,2 at=9,0,4,0,8,8"), std::string::npos) << print(graph);
  const int32_t past[6] = {9, 0, 4, 0, 9, 8};  // member 2's second argument would end at row 13
  add_call_batch(graph, index, 2, terms, args, past);
  EXPECT_EQ(verify_error(graph),
            "edbatch internal error: ir::verify: node %2 (call): member 2's argument 2 (2x2) at row 9 is not inside "
            "its 12x1");
  Graph few;
  few.add_constants(values);
  const NodeId c = few.add(Op::input, {}, Shape{12, 1}, attrs);
  const uint32_t at = few.add_cell(&cell);
  add_call_batch(few, at, 2, terms, std::span(args).first(5), std::span(rows).first(5));
  EXPECT_EQ(c, 0u);
  EXPECT_EQ(verify_error(few),
            "edbatch internal error: ir::verify: node %1 (call): has 5 arguments for 2 members of 3 terms each");
}

TEST(IrVerify, WrongShapeWrongArityAndFailedInference) {
  {
    TinyGraph g;
    const NodeId z[1] = {3};
    g.graph.add(Op::sigmoid, z, {4, 1});
    EXPECT_EQ(verify_error(g.graph),
              "edbatch internal error: ir::verify: node %4 (sigmoid): shape 4x1 but inference "
              "gives 2x1");
  }
  {
    TinyGraph g;
    const NodeId one[1] = {3};
    g.graph.add(Op::add, one, {2, 1});
    EXPECT_EQ(verify_error(g.graph),
              "edbatch internal error: ir::verify: node %4 (add): has 1 arguments, op takes 2");
  }
  {
    TinyGraph g;  // x is 3x1, y is 2x1: the add cannot be inferred; that is internal here
    const NodeId xy[2] = {0, 2};
    g.graph.add(Op::add, xy, {3, 1});
    EXPECT_EQ(verify_error(g.graph),
              "edbatch internal error: ir::verify: node %4 (add): shape inference fails: "
              "edb::add(): argument 2 is 2x1 but argument 1 is 3x1");
  }
  {
    TinyGraph g;
    Attributes p;
    p.parameter = 7;
    g.graph.add(Op::parameter, {}, {2, 3}, p);
    EXPECT_EQ(verify_error(g.graph),
              "edbatch internal error: ir::verify: node %4 (parameter): parameter index out of "
              "range");
  }
  {
    TinyGraph g;
    Attributes p;  // parameter 0 is 2x3
    g.graph.add(Op::parameter, {}, {3, 2}, p);
    EXPECT_EQ(verify_error(g.graph),
              "edbatch internal error: ir::verify: node %4 (parameter): shape 3x2 but inference "
              "gives 2x3");
  }
}

TEST(IrVerify, LookupEntryOutsideTable) {
  Graph graph;
  std::vector<float> table(4 * 10, 0.0f);
  Attributes a;
  a.parameter = graph.add_parameter({9, "m/E", {4, 10}, table.data()});
  a.index = 10;
  graph.add(Op::lookup, {}, {4, 1}, a);
  EXPECT_THROW(verify(graph), InternalError);
}

TEST(IrVerify, InputPastTheConstantPool) {
  Graph graph;
  const float two[2] = {1, 2};
  Attributes a;
  a.index = graph.add_constants(two);
  graph.add(Op::input, {}, {5, 1}, a);  // 5 floats from a pool of 2
  EXPECT_THROW(verify(graph), InternalError);
}

TEST(IrPrint, TinyGraphOneLinePerNode) {
  TinyGraph g;
  const NodeId z[1] = {3};
  g.graph.add(Op::scale, z, {2, 1}, constant(0.5f));
  const NodeId s[1] = {4};
  g.graph.add(Op::slice, s, {1, 1}, rows(0, 1));
  std::vector<float> table(4 * 10, 0.0f);
  Attributes look;
  look.parameter = g.graph.add_parameter({43, "m/E", {4, 10}, table.data()});
  look.index = 7;
  g.graph.add(Op::lookup, {}, {4, 1}, look);
  g.graph.add(Op::pick_neg_log_softmax, z, {1, 1}, label(1));
  EXPECT_EQ(print(g.graph),
            "%0 = input() : 3x1\n"
            "%1 = parameter() : 2x3 param=m/W\n"
            "%2 = matmul(%1, %0) : 2x1\n"
            "%3 = tanh(%2) : 2x1\n"
            "%4 = scale(%3) : 2x1 constant=0.5\n"
            "%5 = slice(%4) : 1x1 rows=[0,1)\n"
            "%6 = lookup() : 4x1 param=m/E index=7\n"
            "%7 = pick_neg_log_softmax(%3) : 1x1 index=1\n");
  EXPECT_EQ(print(Graph{}), "");
}

TEST(IrFlops, MatrixProductsAndElementwise) {
  Graph graph;
  auto leaf = [&](Shape s) {
    std::vector<float> zeros(size_t(s.size()), 0.0f);
    Attributes a;
    a.index = graph.add_constants(zeros);
    return graph.add(Op::input, {}, s, a);
  };
  const NodeId b = leaf({384, 1}), w1 = leaf({384, 256}), x1 = leaf({256, 1});
  const NodeId w2 = leaf({384, 128}), x2 = leaf({128, 1}), xs = leaf({256, 64});
  const NodeId mm[2] = {w1, xs};
  const NodeId matmul = graph.add(Op::matmul, mm, {384, 64});
  const NodeId mv[2] = {w1, x1};
  const NodeId matvec = graph.add(Op::matvec, mv, {384, 1});
  const NodeId one_term[3] = {b, w1, x1};
  const NodeId affine1 = graph.add(Op::affine, one_term, {384, 1});
  const NodeId two_terms[5] = {b, w1, x1, w2, x2};
  const NodeId affine2 = graph.add(Op::affine, two_terms, {384, 1});
  const NodeId u[1] = {affine2};
  const NodeId tanh = graph.add(Op::tanh, u, {384, 1});
  const NodeId ab[2] = {affine1, affine2};
  const NodeId add = graph.add(Op::cmult, ab, {384, 1});
  const NodeId abc[3] = {affine1, affine2, tanh};
  const NodeId sum = graph.add(Op::sum, abc, {384, 1});
  const NodeId concat = graph.add(Op::concat, ab, {768, 1});
  const NodeId softmax = graph.add(Op::softmax, u, {384, 1});
  const NodeId xs_only[1] = {xs};
  const NodeId sum_elements = graph.add(Op::sum_elements, xs_only, {1, 1});
  const NodeId transpose = graph.add(Op::transpose, xs_only, {64, 256});
  const NodeId log = graph.add(Op::log, u, {384, 1});
  ASSERT_NO_THROW(verify(graph));

  EXPECT_EQ(node_flops(graph, b), 0);
  EXPECT_EQ(node_flops(graph, matmul), 2 * 384 * 256 * 64);
  EXPECT_EQ(node_flops(graph, matvec), 2 * 384 * 256);
  EXPECT_EQ(node_flops(graph, affine1), 2 * 384 * 256 + 384);
  EXPECT_EQ(node_flops(graph, affine2), 2 * 384 * 256 + 2 * 384 * 128 + 2 * 384);
  EXPECT_EQ(node_flops(graph, tanh), 384);
  EXPECT_EQ(node_flops(graph, add), 384);
  EXPECT_EQ(node_flops(graph, sum), 2 * 384);
  EXPECT_EQ(node_flops(graph, concat), 0);
  EXPECT_EQ(node_flops(graph, softmax), 3 * 384);
  EXPECT_EQ(node_flops(graph, sum_elements), 256 * 64);
  EXPECT_EQ(node_flops(graph, transpose), 0);
  EXPECT_EQ(node_flops(graph, log), 384);
}

}  // namespace
}  // namespace edb::ir

namespace edb::ir {
namespace {

TEST(IrShape, ReshapeKeepsTheValueCount) {
  Attributes to;
  to.target = {4, 4};
  EXPECT_EQ(infer_shape(Op::reshape, std::vector<Shape>{{16, 1}}, to), (Shape{4, 4}));
  to.target = {3, 5};
  try {
    infer_shape(Op::reshape, std::vector<Shape>{{16, 1}}, to);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "edb::reshape(): cannot view 16x1 (16 values) as 3x5");
  }
}

}  // namespace
}  // namespace edb::ir
