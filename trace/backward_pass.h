// The backward pass's working state (trace/backward.cpp records it, trace/backward_rules.cpp holds
// each op's rule): a node's gradient is the sum of the contributions its consumers send, kept in
// flat per-thread arrays; a weight's (dy, x) pairs are kept apart and become one contraction.
// Private to trace/; shared by those two files only.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "scheduler/schedule.h"
#include "trace/backward.h"
#include "trace/state.h"

namespace edb::detail {


using ir::NodeId;
using ir::Op;

// An allocator whose resize() leaves new elements unwritten: the pass's arrays that are sized
// first and then written in place (a weight's pairs, a batch's table) skip the zero fill, a
// memset over memory that execution evicted between steps.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <typename T>
using UninitializedVector = std::vector<T, UninitializedAllocator<T>>;

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
  int32_t at;      // -1: node a is the term; else the term lies in a's column from row `at`, read
                   // in place (a batch call's frames; with batch calls, a concat's gradient)
};

// The (dy, x) pairs sent to one parameter, a term dy x^T each, in the order sent. A weight
// gathers one per use (thousands a pass), so they lie in arrays of their own, not linked through
// the pass's list; their shapes are read as they are sent, while the nodes are in cache. A factor
// is a node's value, or a column at rows of a node (a cell call's frame: dy_row, x_row), read in
// place by matmul_nt_rows with no view node. While every pair has one shape (a weight's, as a
// rule) they are kept as that contraction reads them, grouped as they are sent: its arguments
// dy1, x1, dy2, x2, ... and their rows, which combine() hands to the graph as they are; a batch's
// sender claims its members' places at once and writes them in place.
struct ParameterPairs {
  struct Term {
    NodeId dy, x;
    ir::Shape dy_shape, x_shape;
    int32_t dy_row = 0, x_row = 0;
  };
  using Shapes = std::pair<ir::Shape, ir::Shape>;
  static constexpr size_t kNoPlace = SIZE_MAX;
  NodeId parameter = ir::kNoNode;
  Shapes shape;                  // every pair's, while !mixed
  UninitializedVector<NodeId> args;  // while !mixed
  UninitializedVector<int32_t> rows;
  bool mixed = false;            // pairs of several shapes came: all are in `terms`
  std::vector<Term> terms;

  void clear(NodeId p) {
    parameter = p;
    args.clear();
    rows.clear();
    terms.clear();
    mixed = false;
  }
  bool empty() const { return mixed ? terms.empty() : args.empty(); }
  void add(const Term& t) {
    const size_t at = claim({t.dy_shape, t.x_shape}, 1);
    if (at == kNoPlace) {
      terms.push_back(t);
      return;
    }
    args[at] = t.dy;
    args[at + 1] = t.x;
    rows[at] = t.dy_row;
    rows[at + 1] = t.x_row;
  }
  // Places for `count` pairs of shape `s` after those sent so far: where the first's dy goes in
  // args and rows (pair i's at that + 2 i: dy, then x), or kNoPlace where they are of another shape
  // than the pairs before (then every pair is a term, grouped by shape in combine()).
  size_t claim(Shapes s, size_t count) {
    if (!mixed && args.empty()) shape = s;
    if (!mixed && s != shape) {
      mixed = true;
      terms.clear();
      for (size_t i = 0; i < args.size(); i += 2) terms.push_back({args[i], args[i + 1], shape.first, shape.second, rows[i], rows[i + 1]});
    }
    if (mixed) return kNoPlace;
    const size_t at = args.size();
    args.resize(at + 2 * count);
    rows.resize(at + 2 * count);
    return at;
  }
  // Each pair in the order sent.
  template <typename F>
  void for_each(F&& f) const {
    if (mixed) {
      for (const Term& t : terms) f(t);
      return;
    }
    for (size_t i = 0; i < args.size(); i += 2) f(Term{args[i], args[i + 1], shape.first, shape.second, rows[i], rows[i + 1]});
  }
};


// send_call_batch()'s: a term sent to a member's output, read in place (a node at a row).
struct SeedTerm {
  uint32_t output;
  NodeId node;
  int32_t row;
};

// send_call_batch()'s: what output view i of each member of a batch of calls is (the same for
// every member): a slice at output `output`'s rows of the frame, or a matrix output's reshape of
// the view `slice` ids after the call.
struct ViewPlan {
  bool known = false;  // read at the first member whose view was sent only whole terms
  bool reshape = false;
  uint32_t output = 0;
  NodeId slice = 0;
};

