// Trace::backward(): the backward pass recorded as IR nodes of the same trace, so every policy,
// executor, device and the memory planner batch and run it exactly as they run the forward pass.
//
// Reverse mode over the recorded graph: nodes on the loss's path that depend on a parameter or a
// lookup get a gradient, the sum of the contributions their consumers send (each op's rule below).
// Two shapes of contribution are kept apart until the end:
//   - a weight's products: a use W x sends the pair (dy, x); all pairs of one parameter become one
//     matmul_nt node, sum_i dy_i x_i^T: one GEMM per weight per trace, not one per instance;
//   - slices: a slice of x sends (rows, dy); slices that tile x become one concat.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <map>

#include "scheduler/schedule.h"
#include "trace/backward.h"
#include "trace/state.h"

namespace edb {

namespace {

using ir::NodeId;
using ir::Op;

// What a consumer sends to a node's gradient, in one flat list per backward pass (a node's
// contributions are linked through `next`): no allocation per node. A parameter's (dy, x) pairs
// are kept apart (ParameterPairs).
struct Contribution {
  enum Kind : uint8_t { kWhole, kSlice };
  Kind kind;
  NodeId a;        // whole: the gradient term; slice: the slice's gradient
  int32_t begin;   // slice: its rows
  int32_t end;
  int32_t next;    // the node's previous contribution, or -1
};

// The (dy, x) pairs sent to one parameter, a term dy x^T each, in the order sent. A weight
// gathers one per use (thousands a pass), so they lie in an array of their own, read in order by
// combine(), not linked through the pass's list; their shapes are read as they are sent, while
// the nodes are in cache. A factor is a node's value, or a column at rows of a node (a cell
// call's frame: dy_row, x_row), read in place by matmul_nt_rows with no view node.
struct ParameterPairs {
  struct Term {
    NodeId dy, x;
    ir::Shape dy_shape, x_shape;
    int32_t dy_row = 0, x_row = 0;
  };
  NodeId parameter = ir::kNoNode;
  std::vector<Term> terms;
};


struct SlicePart {
  int32_t begin, end;
  NodeId gradient;
};

// The pass's working arrays, kept per thread across passes: a training loop's traces are alike,
// so after the first they record without allocating (or faulting in) fresh memory.
struct Buffers {
  std::vector<int32_t> head;  // per node: its newest contribution, or -1
  std::vector<Contribution> items;
  std::vector<uint8_t> depends, flows;
  std::vector<ir::Shape> shapes;  // emit()'s
  std::vector<int32_t> list;      // combine()'s
  std::vector<NodeId> terms;
  std::vector<SlicePart> slices;
  std::vector<ParameterPairs> pairs;  // the first `pairs_used` are this pass's
  size_t pairs_used = 0;
  // combine()'s: per shape of pair, its shapes and its arguments a1, b1, a2, b2, ...
  std::vector<std::pair<ir::Shape, ir::Shape>> group_shapes;
  std::vector<std::vector<NodeId>> groups;
  std::vector<std::vector<int32_t>> group_rows;
  std::vector<NodeId> order;      // mirrored_order()'s
  std::vector<NodeId> args;       // send()'s
  std::vector<uint32_t> position;
  // send_call()'s: the backward call's arguments and outputs, each output's gradient terms, and
  // the frame rows read as right factors (only that call's outputs read its frame).
  std::vector<NodeId> call_args, call_outputs;
  std::vector<std::vector<NodeId>> seeds;
  std::vector<std::pair<std::pair<int64_t, ir::Shape>, NodeId>> frame_reads;
};

class Backward {
 public:
  explicit Backward(detail::TraceState& s) : s_(s), graph_(s.data.graph), b_(buffers()) {
    b_.items.clear();
    b_.pairs_used = 0;
  }

