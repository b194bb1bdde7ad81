// Chain heights by a reverse pass, and the height buckets kept current as nodes become ready and run.
#include "scheduler/tight.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::scheduler {

namespace {

double power4(uint32_t r) {
  const double squared = double(r) * double(r);
  return squared * squared;
}

}  // namespace

void ChainHeights::build(const ScheduleInput& input, const Analysis& analysis, bool with_remaining) {
  if (analysis.chains.direction == ChainDirection::heights) {
    height = analysis.chains.height;
    remaining = with_remaining ? std::span<const uint32_t>(analysis.chains.remaining) : std::span<const uint32_t>();
    weight = analysis.weights;
    terminal = analysis.chains.terminal;
    return;
  }
  const LocalTypes& types = analysis.types;
  const Dependencies& d = analysis.dependencies;
  const size_t n = input.graph.size() - input.begin;
  // Only chain types (batchable, longest > 1) get a lane: a node of a single-rank type has height 1
  // (no node of its type below it), an unbatchable one 0. A node with no chain-type node below it
  // has no row (outputs, losses), nor does one that no scheduled argument reads (embeddings).
  constexpr uint32_t kNoLane = ~0u;
  constexpr uint8_t kTerminal = 1, kHasRow = 2;
  lane_of_.assign(types.count(), kNoLane);
  uint32_t lanes = 0;
  for (size_t t = 0; t < types.count(); ++t)
    if (analysis.chains.longest[t] > 1 && !d.unbatchable[t]) lane_of_[t] = lanes++;
  // One row per node, padded to whole vector registers so the max loop runs without a remainder:
  // no row is shared, so none is freed or counted.
  constexpr size_t kLanes = 16;
  const size_t width = std::max<size_t>((lanes + kLanes - 1) / kLanes * kLanes, kLanes);
  own_height_.resize(n);
  height = own_height_;
  own_remaining_.resize(with_remaining ? n : 0);
  remaining = own_remaining_;
  weight = analysis.weights;
  if (rows_.size() < n * width) rows_.resize(n * width);
  flags_.assign(n, kTerminal);
  terminal.assign(types.count(), 1);
  // A node is terminal when its type is single-rank and all its users are terminal (a loss, the
  // output layer feeding it); a type when all its nodes are.
  for (size_t i = n; i-- > 0;) {
    const uint32_t t = types.of_node[i];
    if (t == LocalTypes::kNone) {
      own_height_[i] = 0;
      if (with_remaining) own_remaining_[i] = 0;
      continue;
    }
    const uint32_t cost = d.unbatchable[t] ? 1 : weight[t];
    uint32_t after = 0;
    const uint32_t lane = lane_of_[t];
    uint8_t all_terminal = kTerminal;
    uint16_t* __restrict row = rows_.data() + i * width;
    if (d.pending[i] == 0) {
      uint32_t below = 0;
      for (uint32_t u = d.users_begin[i]; u < d.users_begin[i + 1]; ++u) {
        const size_t user = d.users[u] - input.begin;
        const uint8_t f = flags_[user];
        all_terminal &= f;
        if (with_remaining) after = std::max(after, own_remaining_[user]);
        if (lane != kNoLane && (f & kHasRow)) below = std::max<uint32_t>(below, rows_[user * width + lane]);
      }
      if (with_remaining) own_remaining_[i] = after + cost;
      if (analysis.chains.longest[t] != 1) all_terminal = 0;
      if (!all_terminal) terminal[t] = 0;
      if (below >= 0xffff) throw InternalError("ChainHeights: a same-type chain longer than 65534 nodes");
      own_height_[i] = lane != kNoLane ? below + 1 : d.unbatchable[t] ? 0 : 1;
      flags_[i] = all_terminal;
      continue;
    }
    bool has_row = false;
    for (uint32_t u = d.users_begin[i]; u < d.users_begin[i + 1]; ++u) {
      const size_t user = d.users[u] - input.begin;
      const uint8_t f = flags_[user];
      all_terminal &= f;
      if (with_remaining) after = std::max(after, own_remaining_[user]);
      if (!(f & kHasRow)) continue;
      const uint16_t* __restrict from = rows_.data() + user * width;
      if (!has_row) {
        std::copy(from, from + width, row);
        has_row = true;
      } else {
        for (size_t k = 0; k < width; ++k) row[k] = row[k] > from[k] ? row[k] : from[k];
      }
    }
    if (with_remaining) own_remaining_[i] = after + cost;
    if (analysis.chains.longest[t] != 1) all_terminal = 0;
    if (!all_terminal) terminal[t] = 0;
    if (lane != kNoLane) {
      if (!has_row) std::fill(row, row + width, uint16_t{0});
      has_row = true;
      if (row[lane] == 0xffff) throw InternalError("ChainHeights: a same-type chain longer than 65534 nodes");
      own_height_[i] = ++row[lane];
    } else {
      own_height_[i] = d.unbatchable[t] ? 0 : 1;
    }
    flags_[i] = uint8_t(all_terminal | (has_row ? kHasRow : 0));
  }
}

