// The private state behind the public handles (Model, Engine, Trace, Expr). trace/ only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "edbatch/edbatch.h"
#include "ir/ir.h"
#include "runtime/cell_kernels.h"
#include "runtime/driver.h"

namespace edb::detail {

struct ParameterStorage {
  std::string name;  // as given by the user; the graph sees "model/name"
  bool is_lookup = false;
  int rows = 0;      // lookup: dim
  int cols = 0;      // lookup: entries
  uint64_t uid = 0;  // process-unique
  // Bumped whenever the values may have changed (values() handed out, a load, an optimizer step),
  // so copies made of them (a compiled cell's packed weights) know when to be made again.
  uint64_t version = 0;
  // Set when Parameter::values() hands out a span: it may be written through at any time, after
  // evaluations too, without the version moving (ir::ParameterInfo::written_unversioned).
  bool written_unversioned = false;
  std::vector<float> values;

  // The values for writing: every writer goes through here, so the version moves with them.
  std::vector<float>& writable() {
    ++version;
    return values;
  }
};

struct ModelState;
struct BinaryFormat;
// The model file's body (trace/model.cpp) for the model's values now, and the file's framing.
std::string model_file_body(const ModelState& state);
uint64_t model_file_checksum(const ModelState& state);  // ir::checksum of that body, without building it
const BinaryFormat& model_file_format();

struct ModelState {
  std::string name;
  uint64_t seed = 1;
  std::vector<std::unique_ptr<ParameterStorage>> parameters;  // stable addresses

