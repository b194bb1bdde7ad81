// Op tables generated from ops.def, the Graph container, the verifier and the printer.
#include <array>
#include <climits>
#include <cstdio>
#include <string>
#include <sstream>

#include "edbatch/errors.h"
#include "ir/ir.h"

namespace edb::ir {

std::string to_string(Shape shape) {
  return std::to_string(shape.rows) + "x" + std::to_string(shape.cols);
}

namespace {

// `field`, loaded at its own width: the barrier after it keeps the compiler from merging the load
// with the next one into a wider load.
template <typename T>
T load_alone(const T& field) {
  const T value = field;
  asm volatile("" ::: "memory");
  return value;
}

}  // namespace

NodeId Graph::add(Op op, std::span<const NodeId> args, Shape shape, const Attributes& attrs) {
  // Node ids and argument positions are 32-bit: refuse cleanly rather than wrap.
  if (nodes_.size() >= kMaxNodes || arg_pool_.size() + args.size() > kMaxArguments)
    throw UsageError("edb: a trace holds at most " + std::to_string(kMaxNodes) + " nodes and " +
                     std::to_string(kMaxArguments) + " argument references; this one is full (" +
                     std::to_string(nodes_.size()) + " nodes): evaluate and start a new trace");
  // `attrs` may lie in this graph's own node array, which the append may move: read first, a
  // field at a time (load_alone). Callers fill a default Attributes a field at a time just
  // before, and one wide load across those narrow stores cannot be forwarded from the store
  // buffer: a copy as a whole waited on every node for them to reach the cache (nearly half of
  // this function's samples). The node is then written in place, field by field: built on the
  // stack and copied as a whole, its 64 bytes were read back the same way.
  const float constant = load_alone(attrs.constant);
  const int32_t begin = load_alone(attrs.begin);
  const int32_t end = load_alone(attrs.end);
  const int32_t members = load_alone(attrs.members);
  const int64_t index = load_alone(attrs.index);
  const uint32_t parameter = load_alone(attrs.parameter);
  const int32_t target_rows = load_alone(attrs.target.rows);
  const int32_t target_cols = load_alone(attrs.target.cols);
  const uint32_t args_begin = static_cast<uint32_t>(arg_pool_.size());
  // One copy: a batch call or a weight's contraction has thousands of arguments.
  arg_pool_.insert(arg_pool_.end(), args.begin(), args.end());
  Node& node = nodes_.emplace_back();
  node.op = op;
  node.args_begin = args_begin;
  node.arg_count = static_cast<uint32_t>(args.size());
  node.shape = shape;
  node.attrs.constant = constant;
  node.attrs.begin = begin;
  node.attrs.end = end;
  node.attrs.members = members;
  node.attrs.index = index;
  node.attrs.parameter = parameter;
  node.attrs.target = Shape{target_rows, target_cols};
  // A pooled graph appends into capacity written a trace ago, long out of cache: the lines a few
  // nodes ahead are fetched for writing now, so that the appends do not wait for them.
  constexpr size_t kNodesAhead = 8, kArgsAhead = 64;
  if (nodes_.size() + kNodesAhead < nodes_.capacity()) __builtin_prefetch(nodes_.data() + nodes_.size() + kNodesAhead, 1);
  if (arg_pool_.size() + kArgsAhead < arg_pool_.capacity())
    __builtin_prefetch(arg_pool_.data() + arg_pool_.size() + kArgsAhead, 1);
  return static_cast<NodeId>(nodes_.size() - 1);
}

uint32_t Graph::add_parameter(const ParameterInfo& info) {
  // Graphs reference a handful of parameters, so a linear scan beats a map here.
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i].uid == info.uid) return static_cast<uint32_t>(i);
  parameters_.push_back(info);
  return static_cast<uint32_t>(parameters_.size() - 1);
}

int64_t Graph::add_constants(std::span<const float> values) {
  const int64_t offset = static_cast<int64_t>(constants_.size());
  constants_.insert(constants_.end(), values.begin(), values.end());
  return offset;
}