  // Records the gradient nodes of `loss`; returns per parameter or lookup node its gradient node.
  std::vector<std::pair<NodeId, NodeId>> record(NodeId loss) {
    const std::vector<uint8_t>& flows = gradient_flows(loss);
    b_.head.assign(loss + 1, kNothingSent);
    whole(loss, constant(ir::Shape{1, 1}, 1.0f));
    std::vector<std::pair<NodeId, NodeId>> leaves;
    std::vector<NodeId> parameters;
    for (NodeId n : mirrored_order(loss)) {
      if (!sent(n)) continue;
      const Op op = graph_.node(n).op;  // a copy: combine() may grow the node array
      // A parameter may be sent terms by a cell call whatever the trace's own path to it.
      if (!flows[n] && op != Op::parameter) continue;
      if (op == Op::call) {
        send_call(n, flows);
        continue;
      }
      if (op == Op::parameter) {  // after every call's rule, which may send it terms
        parameters.push_back(n);
        continue;
      }
      const NodeId gradient = combine(n);
      if (op == Op::lookup) {
        leaves.emplace_back(n, gradient);
        continue;
      }
      send(n, gradient, flows);
    }
    // Parameters, then those only cells' bodies use (their nodes made by the calls' rules).
    for (NodeId p : parameters) leaves.emplace_back(p, combine(p));
    std::reverse(leaves.begin(), leaves.end());
    for (NodeId p : body_parameters_) leaves.emplace_back(p, combine(p));
    return leaves;
  }

  // Declared in trace/backward.h: a cell body's gradients.
  using BodyGradients = detail::BodyGradients;
  BodyGradients record_body(NodeId last, std::span<const std::pair<NodeId, NodeId>> seeds,
                            std::span<const NodeId> arguments) {
    std::vector<NodeId> seed_nodes;
    for (const auto& [output, gradient] : seeds) seed_nodes.push_back(output);
    const std::vector<uint8_t>& flows = gradient_flows(last, seed_nodes, arguments);
    b_.head.assign(last + 1, kNothingSent);
    for (const auto& [output, gradient] : seeds)
      if (flows[output]) whole(output, gradient);
    BodyGradients out;
    out.arguments.assign(arguments.size(), ir::kNoNode);
    for (NodeId n : mirrored_order(last)) {
      if (!flows[n] || !sent(n)) continue;
      if (graph_.node(n).op == Op::parameter) {
        BodyGradients::Parameter& p = out.parameters.emplace_back();
        p.node = n;
        p.whole = combine(n, &p.pairs);
        continue;
      }
      const NodeId gradient = combine(n);
      const auto argument = std::find(arguments.begin(), arguments.end(), n);
      if (argument != arguments.end()) {
        out.arguments[size_t(argument - arguments.begin())] = gradient;
        continue;
      }
      send(n, gradient, flows);
    }
    return out;
  }

 private:
  // The order in which nodes pass their gradients on: the forward schedule's batches last to first,
  // each batch's members in the batch's order, then what earlier evaluations ran (reverse
  // recording order), then the leaves. Every node still comes after all its consumers, and the
  // gradient nodes of one forward batch are recorded member by member in that batch's order, so
  // the policy batches them in that order too: the forward values they read, and the gradients
  // they pass on, then sit one after another as the forward batch left them (no gathers).
  const std::vector<NodeId>& mirrored_order(NodeId loss) {
    std::vector<NodeId>& order = b_.order;
    std::vector<uint32_t>& position = b_.position;
    order.clear();
    position.assign(loss + 1, UINT32_MAX);
    const scheduler::Schedule& last = s_.data.schedule;
    NodeId first_scheduled = loss + 1;
    for (size_t b = last.batch_count(); b-- > 0;)
      for (NodeId m : last.batch(b))
        if (m <= loss && position[m] == UINT32_MAX) {
          // A call's output views (never scheduled) pass their gradients to it just before it.
          if (graph_.node(m).op == Op::call)
            for (NodeId v = m + graph_.cell(graph_.node(m).attrs.index).output_views; v > m; --v)
              if (v <= loss) {
                position[v] = uint32_t(order.size());
                order.push_back(v);
              }
          position[m] = uint32_t(order.size());
          order.push_back(m);
          first_scheduled = std::min(first_scheduled, m);
        }
    // The schedule is an order of its nodes, so its reverse is valid for them; the nodes below
    // all of them (earlier evaluations) can read none of them. A computed node among them that
    // the schedule lacks would break that: then plain reverse recording order, always valid.
    for (int leaves = 0; leaves < 2; ++leaves)
      for (NodeId n = loss + 1; n-- > 0;) {
        if (position[n] != UINT32_MAX || has_flag(graph_.node(n).op, ir::kLeaf) != (leaves == 1)) continue;
        if (!leaves && n > first_scheduled) {
          order.clear();
          for (NodeId m = loss + 1; m-- > 0;) order.push_back(m);
          return order;
        }
        position[n] = uint32_t(order.size());
        order.push_back(n);
      }
    return order;
  }