  ParameterStorage& at(uint32_t index) { return *parameters[index]; }
  ir::ParameterInfo info(uint32_t index) const;
};

// The model and index of a live parameter or lookup table by uid; {nullptr, 0} once its model is gone.
std::pair<ModelState*, uint32_t> find_parameter(uint64_t uid);

struct BackwardCell;

// A cell as first called in one engine (trace/cell.cpp): the body it recorded, its schedule, and
// the cells its calls name.
struct CellRecord {
  ir::Graph body;
  std::vector<ir::TypeId> types;          // per body node, in the engine's signature table
  std::vector<ir::NodeId> placeholders;   // the body node standing for argument i
  // The body's lookups, each made an argument after the cell's own (hoist_lookups): each call
  // looks the row up in its trace and passes it, so a call's gradient reaches the table's row
  // through the trace's lookup node. Per lookup: the table and the entry.
  std::vector<std::pair<ir::ParameterInfo, int64_t>> lookups;
  std::vector<ir::NodeId> outputs;
  // Per output (empty: none): the trace reads it in place as rows of a call's frame, with no view
  // (runtime::CallCell::in_place; a backward body's column dy of a weight's term).
  std::vector<uint8_t> outputs_read_in_place;
  std::vector<ir::NodeId> operations;     // body nodes that run, in order: offsets into this
                                          // list name them (the schedule's, a CallCell's)
  scheduler::CellSchedule schedule;       // the fewest-batch schedule over those offsets
  bool optimal = false;                   // the search proved it fewest
  ir::TypeId call_type = ir::kNoType;
  std::string call_key, call_name;  // how call_type was interned
  // Calls that pass parameters as arguments: a call type per pattern (which parameter each
  // argument is, uid 0 for none), so that the calls of one batch read the same parameters there
  // (a compiled cell packs a weight and reads a shared slot once for the whole batch).
  std::vector<std::pair<std::vector<uint64_t>, ir::TypeId>> parameter_call_types;
  // The body laid out for its calls, keeping what a backward pass reads (and, where it lowers, the
  // jit's program; why_not says why not).
  std::unique_ptr<runtime::CallCell> call_cell;
  // Where the jit lowers the body: the same layout keeping only what the calls return, which calls
  // use until the engine's first backward pass (inference pays no stores for a backward pass that
  // never comes); null otherwise.
  std::unique_ptr<runtime::CallCell> inference_cell;
  // The cell's backward body as a cell of its own (trace/cell_backward.cpp), derived at the first
  // backward pass through one of its calls; null where no gradient flows through the body.
  std::unique_ptr<BackwardCell> backward;
  bool backward_derived = false;
};

// A cell's backward body: a call of it takes the forward call's frame, the forward call's
// arguments and the gradient of each output the frame holds, and returns the gradients of the
// forward call's arguments and what its parameters' gradients need from the call.
struct BackwardCell {
  CellRecord cell;
  std::vector<int64_t> seed_offsets;  // per gradient argument: where its output lies in the forward frame
  std::vector<int64_t> seed_floats;
  // A value of the forward call, as the trace finds it: an argument of the call, rows of its frame,
  // or a constant.
  struct Value {
    enum Kind : uint8_t { argument, frame, constant } kind = argument;
    int64_t at = 0;  // argument: its index; frame: its first row
    ir::Shape shape;
    std::vector<float> values;  // constant
  };
  // What output k of a backward call is: the gradient of forward argument `index`, a term of the
  // gradient of the body's parameter `index`, or the dy of its term dy x^T (x: `x`).
  struct Output {
    enum Kind : uint8_t { argument, whole, pair } kind = argument;
    uint32_t index = 0;
    Value x;
  };
  std::vector<Output> outputs;
};

// A parameter's or lookup's gradient: node `gradient`'s value (kNoNode: none recorded), or a
// lookup's column in it from row `row` (read in place: a batch call's frame, a concat's gradient).
struct LeafGradient {
  ir::NodeId leaf = ir::kNoNode, gradient = ir::kNoNode;
  int32_t row = 0;
};

struct TraceState;
// What a cell's calls need from a trace, and how its backward pass is derived (trace/cell.cpp):
// Plans a recorded body (its operations, fewest-batch schedule, call type and, with single-node
// calls, its CallCell, whose frames keep what a backward pass reads when `for_backward`);
// `forward`: the cell whose backward body this is.
void plan_cell(struct EngineState& engine, CellRecord& record, const std::string& key, const std::string& printed,
               const std::string& name, bool for_backward, const runtime::CallCell* forward = nullptr);
// The type of a call of `record` on `arguments`: the cell's, or where arguments are parameters
// the cell's with which parameter each one is.
ir::TypeId call_type(EngineState& engine, CellRecord& record, const ir::Graph& graph,
                     std::span<const ir::NodeId> arguments);
// Records a call of `record` as one `call` node with its output views; appends its outputs (kNoNode
// for an output read in place, CallCell::in_place) and returns the call node (kNoNode for a body
// with no operations, whose outputs are the caller's nodes).
ir::NodeId record_call_node(TraceState& s, CellRecord& record, ir::TypeId type, std::span<const ir::NodeId> arguments,
                      std::vector<ir::NodeId>& outputs);

// The record of the cell whose calls name `cell` (an InternalError when the engine has none).
CellRecord& record_of(const EngineState& engine, const ir::CellBody& cell);
// Derives record.backward (trace/backward.cpp) once; on failure leaves it null with the reason.
void derive_backward(EngineState& engine, CellRecord& record);
// Between evaluations, with no trace of the engine alive: drops every cell record when there are
// more than EngineOptions::cache_entries, or with `all` (the signature table, whose types they
// hold, starts again); a cell called again records its body again. The executor forgets what it
// keeps by cell.
void bound_cell_records(EngineState& engine, bool all);

struct EngineState {
  explicit EngineState(const EngineOptions& options);
  runtime::Driver driver;
  std::vector<std::unique_ptr<CellRecord>> cell_records;           // one per distinct body
  std::unordered_map<std::string, CellRecord*> cells_by_structure;  // by the body's structure
  std::unordered_map<uint64_t, CellRecord*> cells;                  // by Cell::id()
  static constexpr size_t kMaxCellIds = 4096;
  uint64_t last_cell_id = 0;        // the cell found last in `cells`, and its record
  CellRecord* last_cell = nullptr;
  // Cells are lowered to programs the jit runs as one kernel per batch of calls (the jit executor,
  // without check_finite, which reads every value); otherwise their frames keep every value.
  bool lower_cells = false;
  // EngineOptions::batched_backward where cells lower: a backward pass records one call node per
  // forward batch of calls whose backward cell compiles (ir::CallBatch, trace/backward.cpp).
  bool batch_backward_calls = false;
  // A backward pass has run: calls use their cell's training layout (CellRecord::call_cell), no
  // longer its inference layout (CellRecord::inference_cell).
  bool trained = false;
};

// One recording scope. States are pooled and never freed, so a stale Expr always points at a
// live state whose generation has moved on: using it is a clean UsageError, never a dangling read.
struct TraceState {
  uint32_t generation = 0;
  bool active = false;
  uint32_t call_nodes = 0;  // cell calls recorded in this trace
  std::string cell_scope;   // the cell whose body records in this state (its own scope), or empty
  // With cells off: the cell whose body records into this trace now (a call inside it is refused,
  // as cells on refuse it), or null.
  const std::string* inline_body = nullptr;
  // After record_calls_again: the new id of each node recorded before it, for the Exprs of the
  // generation before (renumbered_generation).
  std::vector<ir::NodeId> renumbered;
  uint32_t renumbered_generation = 0;
  EngineState* engine = nullptr;
  runtime::TraceData data;
  std::vector<std::pair<uint64_t, ir::NodeId>> parameter_nodes;  // uid -> node, this trace
  std::vector<std::pair<uint64_t, uint32_t>> tables;  // uid -> index in the graph's parameters
  // filled()'s and selection()'s constants, one node per shape and content for the trace (rows,
  // cols, the value's bits, and a selection's first row and step, INT32_MIN for a filled one):
  // broadcasting, the composed reductions and the convolutions stretch, sum and select through
  // products with them, so a batch of those products reads one shared operand rather than a
  // constant per member.
  std::map<std::tuple<int32_t, int32_t, uint32_t, int32_t, int32_t>, ir::NodeId> filled_nodes;
  // The backward pass Trace::record_backward() recorded last, for Trace::gradients(): its loss, and
  // each parameter or lookup node with where its gradient lies.
  ir::NodeId backward_loss = ir::kNoNode;
  std::vector<LeafGradient> backward_leaves;

