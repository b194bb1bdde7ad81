// The chain pass, ranks or heights, with 16-bit counters when no chain can exceed them.
#include "scheduler/type_chains.h"

#include <algorithm>
#include <limits>

namespace edb::scheduler {

// Ranks visit the nodes first to last and read their arguments' rows; heights last to first and
// read their users'. A row is freed once every node that reads it has.
template <bool kHeights, typename Count>
void TypeChains::fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                      std::vector<Count>& rows) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  // Rows padded to a whole vector register so the max loop runs without a remainder.
  constexpr size_t kLanes = 64 / sizeof(Count);
  const size_t width = (types.count() + kLanes - 1) / kLanes * kLanes;
  const size_t n = graph.size() - begin;
  std::vector<uint32_t>& out = kHeights ? height : rank;
  row_of_.resize(n);
  unread_.resize(n);
  free_rows_.clear();
  rows.clear();
  for (size_t step = 0; step < n; ++step) {
    const size_t i = kHeights ? n - 1 - step : step;
    const uint32_t t = types.of_node[i];
    if (t == LocalTypes::kNone) continue;  // a leaf: no chain passes through it
    uint32_t row_index;
    if (free_rows_.empty()) {
      row_index = static_cast<uint32_t>(rows.size() / width);
      rows.resize(rows.size() + width);
    } else {
      row_index = free_rows_.back();
      free_rows_.pop_back();
    }
    Count* __restrict row = rows.data() + size_t(row_index) * width;
    std::fill(row, row + width, Count{0});
    auto read = [&](uint32_t other) {  // scheduled, in range
      const uint32_t from_index = row_of_[other];
      const Count* __restrict from = rows.data() + size_t(from_index) * width;
      for (size_t k = 0; k < width; ++k) row[k] = row[k] > from[k] ? row[k] : from[k];
      if (--unread_[other] == 0) free_rows_.push_back(from_index);
    };
    if constexpr (kHeights) {
      for (uint32_t u = dependencies.users_begin[i]; u < dependencies.users_begin[i + 1]; ++u)
        read(dependencies.users[u] - begin);
    } else {
      for (uint32_t a = dependencies.arguments_begin[i]; a < dependencies.arguments_begin[i + 1]; ++a)
        read(dependencies.arguments[a]);
    }
    if (ir::has_flag(graph.node(begin + static_cast<ir::NodeId>(i)).op, ir::kUnbatchable)) {
      ++unbatchable;
    } else {
      out[i] = ++row[t];
      longest[t] = std::max<uint32_t>(longest[t], row[t]);
    }
    row_of_[i] = row_index;
    unread_[i] = kHeights ? dependencies.arguments_begin[i + 1] - dependencies.arguments_begin[i]
                          : dependencies.user_count(i);
    if (unread_[i] == 0) free_rows_.push_back(row_index);
  }
}

void TypeChains::build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                       ChainDirection chain_direction) {
  const size_t n = input.graph.size() - input.begin;
  direction = chain_direction;
  const bool heights = direction == ChainDirection::heights;
  (heights ? height : rank).assign(n, 0);
  (heights ? rank : height).clear();
  longest.assign(types.count(), 0);
  unbatchable = 0;
  const bool narrow = n < std::numeric_limits<uint16_t>::max();
  if (heights && narrow) fill<true>(input, types, dependencies, rows16_);
  else if (heights) fill<true>(input, types, dependencies, rows32_);
  else if (narrow) fill<false>(input, types, dependencies, rows16_);
  else fill<false>(input, types, dependencies, rows32_);
}

int64_t TypeChains::lower_bound() const {
  int64_t bound = unbatchable;
  for (uint32_t l : longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