uint32_t Graph::add_cell(const CellBody* cell) {
  // A trace calls a handful of cells, the last one most often.
  for (size_t i = cells_.size(); i-- > 0;)
    if (cells_[i] == cell) return static_cast<uint32_t>(i);
  cells_.push_back(cell);
  return static_cast<uint32_t>(cells_.size() - 1);
}

CallBatch call_batch(const Graph& graph, NodeId id) {
  const Node& n = graph.node(id);
  CallBatch batch;
  batch.members = n.attrs.end;
  const size_t arguments = graph.cell(n.attrs.index).arguments.size();
  batch.terms = graph.rows(n.attrs.begin, arguments);
  batch.rows = graph.rows(n.attrs.begin + int64_t(arguments), n.arg_count);
  return batch;
}

NodeId add_call_batch(Graph& graph, uint32_t cell, int32_t members, std::span<const int32_t> terms,
                      std::span<const NodeId> args, std::span<const int32_t> rows) {
  const int64_t at = graph.add_rows(terms);
  graph.add_rows(rows);
  if (at > INT32_MAX - int64_t(terms.size() + rows.size()))
    throw UsageError("edb: a trace holds at most " + std::to_string(INT32_MAX) +
                     " row offsets of batched calls; this one is full: evaluate and start a new trace");
  Attributes attrs;
  attrs.index = cell;
  attrs.begin = int32_t(at);
  attrs.end = members;
  return graph.add(Op::call, args, Shape{int32_t(members * graph.cell(cell).frame_floats), 1}, attrs);
}

bool batches_members(Op op) {
  switch (op) {
    case Op::matmul:
    case Op::add:
    case Op::sub:
    case Op::add_const:
    case Op::sigmoid:
    case Op::square:
    case Op::abs:
    case Op::matmul_tn:
    case Op::tanh_grad:
    case Op::sigmoid_grad:
    case Op::relu_grad:
    case Op::cmult:
    case Op::div:
    case Op::scale:
    case Op::softmax_grad:
    case Op::log_softmax_grad:
    case Op::pick_neg_log_softmax_grad:
      return true;
    default:
      return false;
  }
}

NodeBatch node_batch(const Graph& graph, NodeId id) {
  const Node& n = graph.node(id);
  NodeBatch batch;
  batch.members = n.attrs.members;
  const size_t slots = n.arg_count / size_t(n.attrs.members);
  const auto shapes = graph.rows(n.attrs.index, 2 * slots);
  for (size_t s = 0; s < slots; ++s) batch.shapes.push_back(Shape{shapes[2 * s], shapes[2 * s + 1]});
  batch.rows = graph.rows(n.attrs.index + int64_t(2 * slots), n.arg_count);
  if (has_flag(n.op, kPerMemberIndex))
    batch.labels = graph.rows(n.attrs.index + int64_t(2 * slots + n.arg_count), size_t(n.attrs.members));
  return batch;
}

NodeId add_node_batch(Graph& graph, Op op, Shape member, std::span<const Shape> shapes, std::span<const NodeId> args,
                      std::span<const int32_t> rows, std::span<const int32_t> labels, Attributes attrs) {
  // The slots' shapes, on the stack for the few slots an op has: the backward pass records a batch
  // node per forward batch, and a heap block for each was a malloc and free per node.
  constexpr size_t kFewSlots = 8;
  std::array<int32_t, 2 * kFewSlots> few;
  std::vector<int32_t> many;
  if (shapes.size() > kFewSlots) many.resize(2 * shapes.size());
  int32_t* written = shapes.size() > kFewSlots ? many.data() : few.data();
  for (size_t s = 0; s < shapes.size(); ++s) {
    written[2 * s] = shapes[s].rows;
    written[2 * s + 1] = shapes[s].cols;
  }
  const std::span<const int32_t> table(written, 2 * shapes.size());
  const int64_t at = graph.add_rows(table);
  graph.add_rows(rows);
  graph.add_rows(labels);
  if (at > INT32_MAX - int64_t(table.size() + rows.size() + labels.size()))
    throw UsageError("edb: a trace holds at most " + std::to_string(INT32_MAX) +
                     " row offsets of batched nodes; this one is full: evaluate and start a new trace");
  const int32_t members = shapes.empty() ? 0 : int32_t(args.size() / shapes.size());
  attrs.index = at;
  attrs.members = members;
  return graph.add(op, args, Shape{member.rows * members, 1}, attrs);
}