// send_call_batch()'s: where output k of a backward call goes, the same for every member of the
// batch: a forward argument's gradient, a parameter's term, or a pair's dy (its x read per member).
struct OutputRoute {
  const BackwardCell::Output* output = nullptr;
  int64_t offset = 0;  // its rows in a member's frame
  ir::Shape shape;
  bool in_place = false;  // the pair's dy and x are columns, read where they lie
  NodeId parameter = ir::kNoNode;
  ParameterPairs* pairs = nullptr;
  NodeId constant_x = ir::kNoNode;  // a pair's x that is a constant: one node for every member
  // Where member m's pair lies in its parameter's args and rows, claimed for the whole batch:
  // place + 2 (m stride + slot), stride the routes of pairs to that parameter, slot this one's
  // among them (kNoPlace: added pair by pair).
  size_t place = ParameterPairs::kNoPlace;
  size_t stride = 0, slot = 0;
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
  std::vector<uint8_t> depends;
  std::vector<ir::Shape> shapes;  // emit()'s
  std::vector<int32_t> list;      // combine()'s
  std::vector<NodeId> terms;
  std::vector<SlicePart> slices;
  std::vector<ParameterPairs> pairs;  // the first `pairs_used` are this pass's
  size_t pairs_used = 0;
  std::vector<uint32_t> pairs_index;  // per parameter node: its list in pairs, when pairs_used confirms it
  // combine()'s, for pairs of several shapes: per shape of pair, its shapes and its arguments a1,
  // b1, a2, b2, ...
  std::vector<std::pair<ir::Shape, ir::Shape>> group_shapes;
  std::vector<std::vector<NodeId>> groups;
  std::vector<std::vector<int32_t>> group_rows;
  std::vector<uint32_t> group_sizes, pair_groups;  // group_pairs()': per group, per pair
  std::vector<NodeId> order;      // mirrored_order()'s
  std::vector<uint8_t> batch_last;  // per entry of order: the last of its forward batch
  // per entry of order: for a call whose batch call reads its output views' terms (views left
  // out), 1 + its number of views (so the pass reads no call node to count them); else 0
  std::vector<uint32_t> reads_views;
  std::vector<uint8_t> placed;      // per node: already in order
  std::vector<NodeId> unplaced_leaves;
  std::vector<NodeId> args;       // send()'s
  // send_call()'s: the backward call's arguments and outputs, each output's gradient terms, and
  // the frame rows read as right factors (only that call's outputs read its frame).
  UninitializedVector<NodeId> call_args;
  std::vector<NodeId> call_outputs;
  std::vector<std::vector<NodeId>> seeds;
  std::vector<std::pair<std::pair<int64_t, ir::Shape>, NodeId>> frame_reads;
  // send_call_batch()'s: the forward batch's calls waiting for their batch call, their forward
  // arguments, their views, each member's seeds as (node, row) terms, and the batch call's table.
  std::vector<NodeId> pending, call_forward_args;
  std::vector<ViewPlan> view_plan;
  std::vector<SeedTerm> seed_terms;
  std::vector<uint32_t> seed_begin;
  std::vector<int32_t> seed_counts;
  std::vector<int32_t> batch_terms;
  UninitializedVector<int32_t> batch_rows;
  std::vector<NodeId> call_zeros;
  std::vector<OutputRoute> output_routes;
  // send_batch()'s: each member's gradient as a term, the batch node's arguments and their rows,
  // its labels, and the forward members' arguments and labels.
  std::vector<std::pair<NodeId, int32_t>> member_dy;
  UninitializedVector<NodeId> batch_args;
  std::vector<NodeId> member_args;
  UninitializedVector<int32_t> batch_arg_rows;
  std::vector<int32_t> batch_labels, member_labels;
  std::vector<size_t> pair_places;  // per argument slot of a product: its pairs' places, claimed
  std::vector<ParameterPairs*> pair_lists;
};

class Backward {
 public:
  explicit Backward(detail::TraceState& s) : s_(s), graph_(s.data.graph), b_(buffers()) {
    b_.items.clear();
    b_.pairs_used = 0;
  }

  // Records the gradient nodes of `loss`; returns per parameter or lookup node its gradient node.
  std::vector<LeafGradient> record(NodeId loss);

  // Declared in trace/backward.h: a cell body's gradients.
  using BodyGradients = detail::BodyGradients;
  BodyGradients record_body(NodeId last, std::span<const std::pair<NodeId, NodeId>> seeds,
                            std::span<const NodeId> arguments);

 private:
  // The order in which nodes pass their gradients on: the forward schedule's batches last to first,
  // each batch's members in the batch's order, then what earlier evaluations ran (reverse
  // recording order), then the leaves. Every node still comes after all its consumers, and the
  // gradient nodes of one forward batch are recorded member by member in that batch's order, so
  // the policy batches them in that order too: the forward values they read, and the gradients
  // they pass on, then sit one after another as the forward batch left them (no gathers). The
  // output views of a call whose batch call reads them (read_views) are left out, and
  // b_.reads_views marks such calls' places in the order with their number of views.
  const std::vector<NodeId>& mirrored_order(NodeId loss);