  // The graph's parameter index of a lookup table, registering it on first use.
  // By uid first: a table's info names it ("model/name", a string built), which a lookup of a
  // table already registered (every lookup but the first) does not need.
  uint32_t table_index(ModelState& model, uint32_t index) {
    if (const uint32_t* seen = registered_table(model.at(index).uid)) return *seen;
    return table_index(model.info(index));
  }
  uint32_t table_index(const ir::ParameterInfo& table) {
    if (const uint32_t* seen = registered_table(table.uid)) return *seen;
    const uint32_t graph_index = data.graph.add_parameter(table);
    tables.emplace_back(table.uid, graph_index);
    return graph_index;
  }

  // The graph's parameter index of the table of `uid`, if this trace registered it.
  const uint32_t* registered_table(uint64_t uid) const {
    for (const auto& [seen, graph_index] : tables)
      if (seen == uid) return &graph_index;
    return nullptr;
  }

  static TraceState* acquire(EngineState* engine);
  void release();
  static void release_all(EngineState* engine);  // the engine is going away

  // The node behind `e`, after checking it belongs to this live trace; `function` names the caller.
  static TraceState& of(const Expr& e, const char* function);
  // The node behind an Expr of this trace (checked by `of`), renumbered if it predates record_calls_again.
  ir::NodeId id(const Expr& e) const { return e.generation_ == generation ? e.id_ : renumbered[e.id_]; }
  Expr make(ir::NodeId id) { return Expr(this, generation, id); }
  // Before the trace changes: an execution of it still running in the background (run() with two
  // or more threads) reads the graph's arrays, which recording appends to and may move, so it
  // finishes first. Every recording entry point calls this (live() and of() in trace.cpp,
  // Cell::record); another trace's execution goes on.
  void settle() {
    if (data.pending.load(std::memory_order_acquire)) engine->driver.drain(data);
  }
  // Records the trace again (trace/cell.cpp), renumbering every node: each call is recorded again
  // with its cell's current layout (an inference layout replaced by the one a backward pass
  // reads). The trace evaluates again from its start. Exprs from before stay valid through
  // `renumbered`; the generation moves on, so the caller's Trace must take the new one.
  void record_calls_again();
  [[noreturn]] static void node_limit_error(int64_t limit);
  // A cell body read a value recorded outside it: argument `argument` (from 1) of `function`.
  [[noreturn]] static void captured_value_error(const std::string& cell, const std::string& function, size_t argument);
  // The trace's node for a parameter: one per parameter per trace.
  ir::NodeId parameter_node(const ir::ParameterInfo& info);
  // A UsageError (node_limit_error) where `more` nodes would take the trace past
  // EngineOptions::max_trace_nodes.
  void check_room(size_t more = 1) const {
    const int64_t limit = engine->driver.options().max_trace_nodes;
    if (limit > 0 && int64_t(data.graph.size() + more) > limit) node_limit_error(limit);
  }
  // Appends a node, its batching type (interned now, while its arguments are in cache) and
  // whether it depends on a parameter.
  Expr add(ir::Op op, std::span<const ir::NodeId> args, ir::Shape shape, const ir::Attributes& attrs) {
    check_room();
    const ir::NodeId id = data.graph.add(op, args, shape, attrs);
    data.types.push_back(engine->driver.signatures.intern_recorded(data.graph, id, data.types));
    keep_depends();
    return make(id);
  }