  // A node's head: its newest contribution, or one of these (a list ends at any negative link).
  static constexpr int32_t kNothingSent = -1, kOnlyPairs = -2;

  // Room in head for node n: a parameter node a call's rule made lies past the pass's nodes.
  void grow_head(NodeId n) {
    if (n >= b_.head.size()) b_.head.resize(size_t(n) + 1, kNothingSent);
  }

  void push(NodeId to, Contribution::Kind kind, NodeId a, int32_t begin = 0, int32_t end = 0) {
    grow_head(to);
    // Built in place: a Contribution built on the stack and copied in stalled on the copy's loads.
    Contribution& c = b_.items.emplace_back();
    c.kind = kind;
    c.a = a;
    c.begin = begin;
    c.end = end;
    c.next = b_.head[to];
    b_.head[to] = int32_t(b_.items.size() - 1);
  }
  void whole(NodeId to, NodeId gradient) { push(to, Contribution::kWhole, gradient); }

  // The pairs sent to parameter node p so far (null: none), or a new empty list for it.
  ParameterPairs* pairs_of(NodeId p, bool make) {
    // A pass sends pairs to a handful of parameters, a call's rule to several in turn.
    for (size_t i = 0; i < b_.pairs_used; ++i)
      if (b_.pairs[i].parameter == p) return &b_.pairs[i];
    if (!make) return nullptr;
    if (b_.pairs_used == b_.pairs.size()) b_.pairs.emplace_back();
    ParameterPairs& pairs = b_.pairs[b_.pairs_used++];
    pairs.parameter = p;
    pairs.terms.clear();
    grow_head(p);
    if (b_.head[p] == kNothingSent) b_.head[p] = kOnlyPairs;
    return &pairs;
  }
  // Whether anything was sent to n: read from head alone, as the pass asks it of every node and
  // the nodes' own array lies out of cache.
  bool sent(NodeId n) const { return b_.head[n] != kNothingSent; }
  void pair(NodeId to, NodeId dy, NodeId x) {
    pairs_of(to, true)->terms.push_back({dy, x, graph_.node(dy).shape, graph_.node(x).shape});
  }
  // A pair whose factors are columns at rows of nodes, read there.
  void pair_at(NodeId to, const ParameterPairs::Term& term) { pairs_of(to, true)->terms.push_back(term); }

