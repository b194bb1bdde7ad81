// Backward rules by batch (detail::Backward::send_batch, trace/backward_pass.h): a forward batch's
// rule run once for all its members, recording one batch node (ir::NodeBatch) where a member's rule
// records one node, and passing terms on in place where a member's rule passes its gradient on.
#include <array>
#include <optional>
#include <string>

#include "trace/backward_pass.h"

namespace edb::detail {

namespace {

// The ops whose forward batches have a rule by batch: each has its case in send_batch's switch.
bool has_batch_rule(Op op) {
  switch (op) {
    case Op::pick_neg_log_softmax:
    case Op::tanh:
    case Op::sigmoid:
    case Op::relu:
    case Op::softmax:
    case Op::log_softmax:
    case Op::exp:
    case Op::log:
    case Op::square:
    case Op::div:
    case Op::sqrt:
    case Op::abs:
    case Op::cube:
    case Op::softsign:
    case Op::silu:
    case Op::elu:
    case Op::selu:
    case Op::log_sigmoid:
    case Op::max:
    case Op::min:
    case Op::sum_elements:
    case Op::mean_elements:
    case Op::scale:
    case Op::add:
    case Op::sub:
    case Op::sum:
    case Op::add_const:
    case Op::concat:
    case Op::cmult:
    case Op::affine:
    case Op::matmul:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::pair<NodeId, int32_t> Backward::gradient_at(NodeId n) {
  if (const int32_t head = b_.head[n]; head >= 0) {
    const Contribution& c = b_.items[size_t(head)];
    if (c.next < 0 && c.kind == Contribution::kWhole) return {c.a, c.at};
  }
  return {combine(n), -1};
}

NodeId Backward::emit_batch(Op op, ir::Shape member, std::span<const ir::Shape> shapes, const ir::Attributes& attrs) {
  s_.check_room();
  const NodeId batch = ir::add_node_batch(graph_, op, member, shapes, b_.batch_args, b_.batch_arg_rows, b_.batch_labels, attrs);
  s_.data.types.push_back(s_.engine->driver.signatures.intern(graph_, batch));
  b_.batch_args.clear();
  b_.batch_arg_rows.clear();
  b_.batch_labels.clear();
  return batch;
}

bool Backward::send_batch(std::span<const NodeId> members, const std::vector<uint8_t>& flows) {
  if (!s_.engine->batch_backward_calls || members.size() < 2) return false;
  const ir::Node first = graph_.node(members[0]);  // a copy: emitting grows the node array
  if (!has_batch_rule(first.op) || first.shape.cols != 1) return false;
  const size_t arity = first.arg_count;
  const size_t product_begin = first.op == Op::affine ? 1 : 0;
  const bool products = first.op == Op::affine || first.op == Op::matmul;
  const auto first_args = graph_.args(members[0]);
  // A product's weight must be one parameter for every member: its pairs then go to that
  // parameter, and the batch's matmul_tn reads it as one operand.
  if (products)
    for (size_t i = product_begin; i + 1 < arity; i += 2)
      if (graph_.node(first_args[i]).op != Op::parameter) return false;
  // A sum of a matrix's elements spreads its gradient by two products: the per-node rule's.
  if ((first.op == Op::sum_elements || first.op == Op::mean_elements) && graph_.node(first_args[0]).shape.cols != 1)
    return false;
  // The members, their contributions and arguments lie anywhere: one walk reads their nodes and
  // copies their arguments (recording moves the argument pool), fetching what it reads a few
  // members ahead (a node first, then, once it has come, its arguments and contributions).
  constexpr size_t kAhead = 8;
  std::vector<NodeId>& args = b_.member_args;
  args.clear();
  b_.member_labels.clear();
  for (size_t k = 0; k < members.size(); ++k) {
    if (k + kAhead < members.size()) {
      const NodeId ahead = members[k + kAhead];
      __builtin_prefetch(&graph_.node(ahead));
      __builtin_prefetch(b_.head.data() + ahead);
      __builtin_prefetch(flows.data() + ahead);
    }
    if (k + kAhead / 2 < members.size()) {
      const NodeId ahead = members[k + kAhead / 2];
      __builtin_prefetch(graph_.args(ahead).data());
      if (const int32_t head = b_.head[ahead]; head >= 0) __builtin_prefetch(b_.items.data() + head);
    }
    const NodeId n = members[k];
    const ir::Node& node = graph_.node(n);
    // The members are one forward batch's, of one type (scheduler::verify; their types are not
    // read, a cache miss each): their arguments have one shape each, and their attributes (a
    // scale's constant) are one, so the rule reads the first member's.
    if (!flows[n] || !sent(n) || node.op != first.op || node.arg_count != arity || !(node.shape == first.shape))
      return false;
    const auto member_args = graph_.args(node);
    if (products)
      for (size_t i = product_begin; i + 1 < arity; i += 2)
        if (member_args[i] != first_args[i]) return false;
    for (NodeId a : member_args) args.push_back(a);  // a few: a loop, not a call of memmove
    if (first.op == Op::pick_neg_log_softmax) b_.member_labels.push_back(int32_t(node.attrs.index));
  }
  // Every member's gradient (combine() may record nodes).
  std::vector<std::pair<NodeId, int32_t>>& dy = b_.member_dy;
  dy.clear();
  for (NodeId n : members) dy.push_back(gradient_at(n));
  const size_t count = members.size();
  // What sending to argument i of member k reads (whether a gradient flows, its contributions),
  // fetched a few members ahead.
  auto fetch_argument = [&](size_t k, size_t i) {
    if (k + kAhead >= count) return;
    const NodeId a = args[(k + kAhead) * arity + i];
    __builtin_prefetch(flows.data() + a);
    if (a < b_.head.size()) __builtin_prefetch(b_.head.data() + a);
  };
  auto arg = [&](size_t k, size_t i) { return args[k * arity + i]; };
  auto flows_to = [&](size_t i) {
    for (size_t k = 0; k < count; ++k)
      if (flows[arg(k, i)]) return true;
    return false;
  };
  // Member k's gradient term goes to argument i of each member it flows to: whole, or (a part of
  // a concat's) its rows from `row` on, read in place.
  auto pass_on = [&](size_t i, std::optional<int32_t> row = std::nullopt) {
    for (size_t k = 0; k < count; ++k) {
      fetch_argument(k, i);
      if (!flows[arg(k, i)]) continue;
      const int32_t at = row ? std::max(dy[k].second, 0) + *row : dy[k].second;
      push(arg(k, i), Contribution::kWhole, dy[k].first, 0, 0, at);
    }
  };
  // Member k's value of `batch` (members of `rows`) goes to argument i of each member it flows to.
  auto send_rows = [&](size_t i, NodeId batch) {
    const int32_t rows = graph_.node(batch).shape.rows / int32_t(count);
    for (size_t k = 0; k < count; ++k) {
      fetch_argument(k, i);
      if (flows[arg(k, i)]) push(arg(k, i), Contribution::kWhole, batch, 0, 0, int32_t(k) * rows);
    }
  };
  // What a slot of a batch node reads, member by member: the member's gradient, its argument i
  // (whole), the member itself (its value, y), or an earlier batch node of this rule.
  struct Value {
    enum Kind { kGradient, kArgument, kSelf, kBatch, kWhole } kind;
    size_t at = 0;  // argument: which; batch, whole: the node
  };
  const Value gradient{Value::kGradient}, self{Value::kSelf};
  auto argument = [](size_t i) { return Value{Value::kArgument, i}; };
  auto batch = [](NodeId node) { return Value{Value::kBatch, node}; };
  auto whole = [](NodeId node) { return Value{Value::kWhole, node}; };  // one node for every member
  const ir::Shape shape = first.shape;
  // One batch node of `op` over every member, its slots reading `slots`, its members `member`
  // columns (the members' own shape when not given).
  auto apply = [&](Op op, std::initializer_list<Value> slots, float constant = 0.0f, ir::Shape member = {}) {
    std::array<ir::Shape, 3> shapes;
    if (slots.size() > shapes.size())
      throw InternalError("Backward::send_batch: a batch node of " + std::to_string(slots.size()) + " slots");
    size_t s = 0;
    for (const Value& v : slots)
      shapes[s++] = v.kind == Value::kArgument ? graph_.node(arg(0, v.at)).shape
                    : v.kind == Value::kBatch  ? ir::member_shape(graph_.node(NodeId(v.at)))
                    : v.kind == Value::kWhole  ? graph_.node(NodeId(v.at)).shape
                                               : shape;
    // Every member's slots, written in place (emit_batch leaves the arrays empty).
    b_.batch_args.resize(count * slots.size());
    b_.batch_arg_rows.resize(count * slots.size());
    NodeId* batch_arg = b_.batch_args.data();
    int32_t* batch_row = b_.batch_arg_rows.data();
    for (size_t k = 0; k < count; ++k) {
      s = 0;
      for (const Value& v : slots) {
        const ir::Shape slot = shapes[s++];
        switch (v.kind) {
          case Value::kGradient:
            *batch_arg++ = dy[k].first;
            *batch_row++ = std::max(dy[k].second, 0);
            break;
          case Value::kArgument:
            *batch_arg++ = arg(k, v.at);
            *batch_row++ = 0;
            break;
          case Value::kSelf:
            *batch_arg++ = members[k];
            *batch_row++ = 0;
            break;
          case Value::kBatch:
            *batch_arg++ = NodeId(v.at);
            *batch_row++ = int32_t(k) * slot.rows;
            break;
          case Value::kWhole:
            *batch_arg++ = NodeId(v.at);
            *batch_row++ = 0;
            break;
        }
      }
    }
    if (op == Op::pick_neg_log_softmax_grad) b_.batch_labels.assign(b_.member_labels.begin(), b_.member_labels.end());
    ir::Attributes attrs;
    attrs.constant = constant;
    return emit_batch(op, member.rows ? member : shape, std::span(shapes.data(), s), attrs);
  };
  switch (first.op) {
    case Op::pick_neg_log_softmax: {  // (x, dl) -> (softmax(x) - e_label) dl
      const ir::Shape x = graph_.node(arg(0, 0)).shape;
      send_rows(0, apply(Op::pick_neg_log_softmax_grad, {argument(0), gradient}, 0.0f, x));
      return true;
    }
    case Op::tanh: send_rows(0, apply(Op::tanh_grad, {self, gradient})); return true;
    case Op::sigmoid: send_rows(0, apply(Op::sigmoid_grad, {self, gradient})); return true;
    case Op::relu: send_rows(0, apply(Op::relu_grad, {self, gradient})); return true;
    case Op::softmax: send_rows(0, apply(Op::softmax_grad, {self, gradient})); return true;
    case Op::log_softmax: send_rows(0, apply(Op::log_softmax_grad, {self, gradient})); return true;
    case Op::exp: send_rows(0, apply(Op::cmult, {self, gradient})); return true;
    case Op::log: send_rows(0, apply(Op::div, {gradient, argument(0)})); return true;
    case Op::square:  // 2 x dy
      send_rows(0, apply(Op::cmult, {gradient, batch(apply(Op::scale, {argument(0)}, 2.0f))}));
      return true;
    case Op::scale: send_rows(0, apply(Op::scale, {gradient}, first.attrs.constant)); return true;
    case Op::sqrt:  // dy / (2 y)
      send_rows(0, apply(Op::div, {batch(apply(Op::scale, {gradient}, 0.5f)), self}));
      return true;
    case Op::abs: {  // dy where x > 0, -dy where x < 0 (per-node rule: relu_grad's rule twice)
      const NodeId negated = apply(Op::scale, {argument(0)}, -1.0f);
      const NodeId negative = apply(Op::relu_grad, {batch(negated), gradient});
      send_rows(0, apply(Op::sub, {batch(apply(Op::relu_grad, {argument(0), gradient})), batch(negative)}));
      return true;
    }
    case Op::cube:  // 3 x^2 dy
      send_rows(0, apply(Op::cmult, {gradient, batch(apply(Op::scale, {batch(apply(Op::square, {argument(0)}))}, 3.0f))}));
      return true;
    case Op::softsign: {  // dy / (1 + |x|)^2
      const NodeId plus_one = apply(Op::add_const, {batch(apply(Op::abs, {argument(0)}))}, 1.0f);
      send_rows(0, apply(Op::div, {gradient, batch(apply(Op::square, {batch(plus_one)}))}));
      return true;
    }
    case Op::log_sigmoid:  // dy sigmoid(-x)
      send_rows(0, apply(Op::cmult, {gradient, batch(apply(Op::sigmoid, {batch(apply(Op::scale, {argument(0)}, -1.0f))}))}));
      return true;
    case Op::silu: {  // dy (s + y (1 - s)), s = sigmoid(x)
      const NodeId s = apply(Op::sigmoid, {argument(0)});
      const NodeId ys = apply(Op::cmult, {self, batch(s)});
      send_rows(0, apply(Op::cmult, {gradient, batch(apply(Op::add, {batch(s), batch(apply(Op::sub, {self, batch(ys)}))}))}));
      return true;
    }
    case Op::elu:
    case Op::selu: {  // as the per-node rule: above 0 dy (lambda dy), else dy (y + alpha)
      const bool selu = first.op == Op::selu;
      const NodeId g = apply(Op::cmult, {gradient, batch(apply(Op::add_const, {self}, selu ? ir::kSeluLambda * ir::kSeluAlpha
                                                                                          : first.attrs.constant))});
      NodeId above = apply(Op::relu_grad, {argument(0), gradient});
      if (selu) above = apply(Op::scale, {batch(above)}, ir::kSeluLambda);
      const NodeId rest = apply(Op::sub, {batch(g), batch(apply(Op::relu_grad, {argument(0), batch(g)}))});
      send_rows(0, apply(Op::add, {batch(above), batch(rest)}));
      return true;
    }
    case Op::max:
    case Op::min: {  // a's share where a - b > 0 (min: b - a), b's the rest; a tie goes to b
      const NodeId margin = first.op == Op::max ? apply(Op::sub, {argument(0), argument(1)}) : apply(Op::sub, {argument(1), argument(0)});
      const NodeId to_a = apply(Op::relu_grad, {batch(margin), gradient});
      if (flows_to(0)) send_rows(0, to_a);
      if (flows_to(1)) send_rows(1, apply(Op::sub, {gradient, batch(to_a)}));
      return true;
    }
    case Op::sum_elements:
    case Op::mean_elements: {  // dy (1x1) spread over a column x: ones dy, the mean's ones 1 / rows
      const ir::Shape x = graph_.node(arg(0, 0)).shape;  // a column (checked above)
      const NodeId ones = constant(x, first.op == Op::mean_elements ? 1.0f / float(x.rows) : 1.0f);
      send_rows(0, apply(Op::matmul, {whole(ones), gradient}, 0.0f, x));
      return true;
    }
    case Op::add:
    case Op::sum:
    case Op::add_const:
      for (size_t i = 0; i < arity; ++i) pass_on(i);
      return true;
    case Op::sub:
      pass_on(0);
      if (flows_to(1)) send_rows(1, apply(Op::scale, {gradient}, -1.0f));
      return true;
    case Op::concat: {  // each part its rows of the gradient, in place
      int32_t row = 0;
      for (size_t i = 0; i < arity; ++i) {
        pass_on(i, row);
        row += graph_.node(arg(0, i)).shape.rows;
      }
      return true;
    }
    case Op::cmult:
      if (flows_to(0)) send_rows(0, apply(Op::cmult, {gradient, argument(1)}));
      if (flows_to(1)) send_rows(1, apply(Op::cmult, {gradient, argument(0)}));
      return true;
    case Op::div:
      if (flows_to(0)) send_rows(0, apply(Op::div, {gradient, argument(1)}));
      if (flows_to(1))  // -dy a / b^2 = -(dy y) / b
        send_rows(1, apply(Op::scale, {batch(apply(Op::div, {batch(apply(Op::cmult, {gradient, self})), argument(1)}))}, -1.0f));
      return true;
    case Op::affine:
    case Op::matmul: {
      // Per member, as its own rule sends them: the bias's pair (or term), then each weight's.
      const NodeId ones = constant(ir::Shape{1, 1}, 1.0f);
      // Where one parameter for every member is sent a pair per member (the weights, and a bias
      // parameter of every member, each a parameter no other slot names: as a rule), the
      // members' places are claimed at once and written in place.
      std::vector<size_t>& places = b_.pair_places;  // per argument slot (a bias, a weight)
      places.assign(arity, ParameterPairs::kNoPlace);
      const bool bias_pairs = first.op == Op::affine && graph_.node(arg(0, 0)).op == Op::parameter && flows[arg(0, 0)];
      bool claims = true;
      for (size_t k = 1; bias_pairs && k < count; ++k) claims &= arg(k, 0) == arg(0, 0);
      for (size_t i = product_begin; claims && i + 1 < arity; i += 2)
        for (size_t j = i + 2; j + 1 < arity; j += 2) claims &= arg(0, i) != arg(0, j);
      for (size_t i = product_begin; claims && bias_pairs && i + 1 < arity; i += 2) claims &= arg(0, i) != arg(0, 0);
      if (claims) {
        if (bias_pairs) places[0] = pairs_of(arg(0, 0), true)->claim({shape, ir::Shape{1, 1}}, count);
        for (size_t i = product_begin; i + 1 < arity; i += 2)
          places[i] = pairs_of(arg(0, i), true)->claim({shape, graph_.node(arg(0, i + 1)).shape}, count);
      }
      // Each claimed slot's list (claiming one may move the others).
      std::vector<ParameterPairs*>& lists = b_.pair_lists;
      lists.assign(arity, nullptr);
      for (size_t i = 0; i < arity; ++i)
        if (places[i] != ParameterPairs::kNoPlace) lists[i] = pairs_of(arg(0, i), false);
      auto place = [&](size_t i, size_t k, NodeId x) {
        const size_t at = places[i] + 2 * k;
        lists[i]->args[at] = dy[k].first;
        lists[i]->args[at + 1] = x;
        lists[i]->rows[at] = std::max(dy[k].second, 0);
        lists[i]->rows[at + 1] = 0;
      };
      for (size_t k = 0; k < count; ++k) {
        if (first.op == Op::affine && places[0] != ParameterPairs::kNoPlace) {
          place(0, k, ones);
        } else if (first.op == Op::affine && flows[arg(k, 0)]) {
          const NodeId bias = arg(k, 0);
          if (graph_.node(bias).op == Op::parameter)
            pair_at(bias, {dy[k].first, ones, shape, ir::Shape{1, 1}, std::max(dy[k].second, 0), 0});
          else
            push(bias, Contribution::kWhole, dy[k].first, 0, 0, dy[k].second);
        }
        for (size_t i = product_begin; i + 1 < arity; i += 2)
          if (places[i] != ParameterPairs::kNoPlace)
            place(i, k, arg(k, i + 1));
          else if (flows[arg(k, i)])
            pair_at(arg(k, i), {dy[k].first, arg(k, i + 1), shape, graph_.node(arg(0, i + 1)).shape,
                                std::max(dy[k].second, 0), 0});
      }
      // Each product's x: one matmul_tn of its weight (one node for every member) by every dy.
      for (size_t i = product_begin; i + 1 < arity; i += 2)
        if (flows_to(i + 1))
          send_rows(i + 1, apply(Op::matmul_tn, {argument(i), gradient}, 0.0f, ir::Shape{graph_.node(arg(0, i)).shape.cols, 1}));
      return true;
    }
    default:  // has_batch_rule() named an op with no rule here: its gradients are already read
      throw InternalError("Backward::send_batch: no rule by batch for " + std::string(ir::op_name(first.op)));
  }
}

}  // namespace edb::detail