void Graph::clear() {
  nodes_.clear();
  arg_pool_.clear();
  parameters_.clear();
  constants_.clear();
  rows_.clear();
  cells_.clear();
}

namespace {

// A batch call's table: its members' terms lie inside their nodes, and its frame holds them all.
template <typename Fail>
void verify_call_batch(const Graph& graph, NodeId id, std::span<const Shape> shapes, Fail&& fail) {
  const Node& n = graph.node(id);
  const CellBody& cell = graph.cell(n.attrs.index);
  const size_t arguments = cell.arguments.size();
  if (n.attrs.begin < 0 || n.attrs.begin + int64_t(arguments + n.arg_count) > graph.row_count())
    fail("its table of terms and rows does not lie inside the row pool of " + std::to_string(graph.row_count()));
  const CallBatch batch = call_batch(graph, id);
  for (size_t j = 0; j < arguments; ++j)
    if (batch.terms[j] < 1) fail("argument " + std::to_string(j + 1) + " has " + std::to_string(batch.terms[j]) + " terms");
  if (int64_t(n.arg_count) != int64_t(batch.members) * batch.terms_per_member())
    fail("has " + std::to_string(n.arg_count) + " arguments for " + std::to_string(batch.members) + " members of " +
         std::to_string(batch.terms_per_member()) + " terms each");
  if (!(n.shape == Shape{int32_t(batch.members * cell.frame_floats), 1}))
    fail("shape " + to_string(n.shape) + " but " + std::to_string(batch.members) + " frames of cell '" + cell.name +
         "' take " + std::to_string(batch.members * cell.frame_floats) + " floats");
  size_t i = 0;
  for (int32_t m = 0; m < batch.members; ++m)
    for (size_t j = 0; j < arguments; ++j)
      for (int32_t t = 0; t < batch.terms[j]; ++t, ++i)
        if (batch.rows[i] < 0 || batch.rows[i] + cell.arguments[j].size() > shapes[i].size())
          fail("member " + std::to_string(m + 1) + "'s argument " + std::to_string(j + 1) + " (" +
               to_string(cell.arguments[j]) + ") at row " + std::to_string(batch.rows[i]) + " is not inside its " +
               to_string(shapes[i]));
}

// A batch node's table: it lies in the row pool, every member's arguments lie inside their nodes,
// and a member's shape is what its op gives on its slots' shapes.
template <typename Fail>
void verify_node_batch(const Graph& graph, NodeId id, std::span<const Shape> shapes, Fail&& fail) {
  const Node& n = graph.node(id);
  if (!batches_members(n.op)) fail("is a batch of members, which this op never is");
  const int32_t members = n.attrs.members;
  if (n.arg_count == 0 || n.arg_count % uint32_t(members) != 0)
    fail("has " + std::to_string(n.arg_count) + " arguments for " + std::to_string(members) + " members");
  const size_t slots = n.arg_count / size_t(members);
  const int64_t table = int64_t(2 * slots + n.arg_count) + (has_flag(n.op, kPerMemberIndex) ? members : 0);
  if (n.attrs.index < 0 || n.attrs.index + table > graph.row_count())
    fail("its table of shapes, rows and labels does not lie inside the row pool of " + std::to_string(graph.row_count()));
  const NodeBatch batch = node_batch(graph, id);
  if (op_arity(n.op) >= 0 && int(slots) != op_arity(n.op))
    fail("has " + std::to_string(slots) + " arguments per member, op takes " + std::to_string(op_arity(n.op)));
  Shape member;
  Attributes attrs = n.attrs;  // a member's: its own label
  for (int32_t k = 0; k < (batch.labels.empty() ? 1 : members); ++k) {
    if (!batch.labels.empty()) attrs.index = batch.labels[size_t(k)];
    try {
      member = infer_shape(n.op, batch.shapes, attrs);
    } catch (const UsageError& e) {
      fail("member " + std::to_string(k + 1) + "'s shape inference fails: " + e.what());
    }
  }
  if (member.cols != 1 || !(n.shape == Shape{member.rows * members, 1}))
    fail("shape " + to_string(n.shape) + " but " + std::to_string(members) + " members of " + to_string(member));
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const Shape slot = batch.shapes[i % slots];
    const bool whole = batch.rows[i] == 0 && shapes[i] == slot;
    if (!whole && (slot.cols != 1 || batch.rows[i] < 0 || batch.rows[i] + slot.size() > shapes[i].size()))
      fail("member " + std::to_string(i / slots + 1) + "'s argument " + std::to_string(i % slots + 1) + " (" +
           to_string(slot) + ") at row " + std::to_string(batch.rows[i]) + " is not inside its " + to_string(shapes[i]));
  }
}

}  // namespace

