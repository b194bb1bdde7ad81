// edb::Cell: the body is recorded once per engine, its fewest-batch schedule found once, and each
// call is one `call` node of the caller's trace, which the policies batch as any node
// (runtime/cell_lowering.h: the cell it names).
#include <algorithm>
#include <atomic>

#include "scheduler/exact.h"
#include "trace/state.h"

namespace edb {

using detail::CellRecord;
using detail::TraceState;

namespace {

std::atomic<uint64_t> next_cell_id{1};

std::string shape_text(int rows, int cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// Whether node `id` is a scale_gradient, or a view (a reshape, a slice of a column) of one.
bool scales_gradient(const ir::Graph& graph, ir::NodeId id) {
  for (;;) {
    const ir::Node& n = graph.node(id);
    if (n.op == ir::Op::scale_gradient) return true;
    if (n.op != ir::Op::reshape && !(n.op == ir::Op::slice && n.shape.cols == 1)) return false;
    id = graph.args(n)[0];
  }
}

// A placeholder (the cell's argument) that the body also copies into a concat is read from
// that copy by the concat's later consumers: slice(concat, rows) instead of the argument. Across
// a batch of calls the arguments lie wherever their producers put them (a gather for a GEMM), but
// the concat's outputs lie in call order, so a slice of them is a strided view read in place.
// Rebuilds `body` (and its `types`, `placeholders`, `outputs`) when anything changes.
void read_arguments_from_concats(ir::Graph& body, std::vector<ir::TypeId>& types, std::vector<ir::NodeId>& placeholders,
                                 std::vector<ir::NodeId>& outputs, ir::SignatureTable& signatures) {
  std::vector<uint8_t> is_placeholder(body.size(), 0);
  for (ir::NodeId p : placeholders) is_placeholder[p] = 1;
  // Where each column-vector placeholder is copied first: (concat, first row).
  std::vector<std::pair<ir::NodeId, int32_t>> copied(body.size(), {ir::kNoNode, 0});
  bool any = false;
  for (ir::NodeId id = 0; id < body.size(); ++id) {
    const ir::Node& n = body.node(id);
    if (n.op == ir::Op::concat && n.shape.cols == 1) {
      int32_t row = 0;
      for (ir::NodeId arg : body.args(n)) {
        if (is_placeholder[arg] && copied[arg].first == ir::kNoNode) copied[arg] = {id, row};
        row += body.node(arg).shape.rows;
      }
      continue;
    }
    for (ir::NodeId arg : body.args(n))
      any |= is_placeholder[arg] && copied[arg].first != ir::kNoNode;
  }
  if (!any) return;

  ir::Graph out;
  std::vector<ir::TypeId> out_types;
  std::vector<ir::NodeId> to(body.size(), ir::kNoNode);
  std::vector<ir::NodeId> slice_of(body.size(), ir::kNoNode);  // placeholder -> its slice of the copy
  std::vector<ir::NodeId> args;
  auto add = [&](ir::Op op, std::span<const ir::NodeId> a, ir::Shape shape, const ir::Attributes& attrs) {
    const ir::NodeId id = out.add(op, a, shape, attrs);
    out_types.push_back(signatures.intern_recorded(out, id, out_types));
    return id;
  };
  for (const ir::ParameterInfo& info : body.parameters()) out.add_parameter(info);
  for (ir::NodeId id = 0; id < body.size(); ++id) {
    const ir::Node& n = body.node(id);
    args.clear();
    for (ir::NodeId arg : body.args(n))
      args.push_back(n.op != ir::Op::concat && slice_of[arg] != ir::kNoNode ? slice_of[arg] : to[arg]);
    ir::Attributes attrs = n.attrs;
    if (n.op == ir::Op::input)
      attrs.index = out.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
    to[id] = add(n.op, args, n.shape, attrs);
    if (n.op != ir::Op::concat) continue;
    for (ir::NodeId arg : body.args(n)) {
      if (!is_placeholder[arg] || copied[arg].first != id || slice_of[arg] != ir::kNoNode) continue;
      ir::Attributes rows;
      rows.begin = copied[arg].second;
      rows.end = rows.begin + body.node(arg).shape.rows;
      slice_of[arg] = add(ir::Op::slice, std::span(&to[id], 1), body.node(arg).shape, rows);
    }
  }
  for (ir::NodeId& p : placeholders) p = to[p];
  for (ir::NodeId& o : outputs) o = to[o];
  body = std::move(out);
  types = std::move(out_types);
}

// Each lookup of the body becomes an argument after the cell's own: its placeholder (an input of
// the row's shape) stands where the lookup stood, and `lookups` gets its table and entry, which
// every call looks up in its own trace and passes. A call's gradient then reaches the table's row
// through the caller's lookup node, as any argument's does, and the body holds no lookup for the
// backward body or the lowering to refuse. Rebuilds `body` (and its `types`, `placeholders`,
// `outputs`) when it holds a lookup.
void hoist_lookups(ir::Graph& body, std::vector<ir::TypeId>& types, std::vector<ir::NodeId>& placeholders,
                   std::vector<ir::NodeId>& outputs, std::vector<std::pair<ir::ParameterInfo, int64_t>>& lookups,
                   ir::SignatureTable& signatures) {
  bool any = false;
  for (ir::NodeId id = 0; id < body.size(); ++id) any |= body.node(id).op == ir::Op::lookup;
  if (!any) return;
  ir::Graph out;
  std::vector<ir::TypeId> out_types;
  std::vector<ir::NodeId> to(body.size(), ir::kNoNode), args, hoisted;
  for (const ir::ParameterInfo& info : body.parameters()) out.add_parameter(info);
  for (ir::NodeId id = 0; id < body.size(); ++id) {
    const ir::Node& n = body.node(id);
    ir::Attributes attrs = n.attrs;
    if (n.op == ir::Op::lookup) {
      lookups.emplace_back(body.parameter(n.attrs.parameter), n.attrs.index);
      attrs = ir::Attributes{};
      attrs.index = out.add_constants(std::vector<float>(size_t(n.shape.size()), 0.0f));
      to[id] = out.add(ir::Op::input, {}, n.shape, attrs);
      hoisted.push_back(to[id]);
    } else {
      args.clear();
      for (ir::NodeId arg : body.args(n)) args.push_back(to[arg]);
      if (n.op == ir::Op::input)
        attrs.index = out.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
      to[id] = out.add(n.op, args, n.shape, attrs);
    }
    out_types.push_back(signatures.intern_recorded(out, to[id], out_types));
  }
  for (ir::NodeId& p : placeholders) p = to[p];
  placeholders.insert(placeholders.end(), hoisted.begin(), hoisted.end());
  for (ir::NodeId& o : outputs) o = to[o];
  body = std::move(out);
  types = std::move(out_types);
}

}  // namespace

Cell::Cell(std::string name, std::vector<std::pair<int, int>> inputs, Body body)
    : name_(std::move(name)), inputs_(std::move(inputs)), body_(std::move(body)), id_(next_cell_id++) {
  if (!body_) throw UsageError("edb::Cell: cell '" + name_ + "' has no body");
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].first <= 0 || inputs_[i].second <= 0)
      throw UsageError("edb::Cell: cell '" + name_ + "' input " + std::to_string(i + 1) + " has shape " +
                       shape_text(inputs_[i].first, inputs_[i].second) + "; rows and cols must be positive");
}

