// The batch-order planner and the plan checker.
#include "memplan/plan.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::memplan {

void plan_batch_order(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan) {
  plan.offset.resize(graph.size(), -1);
  int64_t end = plan.arena_floats;
  for (ir::NodeId id : schedule.nodes) {
    plan.offset[id] = end;
    end += graph.node(id).shape.size();
  }
  plan.arena_floats = end;
}

void verify(const ir::Graph& graph, const Plan& plan) {
  std::vector<std::pair<int64_t, ir::NodeId>> spans;
  for (ir::NodeId id = 0; id < plan.offset.size(); ++id)
    if (plan.offset[id] >= 0) spans.emplace_back(plan.offset[id], id);
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
