// The chain pass, ranks or heights, with 16-bit counters when no chain can exceed them.
#include "scheduler/type_chains.h"

#include <algorithm>
#include <limits>

#include "edbatch/errors.h"

namespace edb::scheduler {

// Ranks visit the nodes first to last and read their arguments' rows; heights last to first and
// read their users'. A row is freed once every node that reads it has.
template <bool kHeights, typename Count>
void TypeChains::fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                      std::span<const uint32_t> weights, std::vector<Count>& rows) {
  const ir::Graph& graph = input.graph;
  const ir::NodeId begin = input.begin;
  // Rows padded to a whole vector register so the max loop runs without a remainder.
  constexpr size_t kLanes = 64 / sizeof(Count);
  const size_t width = (types.count() + kLanes - 1) / kLanes * kLanes;
  const size_t n = graph.size() - begin;
  row_of_.resize(n);
  unread_.resize(n);
  free_rows_.clear();
  rows.clear();
  // Heights: beside each row, the set of types met on paths from its node (for terminal types).
  const size_t words = (types.count() + 63) / 64;
  if constexpr (kHeights) met_by_type_.assign(types.count() * words, 0);
  // Raw pointers: stores through the vectors' data would make the compiler reload the others.
  uint32_t* __restrict out_at = (kHeights ? height : rank).data();
  uint32_t* __restrict remaining_at = remaining.data();
  uint64_t* __restrict met_of_type = met_by_type_.data();
  uint32_t* __restrict longest_at = longest.data();
  const uint32_t* __restrict type_of = types.of_node.data();
  for (size_t step = 0; step < n; ++step) {
    const size_t i = kHeights ? n - 1 - step : step;
    const uint32_t t = type_of[i];
    if (t == LocalTypes::kNone) continue;  // a leaf: no chain passes through it
    uint32_t row_index;
    if (free_rows_.empty()) {
      row_index = static_cast<uint32_t>(rows.size() / width);
      rows.resize(rows.size() + width);
      if constexpr (kHeights) met_.resize(rows.size() / width * words);
    } else {
      row_index = free_rows_.back();
      free_rows_.pop_back();
    }
    Count* __restrict row = rows.data() + size_t(row_index) * width;
    std::fill(row, row + width, Count{0});
    uint64_t* __restrict met = kHeights ? met_.data() + size_t(row_index) * words : nullptr;
    // With one word of types (64 or fewer), the node's set is kept in a register and stored once.
    uint64_t met_word = 0;
    if constexpr (kHeights) {
      if (words != 1) std::fill(met, met + words, uint64_t{0});
    }
    auto read = [&](uint32_t other) {  // scheduled, in range
      const uint32_t from_index = row_of_[other];
      const Count* __restrict from = rows.data() + size_t(from_index) * width;
      for (size_t k = 0; k < width; ++k) row[k] = row[k] > from[k] ? row[k] : from[k];
      if constexpr (kHeights) {
        const uint64_t* from_met = met_.data() + size_t(from_index) * words;
        if (words == 1) met_word |= from_met[0];
        else for (size_t w = 0; w < words; ++w) met[w] |= from_met[w];
      }
      if (--unread_[other] == 0) free_rows_.push_back(from_index);
    };
    const bool unbatchable_node = ir::has_flag(graph.node(begin + static_cast<ir::NodeId>(i)).op, ir::kUnbatchable);
    if constexpr (kHeights) {
      uint32_t after = 0;
      for (uint32_t u = dependencies.users_begin[i]; u < dependencies.users_begin[i + 1]; ++u) {
        const uint32_t user = dependencies.users[u] - begin;
        read(user);
        after = std::max(after, remaining_at[user]);
      }
      remaining_at[i] = after + (unbatchable_node ? 1 : weights[t]);
    } else {
      for (uint32_t a = dependencies.arguments_begin[i]; a < dependencies.arguments_begin[i + 1]; ++a)
        read(dependencies.arguments[a]);
    }
    if (unbatchable_node) {
      ++unbatchable;
    } else {
      out_at[i] = ++row[t];
      longest_at[t] = std::max<uint32_t>(longest_at[t], row[t]);
    }
    if constexpr (kHeights) {
      if (words == 1) {
        met_word |= uint64_t{1} << t;
        met[0] = met_word;
        met_of_type[t] |= met_word;
      } else {
        met[t / 64] |= uint64_t{1} << (t % 64);
        for (size_t w = 0; w < words; ++w) met_of_type[size_t(t) * words + w] |= met[w];
      }
    }
    row_of_[i] = row_index;
    unread_[i] = kHeights ? dependencies.arguments_begin[i + 1] - dependencies.arguments_begin[i]
                          : dependencies.user_count(i);
    if (unread_[i] == 0) free_rows_.push_back(row_index);
  }
  if constexpr (kHeights) {
    // A type is terminal when it is single-rank and so is every type met on a path from its nodes
    // (an unbatchable type, longest 0, never is).
    // One AND per word of a type's set against the types that are not single-rank.
    not_single_.assign(words, 0);
    for (size_t u = 0; u < types.count(); ++u)
      if (longest[u] != 1) not_single_[u / 64] |= uint64_t{1} << (u % 64);
    terminal.assign(types.count(), 0);
    for (size_t t = 0; t < types.count(); ++t) {
      bool only_single = longest[t] == 1;
      for (size_t w = 0; w < words && only_single; ++w) only_single = (met_by_type_[t * words + w] & not_single_[w]) == 0;
      terminal[t] = only_single;
    }
  }
}

void TypeChains::build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                       ChainDirection chain_direction, std::span<const uint32_t> weights) {
  const size_t n = input.graph.size() - input.begin;
  direction = chain_direction;
  const bool heights = direction == ChainDirection::heights;
  if (heights && weights.size() != types.count())
    throw InternalError("TypeChains: heights need a weight per type (expanded_type_weights)");
  (heights ? height : rank).assign(n, 0);
  (heights ? rank : height).clear();
  if (heights) remaining.assign(n, 0);
  else remaining.clear(), terminal.clear();
  longest.assign(types.count(), 0);
  unbatchable = 0;
  const bool narrow = n < std::numeric_limits<uint16_t>::max();
  if (heights && narrow) fill<true>(input, types, dependencies, weights, rows16_);
  else if (heights) fill<true>(input, types, dependencies, weights, rows32_);
  else if (narrow) fill<false>(input, types, dependencies, weights, rows16_);
  else fill<false>(input, types, dependencies, weights, rows32_);
}

int64_t TypeChains::lower_bound() const {
  int64_t bound = unbatchable;
  for (uint32_t l : longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