std::vector<Expr> Cell::operator()(Trace& trace, std::initializer_list<Expr> arguments) const {
  return (*this)(trace, std::span<const Expr>(arguments.begin(), arguments.size()));
}

namespace {

// What makes two cells one: name, argument shapes, the body's ops, its parameters and constants.
std::string structure_key(const Cell& cell, const CellRecord& record) {
  std::string key = cell.name() + '\n' + ir::print(record.body);
  for (const ir::ParameterInfo& p : record.body.parameters()) key += "uid " + std::to_string(p.uid) + '\n';
  for (ir::NodeId id = 0; id < record.body.size(); ++id)
    if (record.body.node(id).op == ir::Op::input)
      key.append(reinterpret_cast<const char*>(record.body.leaf_data(id)),
                 size_t(record.body.node(id).shape.size()) * sizeof(float));
  for (ir::NodeId p : record.placeholders) key += "arg %" + std::to_string(p) + '\n';
  for (const auto& [table, entry] : record.lookups) key += "lookup " + std::to_string(table.uid) + " " + std::to_string(entry) + '\n';
  for (ir::NodeId o : record.outputs) key += "out %" + std::to_string(o) + '\n';
  return key;
}

}  // namespace

CellRecord& detail::record_of(const EngineState& engine, const ir::CellBody& cell) {
  for (const auto& record : engine.cell_records)
    if (record->call_cell.get() == &cell || record->inference_cell.get() == &cell) return *record;
  throw InternalError("edb::Cell: a call node names a cell its engine does not hold");
}