void TightFrontier::reset(const ScheduleInput& input, const Analysis& analysis, const ChainHeights& heights,
                          bool greedy, int remaining_power) {
  if (remaining_power != 1 && remaining_power != 4)
    throw InternalError("TightFrontier: remaining_power must be 1 or 4, got " + std::to_string(remaining_power));
  remaining_power_ = remaining_power;
  input_ = &input;
  analysis_ = &analysis;
  heights_ = &heights;
  const size_t width = analysis.types.count();
  const std::vector<uint32_t>& longest = analysis.chains.longest;
  base_.assign(width + 1, 0);
  for (size_t t = 0; t < width; ++t) base_[t + 1] = base_[t] + longest[t];
  unexecuted_at_.assign(base_[width], 0);
  ready_at_.assign(base_[width], 0);
  top_.assign(longest.begin(), longest.end());
  ready_remaining_.assign(width, 0);
  summed_.assign(width, 0);
  track_remaining_ = !heights.remaining.empty();
  cost_ = 0;
  unbatchable_left_ = analysis.chains.unbatchable;
  for (size_t i = 0; i < heights.height.size(); ++i)
    if (const uint32_t h = heights.height[i]; h > 0) ++unexecuted_at_[base_[analysis.types.of_node[i]] + h - 1];
  for (ir::NodeId id : analysis.dependencies.initially_ready) {
    const uint32_t t = analysis.types.of_node[id - input.begin];
    if (const uint32_t h = heights.height[id - input.begin]; h > 0) ++ready_at_[base_[t] + h - 1];
  }
  typewise_.reset(input, analysis, greedy);
}

double TightFrontier::ready_remaining(uint32_t t) const {
  if (!track_remaining_) return 0;
  const std::vector<ir::NodeId>& ready = typewise_.ready(t);
  const uint32_t* remaining = heights_->remaining.data();
  const ir::NodeId begin = input_->begin;
  double sum = ready_remaining_[t];
  if (remaining_power_ == 1) {
    for (size_t k = summed_[t]; k < ready.size(); ++k) sum += remaining[ready[k] - begin];
  } else {
    for (size_t k = summed_[t]; k < ready.size(); ++k) sum += power4(remaining[ready[k] - begin]);
  }
  ready_remaining_[t] = sum;
  summed_[t] = uint32_t(ready.size());
  return sum;
}

bool TightFrontier::tight(uint32_t t) const {
  if (unbatchable(t)) return true;
  return top_[t] > 0 && top_ready(t) == top_unexecuted(t);
}

uint32_t TightFrontier::any_tight() const {
  for (uint32_t t : ready_types())
    if (tight(t)) return t;
  return LocalTypes::kNone;
}

void TightFrontier::run(uint32_t t, Schedule& out) {
  const ir::NodeId begin = input_->begin;
  // Raw pointers: the counters' stores would otherwise make the compiler reload the vectors.
  const uint32_t* __restrict height = heights_->height.data();
  const uint32_t* __restrict base = base_.data();
  uint32_t* __restrict ready_at = ready_at_.data();
  const size_t before = out.nodes.size();
  const bool alone = unbatchable(t);
  typewise_.run(t, out, [&](ir::NodeId id, uint32_t type) {
    if (const uint32_t h = height[id - begin]; h > 0) ++ready_at[base[type] + h - 1];
  });
  if (alone) {  // one node, no chain height: the oldest ready one, summed first if any was
    cost_ += 1;
    --unbatchable_left_;
    if (summed_[t] > 0) {
      --summed_[t];
      const uint32_t r = heights_->remaining[out.nodes[before] - begin];
      ready_remaining_[t] -= remaining_power_ == 1 ? double(r) : power4(r);
    }
    return;
  }
  // A batchable type runs all its ready nodes: none of them is left to count.
  ready_remaining_[t] = 0;
  summed_[t] = 0;
  cost_ += weight(t);
  // Every node of the batch has type t and a height of at least 1.
  uint32_t* __restrict unexecuted = unexecuted_at_.data() + base[t];  // t's heights from 1 at [0]
  uint32_t* __restrict ready_of_t = ready_at + base[t];
  const ir::NodeId* nodes = out.nodes.data();
  for (size_t i = before, end = out.nodes.size(); i < end; ++i) {
    const uint32_t h = height[nodes[i] - begin];
    --unexecuted[h - 1];
    --ready_of_t[h - 1];
  }
  uint32_t& top = top_[t];
  while (top > 0 && unexecuted[top - 1] == 0) --top;
}