void verify(const Graph& graph) {
  std::vector<Shape> shapes;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    auto fail = [&](const std::string& what) {
      throw InternalError("ir::verify: node %" + std::to_string(id) + " (" +
                          std::string(op_name(n.op)) + "): " + what);
    };
    if (static_cast<int>(n.op) >= kOpCount) fail("unknown op");
    const int arity = op_arity(n.op);
    if (arity >= 0 && static_cast<int>(n.arg_count) != arity && !is_node_batch(n))
      fail("has " + std::to_string(n.arg_count) + " arguments, op takes " + std::to_string(arity));
    shapes.clear();
    for (NodeId arg : graph.args(id)) {
      if (arg >= id) fail("argument %" + std::to_string(arg) + " is not defined before use");
      shapes.push_back(graph.node(arg).shape);
    }
    if (n.op == Op::parameter || n.op == Op::lookup) {
      if (n.attrs.parameter >= graph.parameters().size()) fail("parameter index out of range");
    }
    if (n.op == Op::lookup) {
      const int64_t entries = graph.parameter(n.attrs.parameter).shape.cols;
      if (n.attrs.index < 0 || n.attrs.index >= entries)
        fail("entry " + std::to_string(n.attrs.index) + " is outside the table's " +
             std::to_string(entries) + " entries");
    }
    if (n.op == Op::input) {
      // The constant pool must hold the whole input.
      if (n.attrs.index < 0 || n.attrs.index + n.shape.size() > graph.constant_count())
        fail("reads constants [" + std::to_string(n.attrs.index) + ", " +
             std::to_string(n.attrs.index + n.shape.size()) + ") of a pool of " +
             std::to_string(graph.constant_count()));
      continue;
    }
    if (n.op == Op::call) {
      if (n.attrs.index < 0 || size_t(n.attrs.index) >= graph.cell_count()) fail("cell index out of range");
      const CellBody& cell = graph.cell(n.attrs.index);
      if (!is_call_batch(n) && shapes.size() != cell.arguments.size())
        fail("calls cell '" + cell.name + "' with " + std::to_string(shapes.size()) + " arguments, it takes " +
             std::to_string(cell.arguments.size()));
      if (is_call_batch(n)) {
        verify_call_batch(graph, id, shapes, fail);
        continue;
      }
      for (size_t i = 0; i < shapes.size(); ++i)
        if (!(shapes[i] == cell.arguments[i]))
          fail("argument " + std::to_string(i + 1) + " is " + to_string(shapes[i]) + ", cell '" + cell.name +
               "' takes " + to_string(cell.arguments[i]));
      if (!(n.shape == Shape{int32_t(cell.frame_floats), 1}))
        fail("shape " + to_string(n.shape) + " but cell '" + cell.name + "' has a frame of " +
             std::to_string(cell.frame_floats) + " floats");
      continue;
    }
    if (is_node_batch(n)) {
      verify_node_batch(graph, id, shapes, fail);
      continue;
    }
    if (n.op == Op::matmul_nt_rows) {
      if (n.attrs.index < 0 || n.attrs.index + int64_t(n.arg_count) > graph.row_count())
        fail("reads rows [" + std::to_string(n.attrs.index) + ", " + std::to_string(n.attrs.index + n.arg_count) +
             ") of a pool of " + std::to_string(graph.row_count()));
      const auto rows = graph.rows(n.attrs.index, n.arg_count);
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t length = i % 2 == 0 ? n.shape.rows : n.shape.cols;
        if (rows[i] < 0 || rows[i] + length > shapes[i].rows)
          fail("argument " + std::to_string(i + 1) + "'s factor, rows [" + std::to_string(rows[i]) + ", " +
               std::to_string(rows[i] + length) + "), is not inside its " + to_string(shapes[i]));
      }
    }
    Shape inferred;
    try {
      inferred = n.op == Op::parameter ? graph.parameter(n.attrs.parameter).shape
                 : n.op == Op::lookup
                     ? Shape{graph.parameter(n.attrs.parameter).shape.rows, 1}
                     : infer_shape(n.op, shapes, n.attrs);
    } catch (const UsageError& e) {
      fail(std::string("shape inference fails: ") + e.what());
    }
    if (!(inferred == n.shape))
      fail("shape " + to_string(n.shape) + " but inference gives " + to_string(inferred));
  }
}

