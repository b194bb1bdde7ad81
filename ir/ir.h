// The one IR header: ops, shapes, nodes and the Graph that trace/ records into.
// Scheduling, planning and execution live elsewhere and read a Graph; ir/ includes nothing of ours.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edb::ir {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = ~NodeId{0};

enum OpFlag : uint32_t {
  kLeaf = 1u << 0,            // holds data; never executed or scheduled
  kElementwise = 1u << 1,     // out[i] depends on in[i] only
  kLinear = 1u << 2,          // matrix products (GEMM / GEMV)
  kReduction = 1u << 3,       // reduces or normalises along rows
  kDataMovement = 1u << 4,    // copies rows around (concat, slice)
  kGather = 1u << 5,          // reads a table row chosen per member
  kPerMemberIndex = 1u << 6,  // Node::index is per-member data, not part of the signature
  kConstant = 1u << 7,        // Node::constant is an attribute (part of the signature)
  kRange = 1u << 8,           // Node::begin/end are attributes (part of the signature)
  kUnbatchable = 1u << 9,     // always runs alone (no op has this yet; the lower bound counts them)
  kCall = 1u << 10,           // a cell call: Node::index names the graph's cell (Graph::cell)
};

enum class Op : uint8_t {
#define EDB_OP(name, arity, flags) name,
#include "ir/ops.def"
#undef EDB_OP
};

inline constexpr int kOpCount = 0
#define EDB_OP(name, arity, flags) +1
#include "ir/ops.def"
#undef EDB_OP
    ;

namespace detail {
struct OpInfo {
  std::string_view name;
  int arity;
  uint32_t flags;
};
inline constexpr OpInfo kOpInfo[] = {
#define EDB_OP(name, arity, flags) {#name, arity, flags},
#include "ir/ops.def"
#undef EDB_OP
};
}  // namespace detail

inline std::string_view op_name(Op op) { return detail::kOpInfo[static_cast<int>(op)].name; }
inline int op_arity(Op op) { return detail::kOpInfo[static_cast<int>(op)].arity; }  // -1: variadic
inline uint32_t op_flags(Op op) { return detail::kOpInfo[static_cast<int>(op)].flags; }
inline bool has_flag(Op op, OpFlag flag) { return (op_flags(op) & flag) != 0; }

// The scalar rules of max and min that every executor follows: a NaN in either argument gives
// NaN (std::max would drop a NaN in its second argument).
inline float max_of(float a, float b) { return a != a || a >= b ? a : b; }
inline float min_of(float a, float b) { return a != a || a <= b ? a : b; }
// selu's constants (Klambauer et al. 2017, as DyNet): selu(x) = lambda elu(x, alpha).
inline constexpr float kSeluLambda = 1.0507009873554804934f;
inline constexpr float kSeluAlpha = 1.6732632423543772848f;

// Column-major rows x cols; vectors are rows x 1.
struct Shape {
  int32_t rows = 0;
  int32_t cols = 0;
  int64_t size() const { return int64_t{rows} * cols; }
  friend bool operator==(Shape, Shape) = default;
};
std::string to_string(Shape shape);

// A model parameter or lookup table as the graph sees it: stable identity plus where the data is.
// For a lookup table, shape is dim x entries and each entry is one column.
struct ParameterInfo {
  uint64_t uid = 0;      // process-unique id of the parameter object
  std::string name;      // stable name ("model/W_iou"); goes into signatures
  Shape shape;
  const float* data = nullptr;  // column-major, owned by the model
  const uint64_t* version = nullptr;  // changes whenever the data may have (null: never changes)
  // True once a span that may be written at any time was handed out (Parameter::values()): the
  // version then does not see every write, so a copy of the data (a compiled cell's packed
  // weights) compares the data itself before it is used.
  const bool* written_unversioned = nullptr;
};

// Attributes a node may carry; which ones mean something depends on the op's flags.
struct Attributes {
  float constant = 0.0f;   // scale, add_const (kConstant)
  int32_t begin = 0;       // slice (kRange)
  int32_t end = 0;
  int32_t members = 0;     // > 0: the node is a batch of that many members of its op (NodeBatch)
  int64_t index = 0;       // lookup row, pick label (kPerMemberIndex); input: offset in the constant pool;
                           // matmul_nt_rows: offset in the row pool (Graph::rows)
  uint32_t parameter = 0;  // parameter, lookup: index into Graph::parameters()
  Shape target;            // reshape: the shape asked for; matmul_nt_rows: its output's
};