  // Which nodes a gradient flows through: on the loss's path and depending on a parameter or lookup
  // (or, for a cell's body, on one of `sources`, its arguments). `seeds` are reached besides the loss.
  const std::vector<uint8_t>& gradient_flows(NodeId loss, std::span<const NodeId> seeds = {},
                                             std::span<const NodeId> sources = {}) {
    std::vector<uint8_t>& depends = b_.depends;
    std::vector<uint8_t>& reached = b_.flows;
    depends.assign(loss + 1, 0);
    reached.assign(loss + 1, 0);
    for (NodeId a : sources) depends[a] = 1;
    for (NodeId n = 0; n <= loss; ++n) {
      const Op op = graph_.node(n).op;
      depends[n] |= op == Op::parameter || op == Op::lookup;
      if (op == Op::call)  // its body's parameters
        depends[n] |= !static_cast<const runtime::CallCell&>(graph_.cell(graph_.node(n).attrs.index)).body.parameters().empty();
      for (NodeId a : graph_.args(n)) depends[n] |= depends[a];
    }
    for (NodeId seed : seeds) reached[seed] = 1;
    reached[loss] = 1;
    for (NodeId n = loss + 1; n-- > 0;)
      if (reached[n])
        for (NodeId a : graph_.args(n)) reached[a] = 1;
    for (NodeId n = 0; n <= loss; ++n) reached[n] &= depends[n];
    return reached;
  }

  NodeId emit(Op op, std::span<const NodeId> args, const ir::Attributes& attrs = {}) {
    b_.shapes.clear();
    for (NodeId a : args) b_.shapes.push_back(graph_.node(a).shape);
    return s_.add(op, args, ir::infer_shape(op, b_.shapes, attrs), attrs).node_id();
  }
  NodeId emit(Op op, std::initializer_list<NodeId> args, const ir::Attributes& attrs = {}) {
    return emit(op, std::span(args.begin(), args.size()), attrs);
  }

  // A constant input, one node per shape and value for the whole backward pass.
  NodeId constant(ir::Shape shape, float value) {
    const auto key = std::make_tuple(shape.rows, shape.cols, value);
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second;
    const std::vector<float> values(size_t(shape.size()), value);
    ir::Attributes attrs;
    attrs.index = graph_.add_constants(values);
    const NodeId id = s_.add(Op::input, {}, shape, attrs).node_id();
    constants_.emplace(key, id);
    return id;
  }

  // The record of the cell a call node names (calls of one cell come in runs).
  detail::CellRecord& record_of(const runtime::CallCell& cell) {
    if (last_cell_ != &cell) {
      last_cell_ = &cell;
      last_record_ = &detail::record_of(*s_.engine, cell);
    }
    return *last_record_;
  }

  // The trace's node for a parameter of a cell's body (made now if only bodies used it).
  NodeId parameter_of(const ir::ParameterInfo& info) {
    const size_t before = graph_.size();
    const NodeId node = s_.parameter_node(info);
    if (graph_.size() > before) body_parameters_.push_back(node);
    return node;
  }

  // A forward value of call n (whose arguments are `args`) as a node of the trace.
  NodeId call_value(NodeId n, std::span<const NodeId> args, const detail::BackwardCell::Value& value) {
    if (value.kind == detail::BackwardCell::Value::argument) return args[size_t(value.at)];
    if (value.kind == detail::BackwardCell::Value::constant) {
      // One node per pass for a constant of one value (a bias's ones), not one per call.
      const auto same = [&](float v) { return std::bit_cast<uint32_t>(v) == std::bit_cast<uint32_t>(value.values[0]); };
      if (!value.values.empty() && std::all_of(value.values.begin(), value.values.end(), same) &&
          !std::isnan(value.values[0]) && !(value.values[0] == 0.0f && std::signbit(value.values[0])))
        return constant(value.shape, value.values[0]);
      ir::Attributes attrs;
      attrs.index = graph_.add_constants(value.values);
      return s_.add(Op::input, {}, value.shape, attrs).node_id();
    }
    for (const auto& [rows, node] : b_.frame_reads)
      if (rows.first == value.at && rows.second == value.shape) return node;
    const NodeId read = detail::read_rows(s_, n, value.at, value.shape);
    b_.frame_reads.emplace_back(std::make_pair(value.at, value.shape), read);
    return read;
  }

  // call_value's node and row for a column read in place: a frame's value as rows of the call,
  // with no view node.
  std::pair<NodeId, int32_t> call_value_at(NodeId n, std::span<const NodeId> args, const detail::BackwardCell::Value& value) {
    if (value.kind == detail::BackwardCell::Value::frame) return {n, int32_t(value.at)};
    return {call_value(n, args, value), 0};
  }

