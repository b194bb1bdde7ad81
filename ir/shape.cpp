// Shape inference and flop counts per op. Errors name the public function and both shapes,
// because they surface while the user records the op.
#include <cmath>

#include "edbatch/errors.h"
#include "ir/ir.h"

namespace edb::ir {

namespace {

[[noreturn]] void shape_error(Op op, const std::string& what) {
  throw UsageError("edb::" + std::string(op_name(op)) + "(): " + what);
}

void expect_same(Op op, std::span<const Shape> args) {
  for (size_t i = 1; i < args.size(); ++i)
    if (!(args[i] == args[0]))
      shape_error(op, "argument " + std::to_string(i + 1) + " is " + to_string(args[i]) +
                          " but argument 1 is " + to_string(args[0]));
}

void expect_count(Op op, std::span<const Shape> args, size_t at_least) {
  if (args.size() < at_least)
    shape_error(op, "needs at least " + std::to_string(at_least) + " arguments, got " +
                        std::to_string(args.size()));
}

Shape infer_affine(std::span<const Shape> args) {
  const Op op = Op::affine;
  if (args.size() < 3 || args.size() % 2 == 0)
    shape_error(op, "takes b, W1, x1, W2, x2, ...: an odd count of at least 3 arguments, got " +
                        std::to_string(args.size()));
  const Shape b = args[0];
  for (size_t i = 1; i < args.size(); i += 2) {
    const Shape w = args[i], x = args[i + 1];
    if (w.cols == x.rows && w.rows == b.rows && x.cols == b.cols) continue;
    // The pair's names only for the message (built on every call, they were a third of recording
    // an affine).
    const std::string wn = "W" + std::to_string(i / 2 + 1), xn = "x" + std::to_string(i / 2 + 1);
    if (w.cols != x.rows)
      shape_error(op, wn + " is " + to_string(w) + " but " + xn + " has " +
                          std::to_string(x.rows) + " rows");
    if (w.rows != b.rows)
      shape_error(op, wn + " is " + to_string(w) + " but b has " + std::to_string(b.rows) +
                          " rows");
    shape_error(op, xn + " is " + to_string(x) + " but b has " + std::to_string(b.cols) + " columns");
  }
  return b;
}

// A1 B1^T + A2 B2^T + ...: every A of one shape, every B of one shape, as many columns as the A.
Shape infer_matmul_nt(std::span<const Shape> args) {
  const Op op = Op::matmul_nt;
  if (args.size() < 2 || args.size() % 2 != 0)
    shape_error(op, "takes A1, B1, A2, B2, ...: an even count of at least 2 arguments, got " +
                        std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); i += 2) {
    if (!(args[i] == args[0]) || !(args[i + 1] == args[1]))
      shape_error(op, "pair " + std::to_string(i / 2 + 1) + " is " + to_string(args[i]) + ", " +
                          to_string(args[i + 1]) + " but pair 1 is " + to_string(args[0]) + ", " +
                          to_string(args[1]));
  }
  if (args[0].cols != args[1].cols)
    shape_error(op, "A is " + to_string(args[0]) + " but B is " + to_string(args[1]) +
                        " (A B^T needs as many columns in both)");
  return {args[0].rows, args[1].rows};
}

// matmul_nt over columns read in place: pairs of columns, each A at least target.rows rows long and
// each B target.cols (where in them the factors lie, Graph::rows, ir::verify checks).
Shape infer_matmul_nt_rows(std::span<const Shape> args, Shape target) {
  const Op op = Op::matmul_nt_rows;
  if (args.size() < 2 || args.size() % 2 != 0)
    shape_error(op, "takes A1, B1, A2, B2, ...: an even count of at least 2 arguments, got " +
                        std::to_string(args.size()));
  if (target.rows <= 0 || target.cols <= 0) shape_error(op, "has no output shape (got " + to_string(target) + ")");
  for (size_t i = 0; i < args.size(); ++i) {
    const int32_t factor = i % 2 == 0 ? target.rows : target.cols;
    if (args[i].cols != 1 || args[i].rows < factor)
      shape_error(op, "argument " + std::to_string(i + 1) + " is " + to_string(args[i]) + ", not a column of at least " +
                          std::to_string(factor) + " rows (the output is " + to_string(target) + ")");
  }
  return target;
}

}  // namespace