int64_t TightFrontier::remaining_bound() const {
  int64_t bound = unbatchable_left_;
  for (size_t t = 0; t < top_.size(); ++t) bound += int64_t(top_[t]) * heights_->weight[t];
  return bound;
}

uint32_t tight_first_choice(const TightFrontier& frontier) {
  if (const uint32_t t = frontier.any_tight(); t != LocalTypes::kNone) return t;
  return tight_first_among(frontier, frontier.ready_types());
}

uint32_t tight_first_among(const TightFrontier& frontier, std::span<const uint32_t> types) {
  bool only_terminal = true;
  for (uint32_t t : types) only_terminal = only_terminal && frontier.terminal(t);
  uint32_t best = LocalTypes::kNone;
  uint64_t best_ready = 0, best_top = 1;
  for (uint32_t t : types) {
    if (!only_terminal && frontier.terminal(t)) continue;
    const uint64_t r = frontier.top_ready(t), u = std::max<uint64_t>(frontier.top_unexecuted(t), 1);
    bool better = best == LocalTypes::kNone;
    if (!better) {
      const uint64_t lhs = r * best_top, rhs = best_ready * u;
      if (lhs != rhs) better = lhs > rhs;
      else if (frontier.weight(t) != frontier.weight(best)) better = frontier.weight(t) < frontier.weight(best);
      else if (frontier.ready_count(t) != frontier.ready_count(best)) better = frontier.ready_count(t) > frontier.ready_count(best);
      else better = t < best;
    }
    if (better) best = t, best_ready = r, best_top = u;
  }
  if (best == LocalTypes::kNone) throw InternalError("tight_first_choice: nothing ready but nodes remain (cycle?)");
  return best;
}

namespace {

// Of `types` that `keep`, the one with the most batches ahead per cost^power; terminal types only
// when all kept ones are; ties (at remaining power 1 equal scores are exact: sums of integers over
// small integers) to the lighter type, then the lower one. kNone when none is kept.
// With `tight_boost` above 1, a tight type's score counts that many times.
template <typename Keep>
uint32_t most_remaining(const TightFrontier& frontier, std::span<const uint32_t> types, int weight_power, Keep keep,
                        double tight_boost = 1) {
  bool any = false, only_terminal = true;
  for (uint32_t t : types)
    if (keep(t)) any = true, only_terminal = only_terminal && frontier.terminal(t);
  if (!any) return LocalTypes::kNone;
  uint32_t best = LocalTypes::kNone;
  double best_score = 0;
  for (uint32_t t : types) {
    if (!keep(t) || (!only_terminal && frontier.terminal(t))) continue;
    double cost = frontier.weight(t);
    if (weight_power == 2) cost *= cost;
    double score = double(frontier.ready_remaining(t)) / cost;
    if (tight_boost != 1 && frontier.tight(t)) score *= tight_boost;
    if (best == LocalTypes::kNone || score > best_score ||
        (score == best_score && (frontier.weight(t) < frontier.weight(best) ||
                                 (frontier.weight(t) == frontier.weight(best) && t < best))))
      best = t, best_score = score;
  }
  return best;
}

}  // namespace

uint32_t remaining_tight_choice(const TightFrontier& frontier, int weight_power) {
  return most_remaining(frontier, frontier.ready_types(), weight_power, [&](uint32_t t) { return frontier.tight(t); });
}

uint32_t remaining_choice(const TightFrontier& frontier, int weight_power) {
  if (const uint32_t t = remaining_tight_choice(frontier, weight_power); t != LocalTypes::kNone) return t;
  return remaining_among(frontier, frontier.ready_types(), weight_power);
}

uint32_t remaining_among(const TightFrontier& frontier, std::span<const uint32_t> types, int weight_power) {
  const uint32_t best = most_remaining(frontier, types, weight_power, [](uint32_t) { return true; });
  if (best == LocalTypes::kNone) throw InternalError("remaining_choice: nothing ready but nodes remain (cycle?)");
  return best;
}

uint32_t boosted_remaining_among(const TightFrontier& frontier, std::span<const uint32_t> types, int weight_power,
                                 double tight_boost) {
  bool tight_other = false, tight_terminal = false;
  for (uint32_t t : types)
    if (frontier.tight(t)) (frontier.terminal(t) ? tight_terminal : tight_other) = true;
  const uint32_t best =
      tight_terminal && !tight_other
          ? most_remaining(frontier, types, weight_power, [&](uint32_t t) { return frontier.tight(t); })
          : most_remaining(frontier, types, weight_power, [](uint32_t) { return true; }, tight_boost);
  if (best == LocalTypes::kNone) throw InternalError("boosted_remaining_among: nothing ready but nodes remain (cycle?)");
  return best;
}

}  // namespace edb::scheduler