std::string print(const Graph& graph) {
  std::ostringstream out;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    out << '%' << id << " = " << op_name(n.op) << '(';
    bool first = true;
    for (NodeId arg : graph.args(id)) {
      out << (first ? "" : ", ") << '%' << arg;
      first = false;
    }
    out << ") : " << to_string(n.shape);
    if (n.op == Op::parameter || n.op == Op::lookup)
      out << " param=" << graph.parameter(n.attrs.parameter).name;
    if (has_flag(n.op, kConstant)) {
      char text[32];
      std::snprintf(text, sizeof text, "%.9g", n.attrs.constant);  // round-trips every float
      out << " constant=" << text;
    }
    if (has_flag(n.op, kRange)) out << " rows=[" << n.attrs.begin << ',' << n.attrs.end << ')';
    if (n.op == Op::matmul_nt_rows) {
      const auto rows = graph.rows(n.attrs.index, n.arg_count);
      out << " at=";
      for (size_t i = 0; i < rows.size(); ++i) out << (i ? "," : "") << rows[i];
    } else if (is_node_batch(n)) {
      const NodeBatch batch = node_batch(graph, id);
      out << " members=" << batch.members << " at=";
      for (size_t i = 0; i < batch.rows.size(); ++i) out << (i ? "," : "") << batch.rows[i];
      if (!batch.labels.empty()) out << " index=";
      for (size_t i = 0; i < batch.labels.size(); ++i) out << (i ? "," : "") << batch.labels[i];
    } else if (has_flag(n.op, kPerMemberIndex)) {
      out << " index=" << n.attrs.index;
    }
    if (n.op == Op::call) out << " cell=" << graph.cell(n.attrs.index).name;
    if (is_call_batch(n)) {
      const CallBatch batch = call_batch(graph, id);
      out << " members=" << batch.members << " terms=";
      for (size_t j = 0; j < batch.terms.size(); ++j) out << (j ? "," : "") << batch.terms[j];
      out << " at=";
      for (size_t i = 0; i < batch.rows.size(); ++i) out << (i ? "," : "") << batch.rows[i];
    }
    out << '\n';
  }
  return out.str();
}

}  // namespace edb::ir