Shape infer_shape(Op op, std::span<const Shape> args, const Attributes& attrs) {
  const int arity = op_arity(op);
  if (arity >= 0 && static_cast<int>(args.size()) != arity)
    shape_error(op, "takes " + std::to_string(arity) + " arguments, got " +
                        std::to_string(args.size()));
  for (const Shape& s : args)
    if (s.rows <= 0 || s.cols <= 0) shape_error(op, "argument has empty shape " + to_string(s));
  switch (op) {
    case Op::input:
    case Op::parameter:
    case Op::lookup:
      throw InternalError("infer_shape: leaf op " + std::string(op_name(op)) +
                          " has no arguments to infer from");
    case Op::call:
      throw InternalError("infer_shape: a call's shape is its cell's frame (ir::CellBody), not its arguments'");
    case Op::matmul:
      if (args[0].cols != args[1].rows)
        shape_error(op, "A is " + to_string(args[0]) + " but B is " + to_string(args[1]) +
                            " (A's columns must equal B's rows)");
      return {args[0].rows, args[1].cols};
    case Op::affine:
      return infer_affine(args);
    case Op::matmul_tn:
      if (args[0].rows != args[1].rows)
        shape_error(op, "A is " + to_string(args[0]) + " but B is " + to_string(args[1]) +
                            " (A^T B needs as many rows in both)");
      return {args[0].cols, args[1].cols};
    case Op::matmul_nt:
      return infer_matmul_nt(args);
    case Op::matmul_nt_rows:
      return infer_matmul_nt_rows(args, attrs.target);
    case Op::matvec:
      if (args[1].cols != 1) shape_error(op, "v must be a column vector, got " + to_string(args[1]));
      if (args[0].cols != args[1].rows)
        shape_error(op, "M is " + to_string(args[0]) + " but v has " +
                            std::to_string(args[1].rows) + " rows");
      return {args[0].rows, 1};
    case Op::add:
    case Op::sub:
    case Op::cmult:
    case Op::div:
    case Op::pow:
    case Op::max:
    case Op::min:
    case Op::tanh_grad:
    case Op::sigmoid_grad:
    case Op::relu_grad:
    case Op::softmax_grad:
    case Op::log_softmax_grad:
      expect_same(op, args);
      return args[0];
    case Op::sum:
      expect_count(op, args, 1);
      expect_same(op, args);
      return args[0];
    case Op::scale:
    case Op::add_const:
    case Op::tanh:
    case Op::sigmoid:
    case Op::relu:
    case Op::exp:
    case Op::log:
    case Op::sqrt:
    case Op::abs:
    case Op::square:
    case Op::cube:
    case Op::softsign:
    case Op::silu:
    case Op::elu:
    case Op::selu:
    case Op::log_sigmoid:
    case Op::erf:
    case Op::sin:
    case Op::cos:
    case Op::sinh:
    case Op::cosh:
    case Op::round:
    case Op::ceil:
    case Op::floor:
    case Op::tan:
    case Op::asinh:
    case Op::acosh:
    case Op::atanh:
    case Op::asin:
    case Op::acos:
    case Op::atan:
    case Op::softmax:
    case Op::log_softmax:
    case Op::argmax:
      return args[0];
    case Op::kmax_pooling:
      if (attrs.target.rows != args[0].rows || attrs.target.cols < 1 || attrs.target.cols > args[0].cols)
        shape_error(op, "k is " + std::to_string(attrs.target.cols) + " but x is " + to_string(args[0]) +
                            " (k must be in [1, " + std::to_string(args[0].cols) + "], x's columns)");
      return attrs.target;
    case Op::kmax_pooling_grad:
      if (args[1].rows != args[0].rows || args[1].cols > args[0].cols)
        shape_error(op, "dy is " + to_string(args[1]) + " but x is " + to_string(args[0]) +
                            " (as many rows, at most as many columns)");
      return args[0];
    case Op::sum_elements:
    case Op::mean_elements:
      return {1, 1};
    case Op::transpose:
      return {args[0].cols, args[0].rows};
    case Op::concat: {
      expect_count(op, args, 1);
      int32_t rows = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].cols != args[0].cols)
          shape_error(op, "argument " + std::to_string(i + 1) + " is " + to_string(args[i]) +
                              " but argument 1 is " + to_string(args[0]) +
                              " (column counts must match)");
        rows += args[i].rows;
      }
      return {rows, args[0].cols};
    }
    case Op::slice:
      if (attrs.begin < 0 || attrs.end <= attrs.begin || attrs.end > args[0].rows)
        shape_error(op, "rows [" + std::to_string(attrs.begin) + ", " + std::to_string(attrs.end) +
                            ") are not a non-empty range inside " + to_string(args[0]));
      return {attrs.end - attrs.begin, args[0].cols};
    case Op::scale_gradient:
      if (!std::isfinite(attrs.constant))
        shape_error(op, "the gradient's scale is " + std::to_string(attrs.constant) + "; expected a finite number");
      return args[0];
    case Op::reshape:
      if (attrs.target.rows <= 0 || attrs.target.cols <= 0 || attrs.target.size() != args[0].size())
        shape_error(op, "cannot view " + to_string(args[0]) + " (" + std::to_string(args[0].size()) +
                            " values) as " + to_string(attrs.target));
      return attrs.target;
    case Op::pick_neg_log_softmax:
      if (args[0].cols != 1)
        shape_error(op, "x must be a column vector, got " + to_string(args[0]));
      if (attrs.index < 0 || attrs.index >= args[0].rows)
        shape_error(op, "label " + std::to_string(attrs.index) + " is outside [0, " +
                            std::to_string(args[0].rows) + ") for x of " + to_string(args[0]));
      return {1, 1};
    case Op::pick_neg_log_softmax_grad:
      if (args[0].cols != 1 || !(args[1] == Shape{1, 1}))
        shape_error(op, "x must be a column vector and dl 1x1, got " + to_string(args[0]) + ", " +
                            to_string(args[1]));
      if (attrs.index < 0 || attrs.index >= args[0].rows)
        shape_error(op, "label " + std::to_string(attrs.index) + " is outside [0, " +
                            std::to_string(args[0].rows) + ") for x of " + to_string(args[0]));
      return args[0];
  }
  throw InternalError("infer_shape: unhandled op");
}