void detail::bound_cell_records(EngineState& engine, bool all) {
  CacheSize& size = engine.driver.cell_records;
  if (engine.cell_records.empty() || (!all && int64_t(engine.cell_records.size()) <= size.max_entries)) return;
  engine.driver.forget_cells();  // the executor's compiled cells and expansions point into the records
  size.evictions += int64_t(engine.cell_records.size());
  engine.cells.clear();
  engine.last_cell_id = 0;
  engine.last_cell = nullptr;
  engine.cells_by_structure.clear();
  engine.cell_records.clear();
  size.entries = 0;
}

void detail::plan_cell(EngineState& engine, CellRecord& record, const std::string& key, const std::string& printed,
                       const std::string& name, bool for_backward, const runtime::CallCell* forward) {
  std::vector<uint32_t> offset_of(record.body.size(), 0);
  for (ir::NodeId id = 0; id < record.body.size(); ++id)
    if (!ir::has_flag(record.body.node(id).op, ir::kLeaf)) {
      offset_of[id] = uint32_t(record.operations.size());
      record.operations.push_back(id);
    }
  const scheduler::ExactResult planned = scheduler::schedule_fewest_batches({record.body, record.types});
  record.optimal = planned.optimal;
  std::vector<ir::NodeId> offsets;
  for (size_t b = 0; b < planned.schedule.batch_count(); ++b) {
    offsets.clear();
    for (ir::NodeId id : planned.schedule.batch(b)) offsets.push_back(offset_of[id]);
    record.schedule.batches.add_batch(planned.schedule.batch_type[b], offsets);
  }
  record.call_key = key;
  record.call_name = printed;
  record.call_type = engine.driver.signatures.intern_named(record.call_key, printed);  // no parameter arguments
  for (char c : name) record.schedule.name += c >= ' ' && c != 127 ? c : '?';
  // check_finite reads every value: the frame keeps them all, as for a backward pass.
  record.call_cell = runtime::make_call_cell(record.body, record.types, record.placeholders, record.outputs,
                                              record.schedule.batches, record.schedule.name, engine.lower_cells,
                                              for_backward || engine.driver.options().check_finite, forward,
                                              record.outputs_read_in_place);
  if (for_backward && !engine.driver.options().check_finite)
    record.inference_cell = runtime::make_call_cell(record.body, record.types, record.placeholders, record.outputs,
                                                    record.schedule.batches, record.schedule.name, engine.lower_cells,
                                                    false);
  // Neither lowers: both keep every value, laid out alike (runtime/cell_lowering.h).
  if (record.inference_cell && !record.inference_cell->lowered && !record.call_cell->lowered)
    record.inference_cell.reset();
  for (runtime::CallCell* cell : {record.call_cell.get(), record.inference_cell.get()}) {
    if (!cell) continue;
    cell->key = key;
    cell->signature = printed;
    cell->batches = int64_t(record.schedule.batches.batch_count());
  }
}

