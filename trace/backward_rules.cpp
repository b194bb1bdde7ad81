// Each op's backward rule (detail::Backward::send, trace/backward_pass.h): what a node's gradient
// sends to each argument a gradient flows into, recorded as IR nodes of the same trace.
#include "trace/backward_pass.h"

namespace edb::detail {

void Backward::send(NodeId n, NodeId dy, const std::vector<uint8_t>& flows) {
  const ir::Node node = graph_.node(n);  // a copy: emit() may grow the node array
  std::vector<NodeId>& args = b_.args;  // a copy, as emit() may move the argument pool
  args.assign(graph_.args(n).begin(), graph_.args(n).end());
  auto to = [&](size_t i, NodeId gradient) {
    if (flows[args[i]]) whole(args[i], gradient);
  };
  auto flows_to = [&](size_t i) { return flows[args[i]] != 0; };
  ir::Attributes attrs;
  switch (node.op) {
    case Op::input:
    case Op::parameter:
    case Op::lookup:
      return;
    case Op::matmul:
    case Op::matvec:
      if (flows_to(0)) send_left_factor(args[0], dy, args[1]);
      if (flows_to(1)) to(1, emit(Op::matmul_tn, {args[0], dy}));
      return;
    case Op::affine:
      if (flows_to(0)) {
        // A parameter bias vector adds up its uses as one product with ones: (dy_1 ... dy_m) 1.
        if (graph_.node(args[0]).op == Op::parameter && node.shape.cols == 1)
          pair(args[0], dy, constant(ir::Shape{1, 1}, 1.0f));
        else
          to(0, dy);
      }
      for (size_t i = 1; i + 1 < args.size(); i += 2) {
        if (flows_to(i)) send_left_factor(args[i], dy, args[i + 1]);
        if (flows_to(i + 1)) to(i + 1, emit(Op::matmul_tn, {args[i], dy}));
      }
      return;
    case Op::add:
      to(0, dy);
      to(1, dy);
      return;
    case Op::sub:
      to(0, dy);
      if (flows_to(1)) {
        attrs.constant = -1.0f;
        to(1, emit(Op::scale, {dy}, attrs));
      }
      return;
    case Op::cmult:
      if (flows_to(0)) to(0, emit(Op::cmult, {dy, args[1]}));
      if (flows_to(1)) to(1, emit(Op::cmult, {dy, args[0]}));
      return;
    case Op::scale:
      attrs.constant = node.attrs.constant;
      return to(0, emit(Op::scale, {dy}, attrs));
    case Op::add_const:
      return to(0, dy);
    case Op::tanh: return to(0, emit(Op::tanh_grad, {n, dy}));
    case Op::sigmoid: return to(0, emit(Op::sigmoid_grad, {n, dy}));
    case Op::relu: return to(0, emit(Op::relu_grad, {n, dy}));
    case Op::softmax: return to(0, emit(Op::softmax_grad, {n, dy}));
    case Op::log_softmax: return to(0, emit(Op::log_softmax_grad, {n, dy}));
    case Op::sum:
      for (size_t i = 0; i < args.size(); ++i) to(i, dy);
      return;
    case Op::exp: return to(0, emit(Op::cmult, {n, dy}));
    case Op::log: return to(0, emit(Op::div, {dy, args[0]}));
    case Op::sqrt:  // dy / (2 y): infinite at 0, as the derivative
      attrs.constant = 0.5f;
      return to(0, emit(Op::div, {emit(Op::scale, {dy}, attrs), n}));
    case Op::abs: {  // dy sign(x): dy where x > 0, -dy where x < 0, 0 at 0 (relu_grad's rule twice)
      attrs.constant = -1.0f;
      const NodeId negative = emit(Op::relu_grad, {emit(Op::scale, {args[0]}, attrs), dy});
      return to(0, emit(Op::sub, {emit(Op::relu_grad, {args[0], dy}), negative}));
    }
    case Op::square:  // 2 x dy
      attrs.constant = 2.0f;
      return to(0, emit(Op::cmult, {dy, emit(Op::scale, {args[0]}, attrs)}));
    case Op::cube:  // 3 x^2 dy
      attrs.constant = 3.0f;
      return to(0, emit(Op::cmult, {dy, emit(Op::scale, {emit(Op::square, {args[0]})}, attrs)}));
    case Op::softsign:  // dy / (1 + |x|)^2
      attrs.constant = 1.0f;
      return to(0, emit(Op::div, {dy, emit(Op::square, {emit(Op::add_const, {emit(Op::abs, {args[0]})}, attrs)})}));
    case Op::elu:
    case Op::selu: {
      // Above 0 dy (times lambda for selu); at or below 0 dy (y + alpha) (lambda alpha for selu):
      // relu_grad keeps x > 0's share, g - relu_grad(x, g) the rest (at 0 the left derivative).
      const bool selu = node.op == Op::selu;
      attrs.constant = selu ? ir::kSeluLambda * ir::kSeluAlpha : node.attrs.constant;
      const NodeId g = emit(Op::cmult, {dy, emit(Op::add_const, {n}, attrs)});
      NodeId above = emit(Op::relu_grad, {args[0], dy});
      if (selu) {
        attrs.constant = ir::kSeluLambda;
        above = emit(Op::scale, {above}, attrs);
      }
      return to(0, emit(Op::add, {above, emit(Op::sub, {g, emit(Op::relu_grad, {args[0], g})})}));
    }
    case Op::log_sigmoid:  // dy sigmoid(-x)
      attrs.constant = -1.0f;
      return to(0, emit(Op::cmult, {dy, emit(Op::sigmoid, {emit(Op::scale, {args[0]}, attrs)})}));
    case Op::erf: {  // dy 2 / sqrt(pi) e^(-x^2)
      attrs.constant = -1.0f;
      const NodeId gauss = emit(Op::exp, {emit(Op::scale, {emit(Op::square, {args[0]})}, attrs)});
      attrs.constant = 1.1283791670955126f;
      return to(0, emit(Op::cmult, {dy, emit(Op::scale, {gauss}, attrs)}));
    }
    case Op::sin: return to(0, emit(Op::cmult, {dy, emit(Op::cos, {args[0]})}));
    case Op::cos:
      attrs.constant = -1.0f;
      return to(0, emit(Op::cmult, {dy, emit(Op::scale, {emit(Op::sin, {args[0]})}, attrs)}));
    case Op::sinh: return to(0, emit(Op::cmult, {dy, emit(Op::cosh, {args[0]})}));
    case Op::cosh: return to(0, emit(Op::cmult, {dy, emit(Op::sinh, {args[0]})}));
    case Op::round:
    case Op::ceil:
    case Op::floor:  // piecewise constant: 0 (a choice at the jumps, where there is no derivative)
      attrs.constant = 0.0f;
      return to(0, emit(Op::scale, {dy}, attrs));
    case Op::argmax:  // piecewise constant: 0, or dy itself where the user asked for straight-through
      if (node.attrs.constant != 0.0f) return to(0, dy);
      attrs.constant = 0.0f;
      return to(0, emit(Op::scale, {dy}, attrs));
    case Op::kmax_pooling: return to(0, emit(Op::kmax_pooling_grad, {args[0], dy}));
    case Op::tan:  // dy (1 + y^2)
      attrs.constant = 1.0f;
      return to(0, emit(Op::cmult, {dy, emit(Op::add_const, {emit(Op::square, {n})}, attrs)}));
    case Op::asinh:  // dy / sqrt(x^2 + 1)
      attrs.constant = 1.0f;
      return to(0, emit(Op::div, {dy, emit(Op::sqrt, {emit(Op::add_const, {emit(Op::square, {args[0]})}, attrs)})}));
    case Op::acosh:
    case Op::atanh: {
      // acosh: dy / sqrt((x - 1)(x + 1)), infinite at 1; atanh: dy / ((1 - x)(1 + x)), infinite
      // at -1 and 1. The factored forms keep their accuracy next to 1, where x^2 - 1 would not.
      attrs.constant = 1.0f;
      const NodeId plus_one = emit(Op::add_const, {args[0]}, attrs);
      NodeId other;
      if (node.op == Op::acosh) {
        attrs.constant = -1.0f;
        other = emit(Op::add_const, {args[0]}, attrs);
      } else {
        attrs.constant = -1.0f;
        const NodeId negated = emit(Op::scale, {args[0]}, attrs);
        attrs.constant = 1.0f;
        other = emit(Op::add_const, {negated}, attrs);
      }
      const NodeId product = emit(Op::cmult, {other, plus_one});
      return to(0, emit(Op::div, {dy, node.op == Op::acosh ? emit(Op::sqrt, {product}) : product}));
    }
    case Op::atan:  // dy / (1 + x^2)
      attrs.constant = 1.0f;
      return to(0, emit(Op::div, {dy, emit(Op::add_const, {emit(Op::square, {args[0]})}, attrs)}));
    case Op::asin:
    case Op::acos: {
      // asin: dy / sqrt((1 - x)(1 + x)), acos its negative; infinite at -1 and 1. Factored as
      // atanh's, for accuracy next to 1.
      attrs.constant = 1.0f;
      const NodeId plus_one = emit(Op::add_const, {args[0]}, attrs);
      attrs.constant = -1.0f;
      const NodeId negated = emit(Op::scale, {args[0]}, attrs);
      attrs.constant = 1.0f;
      const NodeId one_minus = emit(Op::add_const, {negated}, attrs);
      const NodeId root = emit(Op::sqrt, {emit(Op::cmult, {one_minus, plus_one})});
      if (node.op == Op::asin) return to(0, emit(Op::div, {dy, root}));
      attrs.constant = -1.0f;
      return to(0, emit(Op::div, {emit(Op::scale, {dy}, attrs), root}));
    }
    case Op::pow:
      if (flows_to(0)) {  // dy b a^(b - 1): b at a = 0 when b = 1, not b y / a's NaN
        attrs.constant = -1.0f;
        const NodeId lowered = emit(Op::pow, {args[0], emit(Op::add_const, {args[1]}, attrs)});
        to(0, emit(Op::cmult, {dy, emit(Op::cmult, {args[1], lowered})}));
      }
      if (flows_to(1)) to(1, emit(Op::cmult, {emit(Op::cmult, {dy, n}), emit(Op::log, {args[0]})}));  // dy y log a
      return;
    case Op::silu: {  // dy (s + y (1 - s)), s = sigmoid(x)
      const NodeId s = emit(Op::sigmoid, {args[0]});
      return to(0, emit(Op::cmult, {dy, emit(Op::add, {s, emit(Op::sub, {n, emit(Op::cmult, {n, s})})})}));
    }
    case Op::div:
      if (flows_to(0)) to(0, emit(Op::div, {dy, args[1]}));
      if (flows_to(1)) {  // -dy a / b^2 = -(dy y) / b
        attrs.constant = -1.0f;
        to(1, emit(Op::scale, {emit(Op::div, {emit(Op::cmult, {dy, n}), args[1]})}, attrs));
      }
      return;
    case Op::max:
    case Op::min: {
      // max: a's share is dy where a - b > 0 (relu_grad's rule), b's the rest; min: the same
      // with b - a. At a tie b takes it all: one subgradient, never both.
      const NodeId margin = node.op == Op::max ? emit(Op::sub, {args[0], args[1]}) : emit(Op::sub, {args[1], args[0]});
      const NodeId to_a = emit(Op::relu_grad, {margin, dy});
      if (flows_to(0)) to(0, to_a);
      if (flows_to(1)) to(1, emit(Op::sub, {dy, to_a}));
      return;
    }
    case Op::sum_elements:
    case Op::mean_elements: {
      // dy (1x1) spread over x's shape: ones (rows x 1) dy, then times ones (1 x cols); the
      // mean's ones are 1 / size.
      const ir::Shape shape = graph_.node(args[0]).shape;
      const float weight = node.op == Op::mean_elements ? 1.0f / float(shape.size()) : 1.0f;
      NodeId spread = emit(Op::matmul, {constant(ir::Shape{shape.rows, 1}, weight), dy});
      if (shape.cols > 1) spread = emit(Op::matmul, {spread, constant(ir::Shape{1, shape.cols}, 1.0f)});
      return to(0, spread);
    }
    case Op::transpose: return to(0, emit(Op::transpose, {dy}));
    case Op::concat: {
      // With batch calls, a column's parts are terms read in place at their rows of dy, with no
      // slice node: a part that is a call's output passes its term on to the call as it is.
      const ir::Node& gradient = graph_.node(dy);
      const bool in_place = s_.engine->batch_backward_calls && gradient.shape.cols == 1 && !has_flag(gradient.op, ir::kLeaf);
      int32_t row = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        const int32_t rows = graph_.node(args[i]).shape.rows;
        if (flows_to(i)) {
          attrs.begin = row;
          attrs.end = row + rows;
          if (args.size() == 1) to(i, dy);
          else if (in_place) push(args[i], Contribution::kWhole, dy, 0, 0, row);
          else to(i, emit(Op::slice, {dy}, attrs));
        }
        row += rows;
      }
      return;
    }
    case Op::slice:
      push(args[0], Contribution::kSlice, dy, node.attrs.begin, node.attrs.end);
      return;
    case Op::reshape:
      attrs.target = graph_.node(args[0]).shape;
      return to(0, emit(Op::reshape, {dy}, attrs));
    case Op::scale_gradient:  // nobackprop sends nothing; flip_gradient -dy
      if (node.attrs.constant == 0.0f) return;
      if (node.attrs.constant == 1.0f) return to(0, dy);
      attrs.constant = node.attrs.constant;
      return to(0, emit(Op::scale, {dy}, attrs));
    case Op::pick_neg_log_softmax:
      attrs.index = node.attrs.index;
      return to(0, emit(Op::pick_neg_log_softmax_grad, {args[0], dy}, attrs));
    case Op::call:  // Trace::backward records each call's body first (trace/cell.cpp)
      throw InternalError("Trace::backward: node %" + std::to_string(n) + " is a cell call that was not expanded");
    case Op::matmul_tn:
    case Op::matmul_nt:
    case Op::matmul_nt_rows:
    case Op::tanh_grad:
    case Op::sigmoid_grad:
    case Op::relu_grad:
    case Op::softmax_grad:
    case Op::log_softmax_grad:
    case Op::pick_neg_log_softmax_grad:
    case Op::kmax_pooling_grad:
      throw UsageError("edb::Trace::backward(): node %" + std::to_string(n) + " (" +
                       std::string(ir::op_name(node.op)) +
                       ") belongs to an earlier backward pass; second derivatives are not supported");
  }
  throw InternalError("backward: no rule for op number " + std::to_string(int(node.op)));  // not op_name(): every op returned above
}

}  // namespace edb::detail