// A cell as its call nodes see it: a whole body that runs as one compiled kernel per batch of
// calls. The call's value is its frame: frame_floats floats (a column) holding its outputs, each
// read through a slice view, and what the kernel keeps between its stages. Owned by whoever
// records the calls (trace/, once per cell and engine), and alive longer than any graph naming it.
struct CellBody {
  virtual ~CellBody() = default;
  std::string name;
  std::string key;        // identity among the engine's cells (its batching type's key)
  std::string signature;  // its batching type's printed name ("cell lstm(128x1, 128x1)")
  std::vector<Shape> arguments;  // what each argument of a call must be
  int64_t frame_floats = 0;
  int64_t flops = 0;             // one call's, as node_flops counts its body
  int64_t operations = 0;        // the body's nodes that compute (what a copy would record)
  int64_t batches = 0;           // the batches of the body's own schedule
  // The views recorded right after each call: a slice per output held in the frame, then a
  // reshape of the slice per such output that is a matrix.
  int64_t output_views = 0;
  // How a batch of calls lays out its frames. Empty: call by call, call c's frame whole at c *
  // frame_floats from the batch's first (a compiled cell's). Otherwise batch by batch, as the
  // body's batches run over all the calls at once (runtime/call_expansion.h): one call's frame is
  // split into blocks, block j at rows [frame_blocks[j], frame_blocks[j + 1]) of it, and a batch of
  // n calls lies block after block, block j holding every call's rows of it, call after call. A
  // row of a frame lies where locate() says; memplan places each view of a call there.
  std::vector<int64_t> frame_blocks;  // ascending, from 0 to frame_floats
  // Where row `at` of call `call`'s frame lies among the frames of a batch of `calls` calls, in
  // floats from the first float of the batch's frames.
  int64_t locate(int64_t at, int64_t call, int64_t calls) const {
    if (frame_blocks.empty()) return call * frame_floats + at;
    size_t j = 1;
    while (j + 1 < frame_blocks.size() && frame_blocks[j] <= at) ++j;
    const int64_t begin = frame_blocks[j - 1];
    return calls * begin + call * (frame_blocks[j] - begin) + (at - begin);
  }
};

struct Node {
  Op op = Op::input;
  uint32_t args_begin = 0;  // into Graph's argument pool
  uint32_t arg_count = 0;
  Shape shape;
  Attributes attrs;
};

class Graph {
 public:
  static constexpr size_t kMaxNodes = size_t{1} << 31;           // ids stay below kNoNode
  static constexpr size_t kMaxArguments = (size_t{1} << 32) - 1;  // positions in the pool are 32-bit
  // Appends a node whose arguments are already in the graph; the shape must already be inferred.
  // UsageError when the graph is full (kMaxNodes, kMaxArguments).
  NodeId add(Op op, std::span<const NodeId> args, Shape shape, const Attributes& attrs = {});
  // Registers a parameter (deduplicated by uid) and returns its index.
  uint32_t add_parameter(const ParameterInfo& info);
  // Copies user data into the graph's constant pool and returns its offset.
  int64_t add_constants(std::span<const float> values);

  size_t size() const { return nodes_.size(); }
  const Node& node(NodeId id) const { return nodes_[id]; }
  std::span<const NodeId> args(NodeId id) const {
    const Node& n = nodes_[id];
    return {arg_pool_.data() + n.args_begin, n.arg_count};
  }
  std::span<const NodeId> args(const Node& n) const {
    return {arg_pool_.data() + n.args_begin, n.arg_count};
  }
  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  const ParameterInfo& parameter(uint32_t index) const { return parameters_[index]; }
  // Points parameter `index` at other data: for a graph whose parameters stand for values that
  // lie elsewhere (runtime/call_expansion.h: each call's arguments, read where they lie).
  void set_parameter_data(uint32_t index, const float* data) { parameters_[index].data = data; }
  // Registers a parameter whose uid no parameter of the graph has (not checked: add_parameter
  // scans them all, which a graph of thousands of such stand-ins cannot afford).
  uint32_t add_new_parameter(const ParameterInfo& info) {
    parameters_.push_back(info);
    return static_cast<uint32_t>(parameters_.size() - 1);
  }
  int64_t constant_count() const { return static_cast<int64_t>(constants_.size()); }
  // Row offsets of arguments read in place (matmul_nt_rows: one per argument), kept apart from the
  // nodes as a node's constants are: add_rows returns where they start.
  int64_t add_rows(std::span<const int32_t> rows) {
    const int64_t at = static_cast<int64_t>(rows_.size());
    rows_.insert(rows_.end(), rows.begin(), rows.end());
    return at;
  }
  std::span<const int32_t> rows(int64_t at, size_t count) const { return {rows_.data() + at, count}; }
  int64_t row_count() const { return static_cast<int64_t>(rows_.size()); }
  // Registers a cell (deduplicated) and returns its index, for a call node's attrs.index.
  uint32_t add_cell(const CellBody* cell);
  const CellBody& cell(int64_t index) const { return *cells_[size_t(index)]; }
  size_t cell_count() const { return cells_.size(); }