namespace {

// Records the body of `cell` in a scope of its own on `engine`, and plans its schedule; or finds
// the record of a cell declared before with the same body (a Cell declared again per batch).
// `scope` is a fresh trace on `engine` for the body alone.
CellRecord* record_body(detail::EngineState& engine, const Cell& cell,
                        const std::vector<std::pair<int, int>>& inputs, const Cell::Body& body,
                        Trace& scope, TraceState* state) {
  auto record = std::make_unique<CellRecord>();
  const std::string who = "edb::Cell: cell '" + cell.name() + "'";
  std::vector<Expr> placeholders;
  for (const auto& [rows, cols] : inputs)
    placeholders.push_back(scope.input(rows, cols, std::vector<float>(size_t(rows) * size_t(cols), 0.0f)));
  std::vector<Expr> outputs = body(scope, placeholders);
  if (outputs.empty()) throw UsageError(who + ": the body returned no outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].valid() || &TraceState::of(outputs[i], "edb::Cell") != state)
      throw UsageError(who + ": output " + std::to_string(i + 1) +
                       " was not recorded by the body on the trace it was given");
    // An output that is a scale_gradient of a value (or a view of one) is stored apart, as that
    // value plus 0: a view would share its rows of the frame with the value, or with another output
    // of it, and the gradients the trace sends to two outputs at the same rows reach the body as
    // one (the scale was lost where the value was an output too).
    if (scales_gradient(state->data.graph, outputs[i].node_id())) outputs[i] = outputs[i] + 0.0f;
    // An output may be a leaf (an argument returned unchanged, a parameter, a constant), as with
    // cells off: the call then returns that node itself.
    record->outputs.push_back(outputs[i].node_id());
  }
  if (state->call_nodes)
    throw UsageError(who + ": the body calls another cell; cells do not nest yet");
  record->body = state->data.graph;
  record->types = state->data.types;
  for (const Expr& p : placeholders) record->placeholders.push_back(p.node_id());
  hoist_lookups(record->body, record->types, record->placeholders, record->outputs, record->lookups,
                engine.driver.signatures);
  read_arguments_from_concats(record->body, record->types, record->placeholders, record->outputs,
                              engine.driver.signatures);
  // A body may record no operations (it returns its arguments, parameters or constants): its
  // calls then record nothing but those.
  std::string key = structure_key(cell, *record);
  if (auto it = engine.cells_by_structure.find(key); it != engine.cells_by_structure.end()) return it->second;
  std::string printed = "cell " + cell.name() + "(";
  for (size_t i = 0; i < inputs.size(); ++i)
    printed += (i ? ", " : "") + shape_text(inputs[i].first, inputs[i].second);
  printed += ")";
  detail::plan_cell(engine, *record, std::to_string(cell.id()), printed, cell.name(), true);
  CellRecord* kept = engine.cell_records.emplace_back(std::move(record)).get();
  engine.cells_by_structure.emplace(std::move(key), kept);
  engine.driver.cell_records.entries = int64_t(engine.cell_records.size());
  return kept;
}

// The caller's node for a parameter or constant of a cell's body: the trace's one node for the
// parameter, or a copy of the constant.
ir::NodeId caller_leaf(TraceState& s, const ir::Graph& body, ir::NodeId leaf) {
  const ir::Node& n = body.node(leaf);
  if (n.op == ir::Op::parameter) return s.parameter_node(body.parameter(n.attrs.parameter));
  ir::Attributes attrs = n.attrs;
  attrs.index = s.data.graph.add_constants(std::span<const float>(body.leaf_data(leaf), size_t(n.shape.size())));
  return s.add(ir::Op::input, {}, n.shape, attrs).node_id();
}

}  // namespace

// The type of a call of `record` on `arguments`: the cell's, or where arguments are parameters
// the cell's with which parameter each one is (calls batch only with calls on the same ones).
ir::TypeId detail::call_type(detail::EngineState& engine, CellRecord& record, const ir::Graph& graph,
                     std::span<const ir::NodeId> arguments) {
  bool any = false;
  for (ir::NodeId id : arguments) any |= graph.node(id).op == ir::Op::parameter;
  if (!any) return record.call_type;
  thread_local std::vector<uint64_t> uids;
  uids.clear();
  for (ir::NodeId id : arguments) {
    const ir::Node& n = graph.node(id);
    uids.push_back(n.op == ir::Op::parameter ? graph.parameter(n.attrs.parameter).uid : 0);
  }
  for (const auto& [pattern, type] : record.parameter_call_types)
    if (pattern == uids) return type;
  const ir::TypeId type = engine.driver.signatures.intern_call(graph, record.call_key, record.call_name, arguments);
  record.parameter_call_types.emplace_back(uids, type);
  return type;
}

