// The batch-order planner and the plan checker.
#include "memplan/plan.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::memplan {

namespace {

// A slice of a planned column vector can alias its argument's rows.
bool can_view(const ir::Graph& graph, const Plan& plan, ir::NodeId id) {
  const ir::Node& n = graph.node(id);
  if (n.op != ir::Op::slice || n.shape.cols != 1) return false;
  return plan.offset[graph.args(n)[0]] >= 0;
}

}  // namespace

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
        const ir::Node& n = graph.node(id);
        plan.offset[id] = plan.offset[graph.args(n)[0]] + n.attrs.begin;
        plan.view[id] = 1;
      } else {
        plan.offset[id] = end;
        end += graph.node(id).shape.size();
      }
    }
  }
  plan.arena_floats = end;
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
    if (n.op != ir::Op::slice || plan.offset[source] < 0 ||
        plan.offset[id] != plan.offset[source] + n.attrs.begin)
      throw InternalError("memplan::verify: view %" + std::to_string(id) + " is not rows [" +
                          std::to_string(n.attrs.begin) + ", " + std::to_string(n.attrs.end) +
                          ") of its argument %" + std::to_string(source));
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