  // Where a leaf's data lives (input or parameter node); null for other nodes.
  const float* leaf_data(NodeId id) const {
    const Node& n = nodes_[id];
    if (n.op == Op::input) return constants_.data() + n.attrs.index;
    if (n.op == Op::parameter) return parameters_[n.attrs.parameter].data;
    return nullptr;
  }

  void clear();  // keeps capacity, so a reused graph does not allocate

 private:
  std::vector<Node> nodes_;
  std::vector<NodeId> arg_pool_;
  std::vector<ParameterInfo> parameters_;
  std::vector<float> constants_;
  std::vector<int32_t> rows_;
  std::vector<const CellBody*> cells_;
};

// A call node that stands for a batch of calls of its cell (the backward pass records one per
// forward batch of calls, docs/design.md "Backward calls by batch"): attrs.end > 0 members, whose
// frames lie one after another (its value is members x frame_floats floats, a column). Each member
// passes the cell's arguments; argument j of every member is the sum of terms[j] terms, each a
// column read in place at a row of a node: the node's arguments are member after member, argument
// after argument, term after term, and rows[i] is where argument i's term starts in its node.
// attrs.begin is where the table (terms, then rows) starts in the graph's row pool.
struct CallBatch {
  int32_t members = 0;
  std::span<const int32_t> terms;  // per cell argument
  std::span<const int32_t> rows;   // per node argument
  int32_t terms_per_member() const {
    int32_t t = 0;
    for (int32_t n : terms) t += n;
    return t;
  }
};
inline bool is_call_batch(const Node& n) { return n.op == Op::call && n.attrs.end > 0; }
CallBatch call_batch(const Graph& graph, NodeId id);
// Records a batch call of the cell at index `cell`: its table goes into the row pool.
NodeId add_call_batch(Graph& graph, uint32_t cell, int32_t members, std::span<const int32_t> terms,
                      std::span<const NodeId> args, std::span<const int32_t> rows);

// A node that stands for a batch of `members` nodes of its op (the backward pass records one per
// forward batch whose rule it batches, docs/design.md "Backward rules by batch"): each member is a
// column of `rows`, member k's value lies at rows [k * rows, (k + 1) * rows) of the node, a column
// of members x rows (as a batch call's frames: its readers read a member at its rows). The node's
// arguments are member after member, one per argument slot of the op; each is read in place at a
// row of its node (`rows`, one per node argument) as a value of its slot's shape (`shapes`, the
// same for every member). An op with a per-member index (a pick's
// label) reads member k's from `labels`. attrs.index is where the table (per slot its rows and
// cols, then the rows, then the labels) starts in the graph's row pool.
struct NodeBatch {
  int32_t members = 0;
  std::vector<Shape> shapes;       // per argument slot
  std::span<const int32_t> rows;   // per node argument
  std::span<const int32_t> labels; // per member (ops with kPerMemberIndex), else empty
  size_t slots() const { return shapes.size(); }
};
inline bool is_node_batch(const Node& n) { return n.attrs.members > 0; }
// The ops a NodeBatch may be of (what the backward pass batches; the batched executors run them).
bool batches_members(Op op);
NodeBatch node_batch(const Graph& graph, NodeId id);
// One member's shape: a batch node's member column, any other node's own shape.
inline Shape member_shape(const Node& n) {
  return is_node_batch(n) ? Shape{n.shape.rows / n.attrs.members, 1} : n.shape;
}
// Records a batch node of `op` whose members are `member` columns: `args` and `rows` member after
// member (slots per member = shapes.size()), `labels` per member for an op with a per-member
// index; `attrs` carries the op's other attributes (a scale's constant). Its table goes into the
// row pool.
NodeId add_node_batch(Graph& graph, Op op, Shape member, std::span<const Shape> shapes, std::span<const NodeId> args,
                      std::span<const int32_t> rows, std::span<const int32_t> labels, Attributes attrs);

// Shape inference: the output shape of `op` on arguments of the given shapes, or edb::UsageError
// whose message starts with the public function ("edb::affine(): ...") and gives both shapes.
Shape infer_shape(Op op, std::span<const Shape> args, const Attributes& attrs);

// Arithmetic of one node as docs/design.md counts it: 2 per multiply-add, 1 per elementwise op.
int64_t node_flops(const Graph& graph, NodeId id);

// Checks arity, shapes (re-inferred), arguments defined before use, attribute ranges.
// Throws edb::InternalError naming the first bad node.
void verify(const Graph& graph);

// One line per node: "%7 = affine(%1, %2, %6) : 384x1 ...".
std::string print(const Graph& graph);

}  // namespace edb::ir