// Records the call as one `call` node, its frame, and a slice view of it per output; an output
// that is a leaf of the body is the caller's node for it (an argument, a parameter, a constant).
ir::NodeId detail::record_call_node(TraceState& s, CellRecord& record, ir::TypeId type,
                                    std::span<const ir::NodeId> arguments, std::vector<ir::NodeId>& outputs) {
  ir::Graph& graph = s.data.graph;
  const runtime::CallCell& cell =
      record.inference_cell && !s.engine->trained ? *record.inference_cell : *record.call_cell;
  s.check_room(1 + record.outputs.size());
  ir::NodeId call = ir::kNoNode;
  if (cell.operations > 0) {
    ir::Attributes attrs;
    attrs.index = graph.add_cell(&cell);
    call = graph.add(ir::Op::call, arguments, ir::Shape{int32_t(cell.frame_floats), 1}, attrs);
    s.data.types.push_back(type);
    ++s.call_nodes;
  }
  // The views follow their call directly (memplan's place_call_outputs finds them there), then
  // the leaves returned.
  const size_t begin = outputs.size();
  for (size_t k = 0; k < record.outputs.size(); ++k) {
    if (cell.output_offsets[k] < 0 || cell.first_alike[k] != k || cell.read_in_place(k)) {
      outputs.push_back(ir::kNoNode);  // a leaf, or the view of an earlier output alike: below
      continue;                        // (an output read in place stays kNoNode)
    }
    ir::Attributes rows;
    rows.begin = int32_t(cell.output_offsets[k]);
    rows.end = rows.begin + int32_t(record.body.node(record.outputs[k]).shape.size());
    outputs.push_back(graph.add(ir::Op::slice, std::span(&call, 1), ir::Shape{rows.end - rows.begin, 1}, rows));
    s.data.types.push_back(ir::kCallOutput);
  }
  // A matrix output: a reshape of its rows of the frame, also a view.
  for (size_t k = 0; k < record.outputs.size(); ++k) {
    const ir::Shape shape = record.body.node(record.outputs[k]).shape;
    if (cell.output_offsets[k] < 0 || cell.first_alike[k] != k || cell.read_in_place(k) || shape.cols == 1) continue;
    ir::Attributes target;
    target.target = shape;
    outputs[begin + k] = graph.add(ir::Op::reshape, std::span(&outputs[begin + k], 1), shape, target);
    s.data.types.push_back(ir::kCallOutput);
  }
  for (size_t k = 0; k < record.outputs.size(); ++k)
    if (cell.output_offsets[k] >= 0 && cell.first_alike[k] != k) outputs[begin + k] = outputs[begin + cell.first_alike[k]];
  for (size_t k = 0; k < record.outputs.size(); ++k) {
    if (cell.output_offsets[k] >= 0) continue;
    const ir::NodeId leaf = record.outputs[k];
    const auto argument = std::find(record.placeholders.begin(), record.placeholders.end(), leaf);
    outputs[begin + k] = argument != record.placeholders.end()
                             ? arguments[size_t(argument - record.placeholders.begin())]
                             : caller_leaf(s, record.body, leaf);
  }
  return call;
}