  // A cell call's rule: one call of the cell's backward body (trace/backward.cpp's
  // derive_backward) on the call's frame, its arguments and its outputs' gradients; what that
  // returns goes to the arguments and, as terms and (dy, x) pairs, to the body's parameters.
  void send_call(NodeId n, const std::vector<uint8_t>& flows) {
    const ir::Node node = graph_.node(n);
    const auto& cell = static_cast<const runtime::CallCell&>(graph_.cell(node.attrs.index));
    if (cell.is_backward)
      throw UsageError("edb::Trace::backward(): node %" + std::to_string(n) + " (a call of " + cell.name +
                       ") belongs to an earlier backward pass; second derivatives are not supported");
    detail::CellRecord& record = record_of(cell);
    if (!record.backward) return;  // no gradient flows through its body
    detail::BackwardCell& backward = *record.backward;
    std::vector<NodeId>& args = b_.call_args;
    args.assign(1, n);
    const auto forward_args = graph_.args(n);
    args.insert(args.end(), forward_args.begin(), forward_args.end());
    const size_t arguments = forward_args.size();
    b_.frame_reads.clear();
    // Each output's gradient: what the views of the output sent, summed.
    const size_t outputs_sent = backward.seed_offsets.size();
    std::vector<std::vector<NodeId>>& seeds = b_.seeds;  // the first outputs_sent are this call's
    if (seeds.size() < outputs_sent) seeds.resize(outputs_sent);
    for (size_t j = 0; j < outputs_sent; ++j) seeds[j].clear();
    for (int32_t i = b_.head[n]; i >= 0; i = b_.items[size_t(i)].next) {
      const Contribution c = b_.items[size_t(i)];
      size_t j = 0;
      while (j < outputs_sent && !(c.kind == Contribution::kSlice && c.begin == backward.seed_offsets[j] &&
                                   c.end - c.begin == backward.seed_floats[j]))
        ++j;
      if (j == outputs_sent)
        throw InternalError("Trace::backward: call %" + std::to_string(n) + " was sent a gradient at no output");
      seeds[j].push_back(c.a);
    }
    for (size_t j = 0; j < outputs_sent; ++j) {
      std::reverse(seeds[j].begin(), seeds[j].end());
      if (seeds[j].empty()) args.push_back(constant(ir::Shape{int32_t(backward.seed_floats[j]), 1}, 0.0f));
      else args.push_back(seeds[j].size() == 1 ? seeds[j][0] : emit(Op::sum, seeds[j]));
    }
    const ir::TypeId type = detail::call_type(*s_.engine, backward.cell, graph_, args);
    std::vector<NodeId>& outputs = b_.call_outputs;
    outputs.clear();
    const NodeId call = detail::record_call_node(s_, backward.cell, type, args, outputs);
    const runtime::CallCell& backward_cell = *backward.cell.call_cell;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const detail::BackwardCell::Output& o = backward.outputs[k];
      if (o.kind == detail::BackwardCell::Output::argument) {
        const NodeId a = args[1 + o.index];
        if (flows[a]) whole(a, outputs[k]);
        continue;
      }
      const NodeId p = parameter_of(cell.body.parameter(o.index));
      const auto forward_args = std::span(args).subspan(1, arguments);
      if (o.kind == detail::BackwardCell::Output::whole) {
        whole(p, outputs[k]);
      } else if (backward_cell.read_in_place(k)) {  // dy and x columns, read where they lie
        ParameterPairs::Term term;
        std::tie(term.x, term.x_row) = call_value_at(n, forward_args, o.x);
        term.x_shape = o.x.shape;
        term.dy_shape = backward.cell.body.node(backward.cell.outputs[k]).shape;
        if (backward_cell.output_offsets[k] >= 0) {
          term.dy = call;
          term.dy_row = int32_t(backward_cell.output_offsets[k]);
        } else {
          term.dy = outputs[k];  // an argument or constant of the call, returned as it is
        }
        pair_at(p, term);
      } else {
        pair(p, outputs[k], call_value(n, forward_args, o.x));
      }
    }
  }

