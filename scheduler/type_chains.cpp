// The chain pass, ranks or heights, with 16-bit counters when no chain can exceed them and a lane
// per type that can form a chain.
#include "scheduler/type_chains.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "edbatch/errors.h"

namespace edb::scheduler {

// Ranks visit the nodes first to last and read their arguments' rows; heights last to first and
// read their users'. A row holds a count per lane (chain_lanes), `kWidth` lanes (or width_ when 0);
// a node gets one only when some node reads it and a lane's type lies at or before it (on the way
// it is read), so the outputs and losses of a heights pass and the inputs of a ranks pass carry none.
// A row is freed once every node that reads it has, or taken over by its last reader.
template <bool kHeights, typename Count, size_t kWidth>
void TypeChains::fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                      std::span<const uint32_t> weights, std::vector<Count>& rows) {
  const size_t width = kWidth ? kWidth : width_;
  const size_t n = input.graph.size() - input.begin;
  const ir::NodeId begin = input.begin;
  row_of_.resize(n);
  unread_.resize(n);
  free_rows_.clear();
  rows.clear();
  // Heights, for terminal types: per type, whether one of its nodes has or reads a row, so meets a
  // lane's type on a path from it (a node that keeps no row meets none). That is a type that is not
  // single-rank unless some lane's type is single-rank; then (exact_met_) which lanes, by the OR of
  // its nodes' rows and of what those without one read.
  std::vector<Count>& met = [&]() -> std::vector<Count>& {
    if constexpr (std::is_same_v<Count, uint16_t>) return met16_;
    else return met32_;
  }();
  const bool exact_met = exact_met_;
  uint8_t* __restrict meets_row = nullptr;
  if constexpr (kHeights) {
    meets_row_.assign(types.count(), 0);
    meets_row = meets_row_.data();
    if (exact_met) met.assign(types.count() * width, 0);
  }
  // Raw pointers: stores through the vectors' data would make the compiler reload the others.
  uint32_t* __restrict out_at = (kHeights ? height : rank).data();
  uint32_t* __restrict remaining_at = remaining.data();
  uint32_t* __restrict longest_at = longest.data();
  uint32_t* __restrict row_of = row_of_.data();
  uint32_t* __restrict unread = unread_.data();
  const uint32_t* __restrict type_of = types.of_node.data();
  const uint32_t* __restrict lane_of = lane_of_.data();
  const uint8_t* __restrict unbatchable_type = dependencies.unbatchable.data();
  const uint32_t* __restrict sources = kHeights ? nullptr : dependencies.arguments.data();
  const ir::NodeId* __restrict users = dependencies.users.data();
  const uint32_t* __restrict sources_begin = (kHeights ? dependencies.users_begin : dependencies.arguments_begin).data();
  const uint32_t* __restrict readers_begin = (kHeights ? dependencies.arguments_begin : dependencies.users_begin).data();
  auto new_row = [&] {
    if (!free_rows_.empty()) {
      const uint32_t index = free_rows_.back();
      free_rows_.pop_back();
      return index;
    }
    const auto index = static_cast<uint32_t>(rows.size() / width);
    rows.resize(rows.size() + width);
    return index;
  };
  for (size_t step = 0; step < n; ++step) {
    const size_t i = kHeights ? n - 1 - step : step;
    const uint32_t t = type_of[i];
    if (t == LocalTypes::kNone) continue;  // a leaf: no chain passes through it
    const uint32_t lane = lane_of[t];
    const uint32_t readers = readers_begin[i + 1] - readers_begin[i];
    uint32_t row_index = kNoRow, below = 0, after = 0;
    bool read_row = false;
    for (uint32_t k = sources_begin[i]; k < sources_begin[i + 1]; ++k) {
      const uint32_t source = kHeights ? users[k] - begin : sources[k];
      if constexpr (kHeights) after = std::max(after, remaining_at[source]);
      const uint32_t from_index = row_of[source];
      if (from_index == kNoRow) continue;
      read_row = true;
      if (readers == 0) {  // nobody reads this node's row: only its own lane counts
        const Count* __restrict from = rows.data() + size_t(from_index) * width;
        if (lane != kNoLane) below = std::max<uint32_t>(below, from[lane]);
        if constexpr (kHeights) {
          if (exact_met) {
            Count* __restrict type_met = met.data() + size_t(t) * width;
            for (size_t w = 0; w < width; ++w) type_met[w] |= from[w];
          }
        }
      } else if (row_index == kNoRow) {
        if (unread[source] == 1) {  // the last reader takes the row over
          row_index = from_index;
          unread[source] = 0;
          continue;
        }
        row_index = new_row();
        const Count* from = rows.data() + size_t(from_index) * width;
        std::copy(from, from + width, rows.data() + size_t(row_index) * width);
      } else {
        Count* __restrict row = rows.data() + size_t(row_index) * width;
        const Count* __restrict from = rows.data() + size_t(from_index) * width;
        for (size_t w = 0; w < width; ++w) row[w] = row[w] > from[w] ? row[w] : from[w];
      }
      if (--unread[source] == 0) free_rows_.push_back(from_index);
    }
    // A lane of its own (a chain type's, or in heights an unbatchable type's) needs a row.
    if (readers > 0 && lane != kNoLane && row_index == kNoRow) {
      row_index = new_row();
      std::fill(rows.data() + size_t(row_index) * width, rows.data() + size_t(row_index + 1) * width, Count{0});
    }
    Count* row = row_index == kNoRow ? nullptr : rows.data() + size_t(row_index) * width;
    const bool alone = unbatchable_type[t] != 0;
    if constexpr (kHeights) remaining_at[i] = after + (alone ? 1 : weights[t]);
    if (alone) {
      ++unbatchable;
      if (row && lane != kNoLane && row[lane] == 0) row[lane] = 1;  // met, never counted
    } else if (lane != kNoLane) {
      const uint32_t count = (row ? uint32_t(row[lane]) : below) + 1;
      if (row) row[lane] = Count(count);
      out_at[i] = count;
      longest_at[t] = std::max(longest_at[t], count);
    } else {  // no path leads from a node of t to another
      out_at[i] = 1;
      longest_at[t] = 1;
    }
    if constexpr (kHeights) {
      if (read_row || row) meets_row[t] = 1;
      if (exact_met && row) {
        Count* __restrict type_met = met.data() + size_t(t) * width;
        for (size_t w = 0; w < width; ++w) type_met[w] |= row[w];
      }
    }
    row_of[i] = row_index;
    if (row) unread[i] = readers;
  }
  if constexpr (kHeights) {
    // A type is terminal when it is single-rank and so is every type met on a path from its nodes
    // (an unbatchable type, longest 0, never is; a type without a lane is single-rank). Its own
    // lane is met too, but only a type that is not single-rank has one set by its own nodes.
    not_single_lanes_.clear();
    bool single_lane = false;
    for (size_t u = 0; u < types.count(); ++u) {
      if (lane_of_[u] == kNoLane) continue;
      if (longest[u] != 1) not_single_lanes_.push_back(lane_of_[u]);
      else single_lane = true;
    }
    if (single_lane && !exact_met) {
      needs_exact_met_ = true;  // build() runs the pass again with the lanes met
      return;
    }
    terminal.assign(types.count(), 0);
    for (size_t u = 0; u < types.count(); ++u) {
      bool only_single = longest[u] == 1;
      if (!exact_met) only_single = only_single && !meets_row[u];
      for (size_t k = 0; k < not_single_lanes_.size() && only_single && exact_met; ++k)
        only_single = met[u * width + not_single_lanes_[k]] == 0;
      terminal[u] = only_single;
    }
  }
}