void detail::TraceState::record_calls_again() {
  if (call_nodes == 0) return;
  ir::Graph old;
  std::swap(old, data.graph);
  std::vector<ir::TypeId> old_types;
  std::swap(old_types, data.types);
  data.clear();
  backward_loss = ir::kNoNode;  // its nodes are renumbered: a pass recorded again replaces it
  parameter_nodes.clear();
  filled_nodes.clear();  // made again on their next use
  // The same parameter indices: lookups and the tables list keep theirs.
  for (const ir::ParameterInfo& info : old.parameters()) data.graph.add_parameter(info);
  std::vector<ir::NodeId> to(old.size(), ir::kNoNode);
  std::vector<ir::NodeId> args, outputs;
  ir::NodeId call = ir::kNoNode;  // the last call node, whose output views follow it
  CellRecord* record = nullptr;
  call_nodes = 0;  // counted again as they are recorded
  for (ir::NodeId id = 0; id < old.size(); ++id) {
    const ir::Node& n = old.node(id);
    args.clear();
    for (ir::NodeId arg : old.args(n)) args.push_back(to[arg]);
    if (ir::is_call_batch(n))  // a backward pass's: recorded only in a trace whose calls need no new layout
      throw InternalError("TraceState::record_calls_again: node %" + std::to_string(id) + " is a batch of calls");
    if (n.op == ir::Op::call) {
      call = id;
      record = &record_of(*engine, old.cell(n.attrs.index));
      outputs.clear();
      to[id] = record_call_node(*this, *record, old_types[id], args, outputs);
      continue;
    }
    if (n.op == ir::Op::parameter) {
      // One node per parameter: every use then adds to the one gradient the backward pass reports
      // for it.
      const uint64_t uid = old.parameter(n.attrs.parameter).uid;
      const auto seen = std::find_if(parameter_nodes.begin(), parameter_nodes.end(), [&](const auto& p) { return p.first == uid; });
      if (seen != parameter_nodes.end()) {
        to[id] = seen->second;
        continue;
      }
    }
    if (n.op == ir::Op::reshape && old_types[id] == ir::kCallOutput) {  // a matrix output's view
      to[id] = to[old.args(n)[0]];
      continue;
    }
    if (n.op == ir::Op::slice && old.args(n)[0] == call) {
      // The output at these rows of the frame (a view at the same offset may be shorter).
      const auto& cell = static_cast<const runtime::CallCell&>(old.cell(old.node(call).attrs.index));
      size_t k = 0;
      while (k < cell.output_offsets.size() &&
             !(cell.output_offsets[k] == n.attrs.begin && cell.body.node(cell.outputs[k]).shape.size() == n.shape.size()))
        ++k;
      if (k == cell.output_offsets.size()) throw InternalError("TraceState::record_calls_again: a view of a call at no output");
      to[id] = outputs[k];
      continue;
    }
    ir::Attributes attrs = n.attrs;
    if (n.op == ir::Op::input) attrs.index = data.graph.add_constants(std::span<const float>(old.leaf_data(id), size_t(n.shape.size())));
    if (n.op == ir::Op::matmul_nt_rows) {  // an earlier backward pass's: it reads frames of calls kept
      if (std::find(args.begin(), args.end(), ir::kNoNode) != args.end())
        throw InternalError("TraceState::record_calls_again: node %" + std::to_string(id) + " reads a node not recorded again");
      attrs.index = data.graph.add_rows(old.rows(n.attrs.index, n.arg_count));
    }
    to[id] = data.graph.add(n.op, args, n.shape, attrs);
    data.types.push_back(engine->driver.signatures.intern_recorded(data.graph, to[id], data.types));
    if (n.op == ir::Op::parameter) parameter_nodes.emplace_back(old.parameter(n.attrs.parameter).uid, to[id]);
  }
  renumbered = std::move(to);
  renumbered_generation = generation++;
}

namespace {

// With cells off the body records straight into the caller's trace; it is refused, as with cells
// on, when it reads a node recorded before the call that is neither an argument nor a parameter.
std::vector<Expr> record_inline(const std::string& name, const Cell::Body& body, Trace& trace, TraceState& s,
                                std::span<const Expr> arguments, std::span<const ir::NodeId> argument_span) {
  const ir::NodeId first = ir::NodeId(s.data.graph.size());
  const std::vector<ir::NodeId> argument_ids(argument_span.begin(), argument_span.end());  // reused by Cell::record
  // The body makes its own filled constants (a body reads nothing recorded before it); the trace's
  // come back after it.
  struct InlineBody {
    TraceState& s;
    decltype(TraceState::filled_nodes) outside;
    ~InlineBody() {
      s.inline_body = nullptr;
      s.filled_nodes = std::move(outside);
    }
  } inside{s, std::move(s.filled_nodes)};
  s.filled_nodes.clear();
  s.inline_body = &name;
  std::vector<Expr> outputs = body(trace, arguments);
  const ir::Graph& graph = s.data.graph;
  for (ir::NodeId id = first; id < graph.size(); ++id) {
    const auto args = graph.args(id);
    for (size_t a = 0; a < args.size(); ++a) {
      const ir::NodeId arg = args[a];
      if (arg >= first || graph.node(arg).op == ir::Op::parameter) continue;
      if (std::find(argument_ids.begin(), argument_ids.end(), arg) != argument_ids.end()) continue;
      TraceState::captured_value_error(name, "edb::" + std::string(ir::op_name(graph.node(id).op)) + "()", a + 1);
    }
  }
  return outputs;
}

}  // namespace

