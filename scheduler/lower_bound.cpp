// Longest same-type chains by one pass in topological order, a small row of counts per node.
#include "scheduler/lower_bound.h"

#include <algorithm>
#include <unordered_map>

namespace edb::scheduler {

int64_t lower_bound(const ScheduleInput& input) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  // Dense local type numbers, so the per-node rows stay as short as the number of types present.
  std::unordered_map<ir::TypeId, uint32_t> local;
  int64_t unbatchable = 0;
  for (ir::NodeId id = begin; id < graph.size(); ++id) {
    if (input.types[id] == ir::kNoType) continue;
    if (ir::has_flag(graph.node(id).op, ir::kUnbatchable)) ++unbatchable;
    else local.emplace(input.types[id], static_cast<uint32_t>(local.size()));
  }
  const size_t width = local.size();
  if (width == 0) return unbatchable;
  // chain[(id - begin) * width + t]: most type-t nodes on any path ending at id.
  std::vector<uint32_t> chain((graph.size() - begin) * width, 0);
  std::vector<uint32_t> longest(width, 0);
  for (ir::NodeId id = begin; id < graph.size(); ++id) {
    uint32_t* row = chain.data() + size_t(id - begin) * width;
    for (ir::NodeId arg : graph.args(id)) {
      if (arg < begin) continue;
      const uint32_t* from = chain.data() + size_t(arg - begin) * width;
      for (size_t t = 0; t < width; ++t) row[t] = std::max(row[t], from[t]);
    }
    const ir::TypeId type = input.types[id];
    if (type == ir::kNoType || ir::has_flag(graph.node(id).op, ir::kUnbatchable)) continue;
    const uint32_t t = local.at(type);
    longest[t] = std::max(longest[t], ++row[t]);
  }
  int64_t bound = unbatchable;
  for (uint32_t l : longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