  // A node's head: its newest contribution, or one of these (a list ends at any negative link).
  static constexpr int32_t kNothingSent = -1, kOnlyPairs = -2;

  // Room in head for node n: a parameter node a call's rule made lies past the pass's nodes.
  void grow_head(NodeId n) {
    if (n >= b_.head.size()) b_.head.resize(size_t(n) + 1, kNothingSent);
  }

  void push(NodeId to, Contribution::Kind kind, NodeId a, int32_t begin = 0, int32_t end = 0, int32_t at = -1) {
    grow_head(to);
    // Built in place: a Contribution built on the stack and copied in stalled on the copy's loads.
    Contribution& c = b_.items.emplace_back();
    c.kind = kind;
    c.a = a;
    c.begin = begin;
    c.end = end;
    c.at = at;
    c.next = b_.head[to];
    b_.head[to] = int32_t(b_.items.size() - 1);
  }
  void whole(NodeId to, NodeId gradient) { push(to, Contribution::kWhole, gradient); }

  // The pairs sent to parameter node p so far (null: none), or a new empty list for it.
  ParameterPairs* pairs_of(NodeId p, bool make) {
    // Asked once per pair sent: p's list is found through its index, which a list of this pass
    // confirms (an index left by an earlier pass names another parameter's list, or none).
    if (p < b_.pairs_index.size()) {
      const uint32_t i = b_.pairs_index[p];
      if (i < b_.pairs_used && b_.pairs[i].parameter == p) return &b_.pairs[i];
    }
    if (!make) return nullptr;
    if (b_.pairs_used == b_.pairs.size()) b_.pairs.emplace_back();
    if (p >= b_.pairs_index.size()) b_.pairs_index.resize(size_t(p) + 1, UINT32_MAX);
    b_.pairs_index[p] = uint32_t(b_.pairs_used);
    ParameterPairs& pairs = b_.pairs[b_.pairs_used++];
    pairs.clear(p);
    grow_head(p);
    if (b_.head[p] == kNothingSent) b_.head[p] = kOnlyPairs;
    return &pairs;
  }
  // Whether anything was sent to n: read from head alone, as the pass asks it of every node and
  // the nodes' own array lies out of cache.
  bool sent(NodeId n) const { return b_.head[n] != kNothingSent; }
  void pair(NodeId to, NodeId dy, NodeId x) { pairs_of(to, true)->add({dy, x, graph_.node(dy).shape, graph_.node(x).shape}); }
  // A pair whose factors are columns at rows of nodes, read there.
  void pair_at(NodeId to, const ParameterPairs::Term& term) { pairs_of(to, true)->add(term); }

  // Which nodes a gradient flows through, asked only of nodes on the loss's path: those that depend
  // on a parameter or lookup (or, for a cell's body, on one of `sources`, its arguments). The pass
  // asks it of the loss, of a seed, of a node sent a gradient (its consumer was on the path), and
  // of such a node's arguments: all on the path, so no walk back from the loss is needed.
  const std::vector<uint8_t>& gradient_flows(NodeId loss, std::span<const NodeId> sources = {});

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
  void send_call(NodeId n, const std::vector<uint8_t>& flows);
  // The output of `call` whose gradient contribution c is (a slice of its frame at that output's
  // rows); InternalError where it is none.
  static size_t seeded_output(NodeId call, const Contribution& c, const detail::BackwardCell& backward);
  // The output of `call` at rows [begin, end) of its frame; InternalError where it is none.
  static size_t seeded_output(NodeId call, int32_t begin, int32_t end, const detail::BackwardCell& backward);

