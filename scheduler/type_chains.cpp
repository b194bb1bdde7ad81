// The chain pass, ranks or heights, with 16-bit counters when no chain can exceed them and a lane
// per type that can form a chain.
#include "scheduler/type_chains.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "edbatch/errors.h"

namespace edb::scheduler {

namespace {

// A row of the chain pass in one 16-byte vector register, per count width.
template <typename Count>
struct VectorOf;
template <>
struct VectorOf<uint16_t> {
  using type = uint16_t __attribute__((vector_size(16)));
};
template <>
struct VectorOf<uint32_t> {
  using type = uint32_t __attribute__((vector_size(16)));
};

}  // namespace

template <typename Count>
void TypeChains::find_terminal(const LocalTypes& types, const std::vector<Count>& met, size_t width, bool exact_met) {
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
    if (!exact_met) only_single = only_single && !meets_row_[u];
    for (size_t k = 0; k < not_single_lanes_.size() && only_single && exact_met; ++k)
      only_single = met[u * width + not_single_lanes_[k]] == 0;
    terminal[u] = only_single;
  }
}

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
    if (t == LocalTypes::kNone) {  // a leaf: no chain passes through it
      out_at[i] = 0;
      if constexpr (kHeights) remaining_at[i] = 0;
      continue;
    }
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
      out_at[i] = 0;
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
  if constexpr (kHeights) find_terminal(types, met, width, exact_met);
}

// The same pass when a row is one 16-byte vector (up to 8 lanes, the usual case): a row per node,
// none shared, so no row is allocated, taken over or freed; a node's row is the max of its
// sources' (zero when it has none) with its own lane counted, in one vector register (a lane's
// count is read back from the stored row: writing one lane of a register through memory stalls the
// wide loads after it). Heights also OR each node's row into its type's, which gives the lanes met
// below each type exactly, so terminal types need no flag per node and no second pass.
template <bool kHeights, typename Count, size_t kWidth>
void TypeChains::fill_dense(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
                            std::span<const uint32_t> weights, std::vector<Count>& rows) {
  static_assert(kWidth * sizeof(Count) == 16);
  using Row = typename VectorOf<Count>::type;
  const auto load = [](const Count* at) {
    Row row;
    std::memcpy(&row, at, sizeof(Row));
    return row;
  };
  const auto max = [](Row a, Row b) { return a > b ? a : b; };
  const size_t n = input.graph.size() - input.begin;
  const ir::NodeId begin = input.begin;
  if (rows.size() < n * kWidth) rows.resize(n * kWidth);
  // Each lane's index: `lane_index == lane` is all ones in that lane only, so counting a node in
  // its lane is one subtraction.
  Row lane_index;
  for (size_t w = 0; w < kWidth; ++w) lane_index[w] = Count(w);
  std::vector<Count>& met = [&]() -> std::vector<Count>& {
    if constexpr (std::is_same_v<Count, uint16_t>) return met16_;
    else return met32_;
  }();
  // Heights: per type, the OR of its nodes' rows: the lanes met on a path from its nodes, exactly
  // (so no second pass for terminal types).
  if constexpr (kHeights) met.assign(types.count() * kWidth, 0);
  Count* __restrict met_at = met.data();
  Count* __restrict row_at = rows.data();
  uint32_t* __restrict out_at = (kHeights ? height : rank).data();
  uint32_t* __restrict remaining_at = remaining.data();
  uint32_t* __restrict longest_at = longest.data();
  const uint32_t* __restrict type_of = types.of_node.data();
  const uint32_t* __restrict lane_of = lane_of_.data();
  const uint8_t* __restrict unbatchable_type = dependencies.unbatchable.data();
  const uint32_t* __restrict sources = kHeights ? nullptr : dependencies.arguments.data();
  const ir::NodeId* __restrict users = dependencies.users.data();
  const uint32_t* __restrict sources_begin = (kHeights ? dependencies.users_begin : dependencies.arguments_begin).data();
  int64_t alone_count = 0;
  for (size_t step = 0; step < n; ++step) {
    const size_t i = kHeights ? n - 1 - step : step;
    const uint32_t t = type_of[i];
    if (t == LocalTypes::kNone) {  // a leaf: no scheduled node reads its row
      out_at[i] = 0;
      if constexpr (kHeights) remaining_at[i] = 0;
      continue;
    }
    Row row = {};
    uint32_t after = 0;
    for (uint32_t k = sources_begin[i]; k < sources_begin[i + 1]; ++k) {
      const uint32_t source = kHeights ? users[k] - begin : sources[k];
      if constexpr (kHeights) after = std::max(after, remaining_at[source]);
      row = max(row, load(row_at + size_t(source) * kWidth));
    }
    const uint32_t lane = lane_of[t];
    const bool alone = unbatchable_type[t] != 0;
    if constexpr (kHeights) remaining_at[i] = after + (alone ? 1 : weights[t]);
    Count* __restrict own = row_at + i * kWidth;
    if (lane == kNoLane) {
      std::memcpy(own, &row, sizeof(Row));
      out_at[i] = !alone;
      if (!alone) longest_at[t] = 1;  // no path leads from a node of t to another
    } else if (alone) {
      row = max(row, Row(lane_index == Count(lane)) & 1);  // met, never counted
      std::memcpy(own, &row, sizeof(Row));
      out_at[i] = 0;
    } else {
      row -= Row(lane_index == Count(lane));
      std::memcpy(own, &row, sizeof(Row));
      const uint32_t count = own[lane];
      out_at[i] = count;
      longest_at[t] = std::max(longest_at[t], count);
    }
    alone_count += alone;
    // Only a single-rank type can be terminal: skip the types already seen to chain.
    if constexpr (kHeights) {
      if (longest_at[t] == 1) {
        const Row type_met = load(met_at + size_t(t) * kWidth) | row;
        std::memcpy(met_at + size_t(t) * kWidth, &type_met, sizeof(Row));
      }
    }
  }
  unbatchable += alone_count;
  if constexpr (kHeights) find_terminal(types, met, kWidth, true);
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
  // Every node's entry is written by the pass (0 for leaves and unbatchable nodes): no zeroing first,
  // which would write both arrays once more (cold, in an engine, where other work runs between
  // two schedules).
  (heights ? height : rank).resize(n);
  (heights ? rank : height).clear();
  if (heights) remaining.resize(n);
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
      heights ? fill_dense<true, Count, kSmall>(input, types, dependencies, weights, rows)
              : fill_dense<false, Count, kSmall>(input, types, dependencies, weights, rows);
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