  // The sum of everything sent to n: its whole terms, its slices put back in place, and one
  // matmul_nt per shape of pair (a bias's (dy, 1) apart from a weight's (dy, x)). With `pairs`
  // (a parameter in a cell's body), the pairs go there as they are instead, and the rest is
  // summed: kNoNode when nothing else was sent.
  NodeId combine(NodeId n, std::vector<std::pair<NodeId, NodeId>>* pairs = nullptr) {
    std::vector<int32_t>& list = b_.list;  // n's contributions, oldest first (the links run newest first)
    list.clear();
    for (int32_t i = b_.head[n]; i >= 0; i = b_.items[size_t(i)].next) list.push_back(i);
    std::reverse(list.begin(), list.end());
    std::vector<NodeId>& terms = b_.terms;
    std::vector<SlicePart>& slices = b_.slices;
    terms.clear();
    slices.clear();
    for (int32_t i : list) {
      const Contribution c = b_.items[size_t(i)];
      if (c.kind == Contribution::kWhole) terms.push_back(c.a);
      else slices.push_back({c.begin, c.end, c.a});
    }
    if (!slices.empty()) terms.push_back(assemble_slices(n, slices));
    if (const ParameterPairs* sent_pairs = graph_.node(n).op == Op::parameter ? pairs_of(n, false) : nullptr) {
      if (pairs) {
        for (const ParameterPairs::Term& t : sent_pairs->terms) {
          if (t.dy_row != 0 || t.x_row != 0)  // a body calls no cell
            throw InternalError("Trace::backward: a body's pair reads rows of a node");
          pairs->emplace_back(t.dy, t.x);
        }
      } else {
        // Pairs of one shape, in the order sent, one argument list each: a1, b1, a2, b2, ...
        std::vector<std::pair<ir::Shape, ir::Shape>>& shapes = b_.group_shapes;
        std::vector<std::vector<NodeId>>& groups = b_.groups;
        std::vector<std::vector<int32_t>>& rows = b_.group_rows;
        shapes.clear();
        size_t last = 0;  // the group of the previous pair: pairs of one shape come in runs
        for (const ParameterPairs::Term& t : sent_pairs->terms) {
          const std::pair<ir::Shape, ir::Shape> shape{t.dy_shape, t.x_shape};
          size_t g = last < shapes.size() && shapes[last] == shape ? last : 0;
          while (g < shapes.size() && shapes[g] != shape) ++g;
          if (g == shapes.size()) {
            shapes.push_back(shape);
            if (groups.size() < shapes.size()) {
              groups.emplace_back();
              rows.emplace_back();
            }
            groups[g].clear();
            rows[g].clear();
          }
          groups[g].push_back(t.dy);
          groups[g].push_back(t.x);
          rows[g].push_back(t.dy_row);
          rows[g].push_back(t.x_row);
          last = g;
        }
        // One product per shape (all of a group's pairs are alike): columns read where they lie,
        // at rows of frames or whole (matmul_nt_rows), or matrices (matmul_nt, never at rows).
        for (size_t g = 0; g < shapes.size(); ++g) {
          const ir::Shape pair[] = {shapes[g].first, shapes[g].second};
          const ir::Shape product = ir::infer_shape(Op::matmul_nt, pair, {});
          if (pair[0].cols != 1) {
            terms.push_back(s_.add(Op::matmul_nt, groups[g], product, {}).node_id());
            continue;
          }
          ir::Attributes at;
          at.index = graph_.add_rows(rows[g]);
          at.target = product;
          terms.push_back(s_.add(Op::matmul_nt_rows, groups[g], product, at).node_id());
        }
      }
    }
    if (terms.empty()) return ir::kNoNode;  // only pairs, kept apart
    return terms.size() == 1 ? terms[0] : emit(Op::sum, terms);
  }

