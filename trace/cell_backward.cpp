// A cell's backward body (detail::derive_backward): the backward pass's rules over a copy of the
// forward body, rewritten so that every forward value it reads comes from the call.
#include <algorithm>

#include "trace/backward.h"
#include "trace/state.h"

namespace edb {

using ir::NodeId;
using ir::Op;
using detail::TraceState;
using detail::BackwardCell;
using detail::CellRecord;

namespace {

// Where a value of the forward body lies after its call (`value` says: an argument, rows of the
// frame, or a constant); false where it does not (a parameter, a slice of an argument, a value the
// frame does not keep).
bool forward_value(const runtime::CallCell& cell, NodeId id, detail::BackwardCell::Value& value) {
  const ir::Graph& body = cell.body;
  const ir::Node& n = body.node(id);
  value.shape = n.shape;
  if (id < cell.first) {
    const auto argument = std::find(cell.placeholders.begin(), cell.placeholders.end(), id);
    if (argument != cell.placeholders.end()) {
      value.kind = detail::BackwardCell::Value::argument;
      value.at = argument - cell.placeholders.begin();
      return true;
    }
    if (n.op != Op::input) return false;
    value.kind = detail::BackwardCell::Value::constant;
    value.values.assign(body.leaf_data(id), body.leaf_data(id) + n.shape.size());
    return true;
  }
  const int64_t at = cell.frame_at[id - cell.first];
  if (at >= 0) {
    value.kind = detail::BackwardCell::Value::frame;
    value.at = at;
    return true;
  }
  if (n.op == Op::slice && n.shape.cols == 1) {  // a view of its source's rows
    if (!forward_value(cell, body.args(n)[0], value) || value.kind == detail::BackwardCell::Value::argument) return false;
    if (value.kind == detail::BackwardCell::Value::frame) value.at += n.attrs.begin;
    else value.values = std::vector<float>(value.values.begin() + n.attrs.begin, value.values.begin() + n.attrs.end);
    value.shape = n.shape;
    return true;
  }
  return false;
}

}  // namespace

// The backward body of `record`'s cell: its rules (Backward::record_body) over a copy of the
// forward body, then rewritten so that every forward value it reads comes from the call: an
// argument, rows of the frame, or a constant. A cell of its own, planned and lowered as any.
void detail::derive_backward(EngineState& engine, CellRecord& record) {
  record.backward_derived = true;
  const runtime::CallCell& cell = *record.call_cell;
  const ir::Graph& body = cell.body;
  // A body's lookups are arguments of its calls (trace/cell.cpp, hoist_lookups): it holds none.
  // 1. The forward body again (same node ids), a gradient input per output the frame holds, and
  // the rules.
  // Scopes of their own on the engine, returned to the pool at the end.
  struct Scope {
    TraceState* state;
    ~Scope() { state->release(); }
  };
  TraceState* rules_state = TraceState::acquire(&engine);
  const Scope rules_scope{rules_state};
  rules_state->cell_scope = record.schedule.name;
  ir::Graph& g = rules_state->data.graph;
  for (const ir::ParameterInfo& info : body.parameters()) g.add_parameter(info);
  for (NodeId id = 0; id < body.size(); ++id) {
    const ir::Node& n = body.node(id);
    ir::Attributes attrs = n.attrs;
    if (n.op == Op::input) attrs.index = g.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
    const auto args = body.args(n);
    rules_state->add(n.op, std::vector<NodeId>(args.begin(), args.end()), n.shape, attrs);
  }
  const NodeId last = NodeId(body.size() - 1);
  auto backward = std::make_unique<BackwardCell>();
  std::vector<std::pair<NodeId, NodeId>> seeds;
  std::vector<NodeId> seed_inputs;
  for (size_t k = 0; k < cell.outputs.size(); ++k) {
    if (cell.output_offsets[k] < 0 || cell.first_alike[k] != k)
      continue;  // a leaf, or the same value returned twice: one view, whose gradient the trace sums
    const ir::Shape shape = body.node(cell.outputs[k]).shape;
    backward->seed_offsets.push_back(cell.output_offsets[k]);
    backward->seed_floats.push_back(shape.size());
    const std::vector<float> zeros(size_t(shape.size()), 0.0f);
    ir::Attributes attrs;
    attrs.index = g.add_constants(zeros);
    NodeId dy = rules_state->add(Op::input, {}, ir::Shape{int32_t(shape.size()), 1}, attrs).node_id();
    seed_inputs.push_back(dy);
    if (shape.cols > 1) {
      ir::Attributes target;
      target.target = shape;
      dy = rules_state->add(Op::reshape, std::span(&dy, 1), shape, target).node_id();
    }
    seeds.emplace_back(cell.outputs[k], dy);
  }
  const detail::BodyGradients grads = detail::body_gradients(*rules_state, last, seeds, cell.placeholders);

  // 2. The backward body: its arguments (the forward frame, the forward arguments, the gradients),
  // each forward value it reads from them, and the rules' nodes.
  TraceState* state = TraceState::acquire(&engine);
  const Scope scope{state};
  state->cell_scope = record.schedule.name;
  ir::Graph& out = state->data.graph;
  CellRecord& result = backward->cell;
  auto placeholder = [&](ir::Shape shape) {
    const std::vector<float> zeros(size_t(shape.size()), 0.0f);
    ir::Attributes attrs;
    attrs.index = out.add_constants(zeros);
    const NodeId id = state->add(Op::input, {}, shape, attrs).node_id();
    result.placeholders.push_back(id);
    return id;
  };
  const NodeId frame = placeholder(ir::Shape{int32_t(cell.frame_floats), 1});
  std::vector<NodeId> arguments;
  for (NodeId p : cell.placeholders) arguments.push_back(placeholder(body.node(p).shape));
  std::vector<NodeId> to(g.size(), ir::kNoNode);
  for (size_t j = 0; j < seed_inputs.size(); ++j) to[seed_inputs[j]] = placeholder(g.node(seed_inputs[j]).shape);
  for (size_t i = 0; i < cell.placeholders.size(); ++i) to[cell.placeholders[i]] = arguments[i];
  // Forward value `id` in the backward body: read from the call where it lies there, else computed
  // again from its own arguments (a slice of an argument, a value the frame does not keep).
  std::function<NodeId(NodeId)> forward = [&](NodeId id) -> NodeId {
    if (to[id] != ir::kNoNode) return to[id];
    const ir::Node& n = g.node(id);
    if (n.op == Op::parameter) {
      ir::Attributes attrs;
      attrs.parameter = out.add_parameter(g.parameter(n.attrs.parameter));
      return to[id] = state->add(Op::parameter, {}, n.shape, attrs).node_id();
    }
    BackwardCell::Value value;
    if (!forward_value(cell, id, value)) {
      std::vector<NodeId> args;
      for (NodeId a : g.args(n)) args.push_back(forward(a));
      return to[id] = state->add(n.op, args, n.shape, n.attrs).node_id();
    }
    if (value.kind == BackwardCell::Value::constant) {
      ir::Attributes attrs;
      attrs.index = out.add_constants(value.values);
      return to[id] = state->add(Op::input, {}, n.shape, attrs).node_id();
    }
    return to[id] = detail::read_rows(*state, frame, value.at, n.shape);
  };
  for (NodeId id = last + 1; id < g.size(); ++id) {
    if (to[id] != ir::kNoNode) continue;
    const ir::Node& n = g.node(id);
    ir::Attributes attrs = n.attrs;
    if (n.op == Op::input) attrs.index = out.add_constants(std::span<const float>(g.leaf_data(id), size_t(n.shape.size())));
    std::vector<NodeId> args;
    for (NodeId a : g.args(n)) args.push_back(a <= last ? forward(a) : to[a]);
    to[id] = state->add(n.op, args, n.shape, attrs).node_id();
  }
  // 3. Its outputs, and what each is to the trace.
  // A weight's term dy x^T of columns is read in place (the trace's matmul_nt_rows reads dy at its
  // rows of the backward call's frame): its call records no view of dy.
  auto output = [&](NodeId node, BackwardCell::Output what) {
    result.outputs.push_back(node <= last ? forward(node) : to[node]);
    result.outputs_read_in_place.push_back(what.kind == BackwardCell::Output::pair && g.node(node).shape.cols == 1);
    backward->outputs.push_back(std::move(what));
  };
  for (size_t i = 0; i < grads.arguments.size(); ++i)
    if (grads.arguments[i] != ir::kNoNode) output(grads.arguments[i], {BackwardCell::Output::argument, uint32_t(i), {}});
  for (const detail::BodyGradients::Parameter& p : grads.parameters) {
    const uint32_t index = g.node(p.node).attrs.parameter;
    if (p.whole != ir::kNoNode) output(p.whole, {BackwardCell::Output::whole, index, {}});
    for (const auto& [dy, x] : p.pairs) {
      BackwardCell::Output pair{BackwardCell::Output::pair, index, {}};
      if (x <= last ? forward_value(cell, x, pair.x) : g.node(x).op == Op::input) {
        if (x > last) {
          pair.x.kind = BackwardCell::Value::constant;
          pair.x.shape = g.node(x).shape;
          pair.x.values.assign(g.leaf_data(x), g.leaf_data(x) + pair.x.shape.size());
        }
        output(dy, std::move(pair));
        continue;
      }
      // x is not where the trace could read it after the call (a parameter: the product of two
      // weights; a value the backward body computes): the body computes its term dy x^T itself,
      // one more of the parameter's whole terms, which the trace sums over the calls.
      const NodeId factors[] = {dy <= last ? forward(dy) : to[dy], x <= last ? forward(x) : to[x]};
      const ir::Shape shapes[] = {out.node(factors[0]).shape, out.node(factors[1]).shape};
      const NodeId term = state->add(Op::matmul_nt, factors, ir::infer_shape(Op::matmul_nt, shapes, {}), {}).node_id();
      result.outputs.push_back(term);
      result.outputs_read_in_place.push_back(false);
      backward->outputs.push_back({BackwardCell::Output::whole, index, {}});
    }
  }
  if (result.outputs.empty()) return;  // no gradient flows through the body: calls send nothing
  result.body = out;
  result.types = state->data.types;
  detail::plan_cell(engine, result, "backward " + record.call_key, "backward of " + record.call_name,
                    "backward of " + record.schedule.name, false, record.call_cell.get());
  record.backward = std::move(backward);
}

}  // namespace edb
