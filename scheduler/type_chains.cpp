// The chain-rank pass, with 16-bit counters when no chain can exceed them (halving the table).
#include "scheduler/type_chains.h"

#include <algorithm>
#include <limits>

namespace edb::scheduler {

namespace {

template <typename Count>
void fill_chains(const ScheduleInput& input, const LocalTypes& types, TypeChains& out) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  const size_t width = types.count();
  std::vector<Count> table((graph.size() - begin) * width, 0);
  for (ir::NodeId id = begin; id < graph.size(); ++id) {
    Count* row = table.data() + size_t(id - begin) * width;
    for (ir::NodeId arg : graph.args(id)) {
      if (arg < begin) continue;
      const Count* from = table.data() + size_t(arg - begin) * width;
      for (size_t t = 0; t < width; ++t) row[t] = std::max(row[t], from[t]);
    }
    const uint32_t t = types.of_node[id - begin];
    if (t == LocalTypes::kNone) continue;
    if (ir::has_flag(graph.node(id).op, ir::kUnbatchable)) {
      ++out.unbatchable;
      continue;
    }
    out.rank[id - begin] = ++row[t];
    out.longest[t] = std::max<uint32_t>(out.longest[t], row[t]);
  }
}

}  // namespace

TypeChains type_chains(const ScheduleInput& input, const LocalTypes& types) {
  TypeChains chains;
  const size_t n = input.graph.size() - input.begin;
  chains.rank.assign(n, 0);
  chains.longest.assign(types.count(), 0);
  if (n < std::numeric_limits<uint16_t>::max()) fill_chains<uint16_t>(input, types, chains);
  else fill_chains<uint32_t>(input, types, chains);
  return chains;
}

}  // namespace edb::scheduler