  // Per node, whether it depends on a parameter or lookup (a call also where its cell's body reads
  // a parameter): where a backward pass's gradients can flow (Backward::gradient_flows). Kept as
  // nodes are recorded, while a node and its arguments are in cache, so that the pass walks no
  // node for it; a node recorded without add() (a call and its views, trace/cell.cpp) is caught up
  // at the next add() or pass. Valid only for the generation it was kept in: record_calls_again()
  // renumbers every node (what add() keeps while it records them again is dropped once the
  // generation moves on), and a released trace starts again.
  const std::vector<uint8_t>& depends() {
    keep_depends();
    return depends_;
  }

 private:
  void keep_depends() {
    if (depends_generation_ != generation) {
      depends_.clear();
      depends_generation_ = generation;
    }
    const ir::Graph& graph = data.graph;
    for (ir::NodeId n = ir::NodeId(depends_.size()); n < graph.size(); ++n) {
      const ir::Node& node = graph.node(n);
      uint8_t d = node.op == ir::Op::parameter || node.op == ir::Op::lookup;
      for (ir::NodeId a : graph.args(node)) d |= depends_[a];
      if (!d && node.op == ir::Op::call)  // its body's parameters
        d = !static_cast<const runtime::CallCell&>(graph.cell(node.attrs.index)).body.parameters().empty();
      depends_.push_back(d);
    }
  }
  std::vector<uint8_t> depends_;
  uint32_t depends_generation_ = 0;
};

// A rows x cols input of these values (column-major) in the trace: inside a cell body, a constant of
// the body (trace/composed_ops.cpp).
Expr constant(TraceState& s, int rows, int cols, std::span<const float> values);
// The same with every value `value`.
Expr filled(TraceState& s, int rows, int cols, float value);
// The rows x cols selection whose column j is one at row begin + j step (zero where that is not a
// row): x times it is x's columns begin + j step, zero columns where those are not x's.
Expr selection(TraceState& s, int rows, int cols, int begin, int step);

}  // namespace edb::detail