  // Slices of n's gradient put back at their rows: one concat when they tile n exactly (an LSTM's
  // gates), else each padded with zeros and summed.
  NodeId assemble_slices(NodeId n, std::vector<SlicePart>& parts) {
    const ir::Shape shape = graph_.node(n).shape;
    std::sort(parts.begin(), parts.end(), [](const SlicePart& x, const SlicePart& y) {
      return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
    });
    // Slices of the same rows first add up.
    std::vector<SlicePart> merged;
    for (size_t i = 0; i < parts.size();) {
      size_t j = i + 1;
      while (j < parts.size() && parts[j].begin == parts[i].begin && parts[j].end == parts[i].end) ++j;
      std::vector<NodeId> same;
      for (size_t k = i; k < j; ++k) same.push_back(parts[k].gradient);
      merged.push_back({parts[i].begin, parts[i].end, same.size() == 1 ? same[0] : emit(Op::sum, same)});
      i = j;
    }
    bool disjoint = true;
    for (size_t i = 1; i < merged.size(); ++i) disjoint &= merged[i].begin >= merged[i - 1].end;
    // Disjoint slices in ascending order as one value of n's shape, with zeros in the gaps.
    auto place = [&](std::span<const SlicePart> ascending) {
      std::vector<NodeId> pieces;
      int32_t row = 0;
      for (const SlicePart& p : ascending) {
        if (p.begin > row) pieces.push_back(constant(ir::Shape{p.begin - row, shape.cols}, 0.0f));
        pieces.push_back(p.gradient);
        row = p.end;
      }
      if (row < shape.rows) pieces.push_back(constant(ir::Shape{shape.rows - row, shape.cols}, 0.0f));
      return pieces.size() == 1 ? pieces[0] : emit(Op::concat, pieces);
    };
    if (disjoint) return place(merged);
    std::vector<NodeId> padded;
    for (const SlicePart& p : merged) padded.push_back(place(std::span(&p, 1)));
    return emit(Op::sum, padded);
  }

  // The product term a * b's gradient for a (its left factor): a pair kept for a parameter, a
  // node now for anything else.
  void send_left_factor(NodeId a, NodeId dy, NodeId b) {
    if (graph_.node(a).op == Op::parameter) pair(a, dy, b);
    else whole(a, emit(Op::matmul_nt, {dy, b}));
  }

