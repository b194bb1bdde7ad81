// The batch-order planner and the plan checker.
#include "memplan/plan.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::memplan {

namespace {

// A view of a planned node.
bool can_view(const ir::Graph& graph, const Plan& plan, ir::NodeId id) {
  const ir::Node& n = graph.node(id);
  return viewable(n) && plan.offset[graph.args(n)[0]] >= 0;
}

}  // namespace

int64_t frame_row(const ir::Graph& graph, const Plan& plan, ir::NodeId call, int64_t at) {
  const ir::CellBody& cell = graph.cell(graph.node(call).attrs.index);
  if (cell.frame_blocks.empty()) return plan.offset[call] + at;
  const Plan::Frames& f = plan.frames[call];
  return f.first + cell.locate(at, (plan.offset[call] - f.first) / cell.frame_floats, f.calls);
}

int64_t view_at(const ir::Graph& graph, const Plan& plan, ir::NodeId id) {
  const ir::Node& n = graph.node(id);
  const ir::NodeId source = graph.args(n)[0];
  if (n.op == ir::Op::slice && graph.node(source).op == ir::Op::call) return frame_row(graph, plan, source, n.attrs.begin);
  return plan.offset[source] + view_offset(n);
}

void place_call_frames(const ir::Graph& graph, std::span<const ir::NodeId> calls, Plan& plan) {
  if (graph.cell(graph.node(calls[0]).attrs.index).frame_blocks.empty()) return;
  int64_t first = plan.offset[calls[0]];
  for (ir::NodeId call : calls) first = std::min(first, plan.offset[call]);
  if (plan.frames.size() < graph.size()) plan.frames.resize(graph.size());
  for (ir::NodeId call : calls) plan.frames[call] = {first, int64_t(calls.size())};
}

void plan_batch_order(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan) {
  plan.offset.resize(graph.size(), -1);
  plan.view.resize(graph.size(), 0);
  int64_t end = plan.arena_floats;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto members = schedule.batch(b);
    const bool views = std::all_of(members.begin(), members.end(),
                                   [&](ir::NodeId id) { return can_view(graph, plan, id); });
    for (ir::NodeId id : members) {
      if (views) {
        plan.offset[id] = view_at(graph, plan, id);
        plan.view[id] = 1;
      } else {
        plan.offset[id] = end;
        end += graph.node(id).shape.size();
      }
    }
    if (!views && graph.node(members[0]).op == ir::Op::call) place_call_frames(graph, members, plan);
  }
  plan.arena_floats = end;
  place_call_outputs(graph, schedule, plan);
}

void place_call_outputs(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan) {
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    if (graph.node(schedule.batch(b)[0]).op != ir::Op::call || ir::is_call_batch(graph.node(schedule.batch(b)[0]))) continue;
    for (ir::NodeId call : schedule.batch(b))
      for (ir::NodeId v = call + 1; v <= call + graph.cell(graph.node(call).attrs.index).output_views; ++v) {
        // Its outputs' slices, then reshapes of those (a matrix output).
        plan.offset[v] = view_at(graph, plan, v);
        plan.view[v] = 1;
      }
  }
  // Placed again each time, as a call's views are (a planner may move the batch call); a reshape
  // comes after the slice it reshapes. Views recorded before this schedule's first node read
  // batch calls an earlier evaluation placed for good: a trace that evaluates many times does not
  // go over them again.
  if (plan.batch_views.empty()) return;  // no batch call recorded (inference, other executors)
  ir::NodeId first = ir::NodeId(graph.size());
  for (ir::NodeId id : schedule.nodes) first = std::min(first, id);
  const auto from = std::lower_bound(plan.batch_views.begin(), plan.batch_views.end(), first);
  for (auto it = from; it != plan.batch_views.end(); ++it)
    if (const ir::NodeId v = *it; v < plan.offset.size() && plan.offset[graph.args(v)[0]] >= 0) {
      plan.offset[v] = view_at(graph, plan, v);
      plan.view[v] = 1;
    }
}

void verify(const ir::Graph& graph, const Plan& plan) {
  std::vector<std::pair<int64_t, ir::NodeId>> spans;
  for (ir::NodeId id = 0; id < plan.offset.size(); ++id) {
    if (plan.offset[id] < 0) continue;
    if (!plan.is_view(id)) {
      spans.emplace_back(plan.offset[id], id);
      continue;
    }
    const ir::Node& n = graph.node(id);
    const ir::NodeId source = graph.args(n)[0];
    if (!viewable(n) || plan.offset[source] < 0 ||
        plan.offset[id] != view_at(graph, plan, id))
      throw InternalError("memplan::verify: view %" + std::to_string(id) + " (" + std::string(ir::op_name(n.op)) +
                          ") does not start where its argument %" + std::to_string(source) + " says");
  }
  std::sort(spans.begin(), spans.end());
  int64_t previous_end = 0;
  ir::NodeId previous = ir::kNoNode;
  for (const auto& [offset, id] : spans) {
    const int64_t end = offset + graph.node(id).shape.size();
    if (end > plan.arena_floats)
      throw InternalError("memplan::verify: node %" + std::to_string(id) + " ends at " +
                          std::to_string(end) + ", past the arena of " +
                          std::to_string(plan.arena_floats) + " floats");
    if (offset < previous_end)
      throw InternalError("memplan::verify: nodes %" + std::to_string(previous) + " and %" +
                          std::to_string(id) + " overlap");
    previous_end = end;
    previous = id;
  }
}

}  // namespace edb::memplan
