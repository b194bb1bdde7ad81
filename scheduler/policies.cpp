// depth, agenda and greedy over the shared Frontier.
#include "scheduler/policies.h"

#include <algorithm>

#include "edbatch/errors.h"
#include "scheduler/frontier.h"
#include "scheduler/type_chains.h"

namespace edb::scheduler {

namespace {

// Longest path from a leaf or evaluated node, counting scheduled nodes only (those are 0).
void node_depths(const ScheduleInput& input, const LocalTypes& types, std::vector<uint32_t>& depth) {
  const ir::Graph& graph = input.graph;
  depth.assign(graph.size() - input.begin, 0);
  for (ir::NodeId id = input.begin; id < graph.size(); ++id) {
    if (types.of_node[id - input.begin] == LocalTypes::kNone) continue;
    uint32_t d = 0;
    for_each_argument(input, id, [&](ir::NodeId arg) {
      if (arg >= input.begin) d = std::max(d, depth[arg - input.begin]);
    });
    depth[id - input.begin] = d + 1;
  }
}

}  // namespace

const Analysis& analysis_for(const ScheduleInput& input, Analysis& own, ChainDirection direction) {
  if (input.analysis && input.analysis->chains.direction == direction) return *input.analysis;
  own.build(input, direction);
  return own;
}

void DepthPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out.clear();
  const LocalTypes& types = analysis_for(input, own_).types;
  std::vector<uint32_t>& depth = depth_;
  node_depths(input, types, depth);
  // Counting sort by (depth, local type): every argument has a smaller depth, so batches of one
  // depth can run in any type order.
  const uint32_t max_depth = depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
  const size_t width = types.count();
  std::vector<uint32_t>& start = start_;
  start.assign((size_t(max_depth) + 1) * width + 1, 0);
  for (size_t i = 0; i < depth.size(); ++i)
    if (types.of_node[i] != LocalTypes::kNone) ++start[depth[i] * width + types.of_node[i] + 1];
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<ir::NodeId>& sorted = sorted_;
  sorted.resize(start.back());
  std::vector<uint32_t>& fill = fill_;
  fill.assign(start.begin(), start.end() - 1);
  for (size_t i = 0; i < depth.size(); ++i)
    if (types.of_node[i] != LocalTypes::kNone)
      sorted[fill[depth[i] * width + types.of_node[i]]++] = input.begin + static_cast<ir::NodeId>(i);
  for (size_t bucket = 0; bucket + 1 < start.size(); ++bucket) {
    if (start[bucket] == start[bucket + 1]) continue;
    const std::span<const ir::NodeId> members(sorted.data() + start[bucket], start[bucket + 1] - start[bucket]);
    const ir::TypeId type = types.global[bucket % width];
    if (ir::has_flag(input.graph.node(members[0]).op, ir::kUnbatchable)) {
      for (ir::NodeId id : members) out.add_batch(type, std::span(&id, 1));
    } else {
      out.add_batch(type, members);
    }
  }
}

void AgendaPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out.clear();
  const Analysis& analysis = analysis_for(input, own_);
  const LocalTypes& types = analysis.types;
  std::vector<uint32_t>& depth = depth_;
  node_depths(input, types, depth);
  Frontier& frontier = frontier_;
  frontier.reset(input, types, analysis.dependencies);
  std::vector<uint64_t>& depth_sum = depth_sum_;
  depth_sum.assign(types.count(), 0);
  auto on_ready = [&](ir::NodeId id, uint32_t t) { depth_sum[t] += depth[id - input.begin]; };
  frontier.seed(on_ready);
  while (!frontier.done()) {
    // Lowest average depth: compare sum_a / n_a < sum_b / n_b without division.
    uint32_t best = LocalTypes::kNone;
    for (uint32_t t : frontier.ready_types()) {
      if (best == LocalTypes::kNone) {
        best = t;
        continue;
      }
      const uint64_t lhs = depth_sum[t] * frontier.ready(best).size();
      const uint64_t rhs = depth_sum[best] * frontier.ready(t).size();
      if (lhs < rhs || (lhs == rhs && t < best)) best = t;
    }
    if (best == LocalTypes::kNone) throw InternalError("agenda policy: nothing ready but nodes remain (cycle?)");
    depth_sum[best] = 0;  // every ready node of the type runs now
    frontier.run(best, out, on_ready);
  }
  // Unbatchable types run one node at a time; their remaining ready nodes keep their depths.
}

void GreedyPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out.clear();
  frontier_.reset(input, analysis_for(input, own_));
  while (!frontier_.done()) frontier_.run(frontier_.greedy_choice(), out);
}

}  // namespace edb::scheduler
