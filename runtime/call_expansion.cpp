// A batch of cell calls expanded over its body, run by any executor (runtime/call_expansion.h).
#include "runtime/call_expansion.h"

#include <cstring>

#include "edbatch/errors.h"
#include "memplan/plan.h"
#include "runtime/cell_kernels.h"

namespace edb::runtime {

// The body of one cell over `calls` calls: its leaves once (parameters and constants), each
// call's arguments as leaves of their own read where they lie (a parameter of the expansion's
// graph pointed at the argument's value before each run), and each batch of the body's schedule
// over every call, call by call.
struct CallExpansion::Expanded {
  ir::Graph graph;
  scheduler::Schedule schedule;
  memplan::Plan plan;
  std::vector<ir::NodeId> at;          // call c's node for body node id: at[c * body size + id]
  std::vector<uint32_t> argument_of;   // call c's argument i: parameter argument_of[c * arguments + i]
  // Call c's read r of its forward frame (CallCell::frame_reads): parameter frame_read_of[c * reads + r].
  std::vector<uint32_t> frame_read_of;
  bool in_place = false;  // the plan is the calls' frames, laid out batch by batch
};

CallExpansion::CallExpansion() : expanded_(kMaxExpansions) {}
CallExpansion::~CallExpansion() = default;

void CallExpansion::set_capacity(size_t entries) {
  expanded_.set_limits(std::clamp<size_t>(entries, 1, kMaxExpansions));
}

void CallExpansion::clear() { expanded_.clear(); }

CacheSize CallExpansion::sizes() const {
  CacheSize size = expanded_.sizes();
  size.bytes = int64_t(arena_.capacity() * sizeof(float));
  return size;
}

CallExpansion::Expanded& CallExpansion::expanded(const CallCell& cell, size_t calls, bool node_by_node) {
  const auto key = std::make_pair(&cell, node_by_node ? -int64_t(calls) : int64_t(calls));
  if (std::unique_ptr<Expanded>* found = expanded_.find(key)) return **found;
  // Full: the least recently used expansion goes (a workload of many batch sizes keeps the ones
  // it runs most, rather than all of them going at once).
  Expanded& e = **expanded_.insert(key, std::make_unique<Expanded>());
  const ir::Graph& body = cell.body;
  const size_t size = body.size();
  e.at.assign(calls * size, ir::kNoNode);
  for (const ir::ParameterInfo& info : body.parameters()) e.graph.add_parameter(info);
  std::vector<uint8_t> is_argument(size, 0);
  for (ir::NodeId p : cell.placeholders) is_argument[p] = 1;
  for (ir::NodeId id = 0; id < cell.first; ++id) {
    if (is_argument[id]) continue;
    const ir::Node& n = body.node(id);
    ir::Attributes attrs = n.attrs;
    if (n.op == ir::Op::input)
      attrs.index = e.graph.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
    const ir::NodeId leaf = e.graph.add(n.op, {}, n.shape, attrs);
    for (size_t c = 0; c < calls; ++c) e.at[c * size + id] = leaf;
  }
  // The arguments, and a backward body's reads of its forward call's frame (argument 0) by rows
  // (CallCell::frame_reads: a frame laid out batch by batch splits a call's rows): parameters of
  // the expansion's graph standing for call c's body node `id`, pointed where the values lie
  // before each run. Their uids are their own (above every model's, which count up from 1).
  uint64_t uid = uint64_t{1} << 63;
  auto stand_in = [&](size_t c, ir::NodeId id, std::string name) {
    ir::ParameterInfo info;
    info.uid = uid++;
    info.name = std::move(name);
    info.shape = body.node(id).shape;
    ir::Attributes attrs;
    attrs.parameter = e.graph.add_new_parameter(info);
    e.at[c * size + id] = e.graph.add(ir::Op::parameter, {}, info.shape, attrs);
    return attrs.parameter;
  };
  for (size_t c = 0; c < calls; ++c) {
    for (size_t i = 0; i < cell.placeholders.size(); ++i)
      e.argument_of.push_back(stand_in(c, cell.placeholders[i], "argument " + std::to_string(i + 1)));
    for (const CallCell::FrameRead& read : cell.frame_reads)
      e.frame_read_of.push_back(stand_in(c, cell.first + read.offset, "frame rows " + std::to_string(read.at)));
  }
  std::vector<ir::NodeId> members, args;
  for (size_t b = 0; b < cell.body_batches.size(); ++b) {
    members.clear();
    for (size_t c = 0; c < calls; ++c)
      for (uint32_t o : cell.body_batches[b]) {
        const ir::NodeId id = cell.first + o;
        if (e.at[c * size + id] != ir::kNoNode) continue;  // a frame read
        const ir::Node& n = body.node(id);
        args.clear();
        for (ir::NodeId arg : body.args(n)) args.push_back(e.at[c * size + arg]);
        e.at[c * size + id] = e.graph.add(n.op, args, n.shape, n.attrs);
        members.push_back(e.at[c * size + id]);
      }
    if (members.empty()) continue;  // frame reads only
    e.schedule.add_batch(cell.types[cell.first + cell.body_batches[b][0]], members);
  }
  // Planned batch by batch however it runs: a cell's frame is laid out as the body's batches (a
  // batch is views only when all its members can be, runtime/cell_lowering.cpp), and planning the
  // sequential policy's one-node batches instead made a view of a member its batch stores.
  e.plan.offset.assign(e.graph.size(), -1);
  e.plan.view.assign(e.graph.size(), 0);
  e.plan.arena_floats = 0;
  memplan::plan_batch_order(e.graph, e.schedule, e.plan);
  if (node_by_node) {  // then run node by node
    scheduler::Schedule whole = std::move(e.schedule);
    e.schedule = scheduler::Schedule{};
    for (size_t b = 0; b < whole.batch_count(); ++b)
      for (const ir::NodeId& member : whole.batch(b)) e.schedule.add_batch(whole.batch_type[b], std::span(&member, 1));
  }
  // A frame laid out batch by batch is this plan for the batch's calls (runtime/cell_lowering.h):
  // checked once per expansion, since running in place writes the frames through it.
  if (!cell.frame_blocks.empty()) {
    bool same = e.plan.arena_floats == int64_t(calls) * cell.frame_floats;
    for (size_t c = 0; c < calls && same; ++c)
      for (uint32_t o = 0; o < cell.frame_at.size() && same; ++o)
        same = cell.frame_at[o] < 0 || e.plan.offset[e.at[c * size + cell.first + o]] ==
                                            cell.locate(cell.frame_at[o], int64_t(c), int64_t(calls));
    if (!same)
      throw InternalError("CallExpansion: the frames of cell '" + cell.name + "' are not laid out as its expansion over " +
                          std::to_string(calls) + " calls");
    e.in_place = true;
  }
  return e;
}

void CallExpansion::run(Executor& executor, std::span<const ir::NodeId> calls, const Values& values, Stats& stats,
                        bool node_by_node) {
  const ir::Graph& graph = values.graph;
  const auto& cell = static_cast<const CallCell&>(graph.cell(graph.node(calls[0]).attrs.index));
  if (ir::is_call_batch(graph.node(calls[0])))  // recorded only where the executor compiles the cell
    throw InternalError("CallExpansion: call %" + std::to_string(calls[0]) + " is a batch of calls of " + cell.name +
                        ", which only a compiled cell runs");
  if (cell.operations == 0) return;
  Expanded& e = expanded(cell, calls.size(), node_by_node);
  // In place where the calls are a whole batch of frames laid out batch by batch (the plan put
  // them so): the expansion's plan is their frames. Otherwise (the reference executor runs calls
  // one by one) in an arena of its own, each value copied to its rows of the frame after.
  const memplan::Plan::Frames* whole =
      e.in_place && cell.frame_floats > 0 && values.plan.frames[calls[0]].calls == int64_t(calls.size()) ? &values.plan.frames[calls[0]] : nullptr;
  if (!whole && arena_.size() < size_t(e.plan.arena_floats)) arena_.resize(size_t(e.plan.arena_floats));
  const Values inner{e.graph, e.plan, whole ? values.arena + whole->first : arena_.data()};
  const size_t size = cell.body.size();
  const size_t arguments = cell.placeholders.size();
  const size_t reads = cell.frame_reads.size();
  for (size_t k = 0; k < calls.size(); ++k) {
    const ir::NodeId call = calls[k];
    const auto args = graph.args(call);
    if (graph.cell(graph.node(call).attrs.index).key != cell.key)
      throw InternalError("CallExpansion: a batch holds calls of two cells");
    const size_t c = whole ? size_t((values.plan.offset[call] - whole->first) / cell.frame_floats) : k;
    if (whole && (c >= calls.size() || values.plan.frames[call].first != whole->first))
      throw InternalError("CallExpansion: a batch's calls are not one batch's frames");
    for (size_t i = 0; i < arguments; ++i) e.graph.set_parameter_data(e.argument_of[c * arguments + i], values.in(args[i]));
    for (size_t r = 0; r < reads; ++r)
      e.graph.set_parameter_data(e.frame_read_of[c * reads + r], values.frame(args[0], cell.frame_reads[r].at));
  }
  executor.execute(e.schedule, inner, stats);
  if (whole) return;
  for (size_t c = 0; c < calls.size(); ++c)
    for (size_t o = 0; o < cell.frame_at.size(); ++o) {
      const ir::NodeId node = e.at[c * size + cell.first + o];
      // A view the frame keeps is copied too: a lowered cell's frame may keep it apart from its
      // source (a reshape the program stores in a slot of its own).
      if (cell.frame_at[o] < 0) continue;
      std::memcpy(values.frame(calls[c], cell.frame_at[o]), inner.in(node),
                  size_t(e.graph.node(node).shape.size()) * sizeof(float));
    }
}

}  // namespace edb::runtime