  // Backward calls by batch (EngineState::batch_backward_calls): whether the calls of `record`
  // get one backward call per forward batch, a batch call (ir::CallBatch) whose members' outputs
  // the trace reads in place: its backward cell compiles and holds every output in its frame.
  bool batches_calls(detail::CellRecord& record);
  // Whether call n's batch call reads the terms sent to n's output views where they lie: n is a
  // call (not a batch call) of a forward cell whose cell batches its calls. Its views then stay
  // out of the order; send_call_batch() reads them (a view's terms go on to the batch call as
  // they are, with no node summing them: the batch call sums each member's terms as it reads them).
  bool reads_views(NodeId n);
  // The call whose batch call reads output view v's terms, or kNoNode.
  NodeId view_reader(NodeId v);
  // b_.reads_views' entry for node n: 1 + its number of output views where reads_views(n), else 0.
  uint32_t views_read(NodeId n) {
    return reads_views(n) ? 1 + uint32_t(graph_.cell(graph_.node(n).attrs.index).output_views) : 0;
  }
  // Whether any of the `views` output views of call n (reads_views(n)) was sent a gradient.
  bool views_sent(NodeId n, NodeId views) const {
    for (NodeId v = n + 1; v <= n + views && v <= loss_; ++v)
      if (sent(v)) return true;
    return false;
  }
  // Member `call`'s seeds, the terms sent to its outputs: each view's terms where they lie (oldest
  // first); a view sent anything but whole terms goes through its own rule, as the per-node pass
  // would, and what that sends to the call is read after every view (with the call's own terms);
  // a matrix output's reshape sent whole terms passes them on to its slice as they are. The views
  // are as b_.view_plan says (one entry per view of the cell).
  void read_views(NodeId call, const detail::BackwardCell& backward, const std::vector<uint8_t>& flows);
  // One batch call for the forward batch's calls in b_.pending (their gradients all sent).
  void send_call_batch(const std::vector<uint8_t>& flows);
  // Backward rules by batch (EngineState::batch_backward_calls; trace/backward_batches.cpp): the
  // rule of one forward batch, `members` (of one op, columns, every one on the gradient's path and
  // sent its gradient), run once for the batch: what a member's rule would emit is one batch node
  // (ir::NodeBatch) for all of them, its members' values read in place by what they go to, and
  // what a member's rule passes on unchanged (add, sum, concat's parts) goes on as terms in place.
  // False, with nothing recorded, where the op has no such rule or a member does not fit (a weight
  // that is not one parameter for every member).
  bool send_batch(std::span<const NodeId> members, const std::vector<uint8_t>& flows);
  // Member n's gradient as a term read in place (node, row; -1: the whole node): its one whole
  // contribution as it was sent, or what combine() makes of several.
  std::pair<NodeId, int32_t> gradient_at(NodeId n);
  // A batch node of `op` whose members are `member` columns, on b_.batch_args at b_.batch_arg_rows
  // (slot after slot, member after member, `shapes` per slot) and b_.batch_labels.
  NodeId emit_batch(Op op, ir::Shape member, std::span<const ir::Shape> shapes, const ir::Attributes& attrs = {});

  // A term as a node: a whole node, or its rows from `at` as a value of `shape`: a view (of a batch
  // call's frames, of a concat's gradient), never scheduled (as a call's output views are), placed
  // by the planner.
  NodeId term_node(NodeId a, int32_t at, ir::Shape shape) {
    return at < 0 ? a : detail::read_rows(s_, a, at, shape, true);
  }

  // The sum of everything sent to n: its whole terms, its slices put back in place, and one
  // matmul_nt per shape of pair (a bias's (dy, 1) apart from a weight's (dy, x)). With `pairs`
  // (a parameter in a cell's body), the pairs go there as they are instead, and the rest is
  // summed: kNoNode when nothing else was sent.
  NodeId combine(NodeId n, std::vector<std::pair<NodeId, NodeId>>* pairs = nullptr);

  // Pairs of several shapes sent to one parameter as b_.groups: per shape of pair, in the order
  // sent, its arguments a1, b1, a2, b2, ... (b_.group_rows their rows) and its shapes
  // (b_.group_shapes).
  void group_pairs(std::span<const ParameterPairs::Term> sent);

  // Slices of n's gradient put back at their rows: one concat when they tile n exactly (an LSTM's
  // gates), else each padded with zeros and summed.
  NodeId assemble_slices(NodeId n, std::vector<SlicePart>& parts);

  // The product term a * b's gradient for a (its left factor): a pair kept for a parameter, a
  // node now for anything else.
  void send_left_factor(NodeId a, NodeId dy, NodeId b) {
    if (graph_.node(a).op == Op::parameter) pair(a, dy, b);
    else whole(a, emit(Op::matmul_nt, {dy, b}));
  }

  // Each op's rule: what n's gradient dy sends to each argument a gradient flows into
  // (trace/backward_rules.cpp).
  void send(NodeId n, NodeId dy, const std::vector<uint8_t>& flows);

  static Buffers& buffers() {
    static thread_local Buffers b;
    return b;
  }

  detail::TraceState& s_;
  ir::Graph& graph_;
  Buffers& b_;
  std::map<std::tuple<int32_t, int32_t, float>, NodeId> constants_;
  std::vector<NodeId> body_parameters_;  // parameter nodes made for cells' bodies
  NodeId loss_ = 0;  // the pass's last node (record's loss, record_body's last)
  const runtime::CallCell* last_cell_ = nullptr;
  detail::CellRecord* last_record_ = nullptr;
  const detail::CellRecord* batches_record_ = nullptr;  // batches_calls()' last answer
  bool batches_ = false;
};

}  // namespace edb::detail
