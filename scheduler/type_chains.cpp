// The chain-rank pass, with 16-bit counters when no chain can exceed them (halving the table).
#include "scheduler/type_chains.h"

#include <algorithm>
#include <limits>

namespace edb::scheduler {

template <typename Count>
void TypeChains::fill(const ScheduleInput& input, const LocalTypes& types, std::vector<Count>& table) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  // Rows padded to a whole vector register so the max loop runs without a remainder.
  constexpr size_t kLanes = 64 / sizeof(Count);
  const size_t width = (types.count() + kLanes - 1) / kLanes * kLanes;
  table.assign((graph.size() - begin) * width, 0);
  for (ir::NodeId id = begin; id < graph.size(); ++id) {
    Count* __restrict row = table.data() + size_t(id - begin) * width;
    for (ir::NodeId arg : graph.args(id)) {
      if (arg < begin) continue;
      const Count* __restrict from = table.data() + size_t(arg - begin) * width;
      for (size_t t = 0; t < width; ++t) row[t] = row[t] > from[t] ? row[t] : from[t];
    }
    const uint32_t t = types.of_node[id - begin];
    if (t == LocalTypes::kNone) continue;
    if (ir::has_flag(graph.node(id).op, ir::kUnbatchable)) {
      ++unbatchable;
      continue;
    }
    rank[id - begin] = ++row[t];
    longest[t] = std::max<uint32_t>(longest[t], row[t]);
  }
}

void TypeChains::build(const ScheduleInput& input, const LocalTypes& types) {
  const size_t n = input.graph.size() - input.begin;
  rank.assign(n, 0);
  longest.assign(types.count(), 0);
  unbatchable = 0;
  if (n < std::numeric_limits<uint16_t>::max()) fill(input, types, table16_);
  else fill(input, types, table32_);
}

int64_t TypeChains::lower_bound() const {
  int64_t bound = unbatchable;
  for (uint32_t l : longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