int64_t node_flops(const Graph& graph, NodeId id) {
  const Node& n = graph.node(id);
  const auto args = graph.args(id);
  const int64_t size = n.shape.size();
  switch (n.op) {
    case Op::input:
    case Op::parameter:
    case Op::lookup:
    case Op::concat:
    case Op::slice:
    case Op::reshape:
    case Op::scale_gradient:
      return 0;
    case Op::matmul:
    case Op::matvec:
      return 2 * size * graph.node(args[0]).shape.cols;
    case Op::matmul_tn:
      return 2 * size * (is_node_batch(n) ? node_batch(graph, id).shapes[0].rows : graph.node(args[0]).shape.rows);
    case Op::matmul_nt:
      return 2 * size * graph.node(args[0]).shape.cols * static_cast<int64_t>(args.size() / 2);
    case Op::matmul_nt_rows:
      return 2 * size * static_cast<int64_t>(args.size() / 2);
    case Op::affine: {
      int64_t flops = 0;
      for (size_t i = 1; i < args.size(); i += 2) flops += 2 * size * graph.node(args[i]).shape.cols;
      return flops + size * static_cast<int64_t>(args.size() / 2);  // the adds of the terms
    }
    case Op::sum:
      return size * static_cast<int64_t>(args.size() - 1);
    case Op::sum_elements:
    case Op::mean_elements:
      return graph.node(args[0]).shape.size();  // the adds (and the mean's one multiply)
    case Op::transpose:
      return 0;
    case Op::softmax:
    case Op::log_softmax:
    case Op::pick_neg_log_softmax:
    case Op::pick_neg_log_softmax_grad:  // max, exp-sum, normalise
      return 3 * (is_node_batch(n) ? size : graph.node(args[0]).shape.size());
    case Op::argmax:
    case Op::kmax_pooling:
    case Op::kmax_pooling_grad:
      return graph.node(args[0]).shape.size();  // a comparison per value of x
    case Op::softmax_grad:
    case Op::log_softmax_grad:
    case Op::tanh_grad:
    case Op::sigmoid_grad:
      return 3 * size;
    case Op::call:
      return graph.cell(n.attrs.index).flops * (is_call_batch(n) ? n.attrs.end : 1);
    default:
      return size;  // unary and binary elementwise
  }
}

}  // namespace edb::ir