  // Each op's rule: what n's gradient dy sends to each argument a gradient flows into.
  void send(NodeId n, NodeId dy, const std::vector<uint8_t>& flows) {
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
        int32_t row = 0;
        for (size_t i = 0; i < args.size(); ++i) {
          const int32_t rows = graph_.node(args[i]).shape.rows;
          if (flows_to(i)) {
            attrs.begin = row;
            attrs.end = row + rows;
            to(i, args.size() == 1 ? dy : emit(Op::slice, {dy}, attrs));
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
        throw UsageError("edb::Trace::backward(): node %" + std::to_string(n) + " (" +
                         std::string(ir::op_name(node.op)) +
                         ") belongs to an earlier backward pass; second derivatives are not supported");
    }
    throw InternalError("backward: no rule for op number " + std::to_string(int(node.op)));  // not op_name(): every op returned above
  }

  static Buffers& buffers() {
    static thread_local Buffers b;
    return b;
  }

  detail::TraceState& s_;
  ir::Graph& graph_;
  Buffers& b_;
  std::map<std::tuple<int32_t, int32_t, float>, NodeId> constants_;
  std::vector<NodeId> body_parameters_;  // parameter nodes made for cells' bodies
  const runtime::CallCell* last_cell_ = nullptr;
  detail::CellRecord* last_record_ = nullptr;
};

}  // namespace

// A value of `shape` that lies at rows [at, at + its size) of column `source`: a slice of them,
// reshaped when the value is a matrix.
NodeId detail::read_rows(TraceState& s, NodeId source, int64_t at, ir::Shape shape) {
  ir::Attributes rows;
  rows.begin = int32_t(at);
  rows.end = rows.begin + int32_t(shape.size());
  const NodeId read = s.add(Op::slice, std::span(&source, 1), ir::Shape{rows.end - rows.begin, 1}, rows).node_id();
  if (shape.cols == 1) return read;
  ir::Attributes target;
  target.target = shape;
  return s.add(Op::reshape, std::span(&read, 1), shape, target).node_id();
}

detail::BodyGradients detail::body_gradients(TraceState& s, NodeId last, std::span<const std::pair<NodeId, NodeId>> seeds,
                                             std::span<const NodeId> arguments) {
  return Backward(s).record_body(last, seeds, arguments);
}

Gradients Trace::backward(const Expr& loss) {
  Gradients gradients;
  backward(loss, gradients);
  return gradients;
}

void Trace::backward(const Expr& loss, Gradients& out) {
  record_backward(loss, "edb::Trace::backward()");
  gradients(out);
}

void Trace::record_backward(const Expr& loss) { record_backward(loss, "edb::Trace::record_backward()"); }

void Trace::record_backward(const Expr& loss, const char* function) {
  detail::TraceState& s = detail::TraceState::of(loss, function);
  if (&s != state_ || s.generation != generation_)
    throw UsageError(std::string(function) + ": the loss belongs to another trace");
  if (!(s.data.graph.node(s.id(loss)).shape == ir::Shape{1, 1}))
    throw UsageError(std::string(function) + ": the loss must be 1x1, got " +
                     ir::to_string(s.data.graph.node(s.id(loss)).shape));
  // A call of a cell stays one node: its gradient is one call of the cell's backward body. A cell
  // whose backward body cannot be derived (a value its frame does not keep), and every cell with
  // cell_gradients off, has its trace's calls copied as bodies (the forward pass then runs again),
  // and the engine's later calls of it record their bodies (CellRecord::copies); other cells'
  // calls stay nodes.
  // By default, the engine's first backward pass finds calls laid out for inference (their frames
  // keep only what they return): that trace's calls are recorded again, and its forward pass runs
  // again, with the layout the backward bodies read, which the engine's later calls use too (the
  // same arithmetic: values and gradients do not depend on which trace came first).
  if (s.call_nodes) {
    bool expand = false;  // a call to copy as its body, or laid out for inference: recorded again
    const ir::Graph& graph = s.data.graph;
    for (size_t c = 0; c < graph.cell_count(); ++c) {  // the cells the trace calls
      const auto& cell = static_cast<const runtime::CallCell&>(graph.cell(int64_t(c)));
      if (cell.is_backward) continue;  // a second derivative: refused by the pass
      detail::CellRecord& record = detail::record_of(*s.engine, cell);
      if (record.inference_cell.get() == &cell) expand = true;
      if (!record.copies && s.engine->cell_gradients) {
        if (!record.backward_derived) detail::derive_backward(*s.engine, record);
        record.copies = !record.backward && !record.why_no_backward.empty();
      } else {
        record.copies = true;
      }
      expand |= record.copies;
    }
    s.engine->trained = true;
    if (expand) {
      s.engine->driver.drain(s.data);
      s.expand_calls();
      generation_ = s.generation;
    }
  }

  // The forward pass is batched first (unless it ran), not run: the backward pass records in the
  // order of its batches. Both run in one evaluation, whose batches and memory plan
  // record_backward() also makes now, so that run() only executes (a training loop records and
  // prepares the next step while this one runs).
  s.engine->driver.schedule(s.data);
  s.backward_loss = s.id(loss);
  s.backward_leaves = Backward(s).record(s.backward_loss);
  s.engine->driver.prepare(s.data);
}

}  // namespace edb