std::vector<Expr> Cell::operator()(Trace& trace, std::span<const Expr> arguments) const {
  std::vector<Expr> outputs;
  record(trace, arguments, &outputs, {});
  return outputs;
}

void Cell::operator()(Trace& trace, std::span<const Expr> arguments, std::span<Expr> outputs) const {
  record(trace, arguments, nullptr, outputs);
}

void Cell::record(Trace& trace, std::span<const Expr> arguments, std::vector<Expr>* vector, std::span<Expr> span) const {
  // Built only for an error: a call is recorded millions of times.
  auto who = [&] { return "edb::Cell: cell '" + name_ + "'"; };
  if (!trace.active()) throw UsageError(who() + ": the trace has finished (or its Engine was destroyed)");
  TraceState& s = *trace.state_;
  s.settle();
  if (arguments.size() != inputs_.size())
    throw UsageError(who() + " takes " + std::to_string(inputs_.size()) + " arguments, got " +
                     std::to_string(arguments.size()));
  thread_local std::vector<ir::NodeId> argument_ids, output_ids;
  argument_ids.clear();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (&TraceState::of(arguments[i], "edb::Cell") != &s)
      throw UsageError(who() + ": argument " + std::to_string(i + 1) + " belongs to a different trace");
    argument_ids.push_back(s.id(arguments[i]));
    const ir::Shape shape = s.data.graph.node(argument_ids.back()).shape;
    if (shape.rows != inputs_[i].first || shape.cols != inputs_[i].second)
      throw UsageError(who() + ": argument " + std::to_string(i + 1) + " is " + shape_text(shape.rows, shape.cols) +
                       ", the cell declares " + shape_text(inputs_[i].first, inputs_[i].second));
  }
  auto deliver = [&](size_t count, auto&& output) {
    if (vector) {
      vector->reserve(count);
      for (size_t k = 0; k < count; ++k) vector->push_back(output(k));
      return;
    }
    if (span.size() != count)
      throw UsageError(who() + " returns " + std::to_string(count) + " outputs, but room for " +
                       std::to_string(span.size()) + " was given");
    for (size_t k = 0; k < count; ++k) span[k] = output(k);
  };
  if (!s.engine->driver.options().cells) {
    if (s.inline_body)  // as record_body refuses it with cells on
      throw UsageError("edb::Cell: cell '" + *s.inline_body + "': the body calls another cell; cells do not nest yet");
    const std::vector<Expr> outputs = record_inline(name_, body_, trace, s, arguments, argument_ids);
    return deliver(outputs.size(), [&](size_t k) { return outputs[k]; });
  }

  // The engine's record of this cell; the last one found is kept, as calls of one cell come in runs.
  detail::EngineState& engine = *s.engine;
  if (engine.last_cell_id != id_ || !engine.last_cell) {
    auto it = engine.cells.find(id_);
    if (it == engine.cells.end()) {
      TraceState* state = TraceState::acquire(s.engine);
      Trace scope(state);  // returns the state to the pool when the body is recorded
      state->cell_scope = name_;
      CellRecord* record = record_body(engine, *this, inputs_, body_, scope, state);
      // Cells declared again and again (one per batch) each add an id: the map of ids stays
      // bounded, as a forgotten id finds its record again by its body's structure.
      if (engine.cells.size() >= detail::EngineState::kMaxCellIds) engine.cells.clear();
      it = engine.cells.emplace(id_, record).first;
    }
    engine.last_cell_id = id_;
    engine.last_cell = it->second;
  }
  CellRecord& cell = *engine.last_cell;
  if (!vector && span.size() != cell.outputs.size()) deliver(cell.outputs.size(), [](size_t) { return Expr(); });
  for (const auto& [table, entry] : cell.lookups) {  // the body's lookups, made arguments
    ir::Attributes attrs;
    attrs.parameter = s.table_index(table);
    attrs.index = entry;
    argument_ids.push_back(s.add(ir::Op::lookup, {}, ir::Shape{table.shape.rows, 1}, attrs).node_id());
  }
  output_ids.clear();
  const ir::TypeId type = call_type(engine, cell, s.data.graph, argument_ids);
  record_call_node(s, cell, type, argument_ids, output_ids);
  deliver(output_ids.size(), [&](size_t k) { return s.make(output_ids[k]); });
}

}  // namespace edb