void TypeChains::chain_lanes(const LocalTypes& types, const Dependencies& dependencies, bool with_unbatchable) {
  // The types on a cycle of the type graph: its transitive closure (Warshall's, a word at a time).
  const size_t count = types.count(), words = dependencies.type_words();
  reach_.assign(dependencies.type_users.begin(), dependencies.type_users.end());
  for (size_t k = 0; k < count; ++k) {
    const uint64_t* through = reach_.data() + k * words;
    for (size_t t = 0; t < count; ++t) {
      uint64_t* from = reach_.data() + t * words;
      if (from[k / 64] >> (k % 64) & 1)
        for (size_t w = 0; w < words; ++w) from[w] |= through[w];
    }
  }
  lane_of_.assign(count, kNoLane);
  lanes_ = 0;
  for (size_t t = 0; t < count; ++t)
    if ((reach_[t * words + t / 64] >> (t % 64) & 1) || (with_unbatchable && dependencies.unbatchable[t]))
      lane_of_[t] = lanes_++;
}

void TypeChains::build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                       ChainDirection chain_direction, std::span<const uint32_t> weights) {
  const size_t n = input.graph.size() - input.begin;
  direction = chain_direction;
  const bool heights = direction == ChainDirection::heights;
  if (heights && weights.size() != types.count())
    throw InternalError("TypeChains: heights need a weight per type (expanded_type_weights)");
  if (dependencies.type_users.size() != types.count() * dependencies.type_words())
    throw InternalError("TypeChains: Dependencies built for other types");
  (heights ? height : rank).assign(n, 0);
  (heights ? rank : height).clear();
  if (heights) remaining.assign(n, 0);
  else remaining.clear(), terminal.clear();
  longest.assign(types.count(), 0);
  unbatchable = 0;
  // Heights also give unbatchable types a lane: terminal types are told by what is met below.
  chain_lanes(types, dependencies, heights);
  // Rows of one 16-byte or 64-byte vector when the lanes fit (usually a few for dozens of types),
  // else padded to whole 64-byte vectors.
  auto run = [&]<typename Count>(std::vector<Count>& rows) {
    constexpr size_t kSmall = 16 / sizeof(Count), kLarge = 64 / sizeof(Count);
    if (lanes_ <= kSmall) {
      heights ? fill<true, Count, kSmall>(input, types, dependencies, weights, rows)
              : fill<false, Count, kSmall>(input, types, dependencies, weights, rows);
    } else if (lanes_ <= kLarge) {
      heights ? fill<true, Count, kLarge>(input, types, dependencies, weights, rows)
              : fill<false, Count, kLarge>(input, types, dependencies, weights, rows);
    } else {
      width_ = (lanes_ + kLarge - 1) / kLarge * kLarge;
      heights ? fill<true, Count, 0>(input, types, dependencies, weights, rows)
              : fill<false, Count, 0>(input, types, dependencies, weights, rows);
    }
  };
  exact_met_ = needs_exact_met_ = false;
  if (n < std::numeric_limits<uint16_t>::max()) run(rows16_);
  else run(rows32_);
  if (needs_exact_met_) {  // a lane's type is single-rank (on a cycle of types, not of nodes): rare
    exact_met_ = true;
    longest.assign(types.count(), 0);
    unbatchable = 0;
    if (n < std::numeric_limits<uint16_t>::max()) run(rows16_);
    else run(rows32_);
    exact_met_ = false;
  }
}

int64_t TypeChains::lower_bound() const {
  int64_t bound = unbatchable;
  for (uint32_t l : longest) bound += l;
  return bound;
}

}  // namespace edb::scheduler
