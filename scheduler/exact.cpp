// Branch and bound over "which type runs next", on a compact copy of the range.
#include "scheduler/exact.h"

#include <algorithm>
#include <unordered_map>

#include "scheduler/policies.h"

namespace edb::scheduler {

namespace {

using Bits = std::vector<uint64_t>;

struct BitsHash {
  size_t operator()(const Bits& bits) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint64_t w : bits) {
      h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    return static_cast<size_t>(h);
  }
};

class Search {
 public:
  Search(const ScheduleInput& input, const Analysis& analysis, const ExactSearch& options)
      : options_(options), start_(std::chrono::steady_clock::now()) {
    const size_t range = input.graph.size() - input.begin;
    std::vector<int32_t> compact(range, -1);
    for (size_t i = 0; i < range; ++i) {
      const uint32_t t = analysis.types.of_node[i];
      if (t == LocalTypes::kNone) continue;
      compact[i] = int32_t(node_.size());
      node_.push_back(ir::NodeId(input.begin + i));
      type_.push_back(t);
    }
    types_ = analysis.types.count();
    global_ = analysis.types.global;
    unbatchable_ = analysis.dependencies.unbatchable;
    preds_.resize(node_.size());
    users_.resize(node_.size());
    for (size_t k = 0; k < node_.size(); ++k)
      for (ir::NodeId arg : input.graph.args(node_[k]))
        if (arg >= input.begin && compact[arg - input.begin] >= 0) {
          preds_[k].push_back(uint32_t(compact[arg - input.begin]));
          users_[size_t(compact[arg - input.begin])].push_back(uint32_t(k));
        }
    rows_.resize(node_.size() * types_);
  }

  ExactResult run(const Schedule& greedy) {
    ExactResult result;
    result.greedy_batches = int64_t(greedy.batch_count());
    best_ = greedy;
    best_count_ = result.greedy_batches;
    State root{Bits((node_.size() + 63) / 64, 0), std::vector<uint32_t>(node_.size())};
    for (size_t k = 0; k < node_.size(); ++k) root.pending[k] = uint32_t(preds_[k].size());
    finished_ = true;
    visit(root, 0);
    result.schedule = std::move(best_);
    result.optimal = finished_;
    result.states_explored = explored_;
    return result;
  }

 private:
  struct State {
    Bits done;
    std::vector<uint32_t> pending;
  };
  struct Batch {
    uint32_t type;
    std::vector<ir::NodeId> members;
  };

  bool is_done(const State& s, size_t k) const { return s.done[k / 64] >> (k % 64) & 1; }
  bool is_ready(const State& s, size_t k) const { return !is_done(s, k) && s.pending[k] == 0; }

  // Runs `members` (compact ids) as one batch of `type`.
  void apply(State& s, uint32_t type, const std::vector<uint32_t>& members) {
    Batch& batch = path_.emplace_back();
    batch.type = type;
    for (uint32_t k : members) {
      s.done[k / 64] |= 1ull << (k % 64);
      for (uint32_t u : users_[k]) --s.pending[u];
      batch.members.push_back(node_[k]);
    }
  }

  // Steps that cannot cost a batch: a ready unbatchable node, or a type whose every remaining
  // node is ready. Returns how many batches were added.
  size_t force(State& s) {
    size_t added = 0;
    for (bool again = true; again;) {
      again = false;
      std::vector<uint32_t> ready_count(types_, 0), remaining(types_, 0);
      for (size_t k = 0; k < node_.size(); ++k) {
        if (is_done(s, k)) continue;
        ++remaining[type_[k]];
        if (s.pending[k] == 0) ++ready_count[type_[k]];
      }
      for (uint32_t t = 0; t < types_ && !again; ++t) {
        if (ready_count[t] == 0 || (!unbatchable_[t] && ready_count[t] != remaining[t])) continue;
        std::vector<uint32_t> members;
        for (size_t k = 0; k < node_.size(); ++k)
          if (type_[k] == t && is_ready(s, k)) {
            members.push_back(uint32_t(k));
            if (unbatchable_[t]) break;
          }
        apply(s, t, members);
        ++added;
        again = true;
      }
    }
    return added;
  }

  // Per type, the longest same-type chain among the remaining nodes; unbatchable nodes count one
  // batch each.
  int64_t remaining_bound(const State& s) {
    std::vector<uint32_t> longest(types_, 0);
    int64_t bound = 0;
    for (size_t k = 0; k < node_.size(); ++k) {
      if (is_done(s, k)) continue;
      uint32_t* row = &rows_[k * types_];
      std::fill(row, row + types_, 0u);
      for (uint32_t p : preds_[k])
        if (!is_done(s, p))
          for (uint32_t t = 0; t < types_; ++t) row[t] = std::max(row[t], rows_[p * types_ + t]);
      if (unbatchable_[type_[k]]) {
        ++bound;
        continue;
      }
      ++row[type_[k]];
      longest[type_[k]] = std::max(longest[type_[k]], row[type_[k]]);
    }
    for (uint32_t l : longest) bound += l;
    return bound;
  }

  bool out_of_time() {
    if (++explored_ % 256 != 0) return false;
    return std::chrono::steady_clock::now() - start_ > options_.time_cap;
  }

  void visit(State s, int64_t depth) {
    if (!finished_) return;
    if (out_of_time()) {
      finished_ = false;
      return;
    }
    const size_t path_size = path_.size();
    depth += int64_t(force(s));
    if (done_count(s) == node_.size()) {
      if (depth < best_count_) record_best(depth);
    } else if (depth + remaining_bound(s) < best_count_) {
      auto [it, inserted] = seen_.try_emplace(s.done, depth);
      if (inserted || depth < it->second) {
        it->second = depth;
        branch(s, depth);
      }
    }
    path_.resize(path_size);
  }

  size_t done_count(const State& s) const {
    size_t count = 0;
    for (uint64_t w : s.done) count += size_t(__builtin_popcountll(w));
    return count;
  }

  void branch(const State& s, int64_t depth) {
    std::vector<std::vector<uint32_t>> ready(types_);
    for (size_t k = 0; k < node_.size(); ++k)
      if (is_ready(s, k)) ready[type_[k]].push_back(uint32_t(k));
    std::vector<uint32_t> order;
    for (uint32_t t = 0; t < types_; ++t)
      if (!ready[t].empty()) order.push_back(t);
    // Larger batches first: the usual good choice, so good bounds come early.
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ready[a].size() > ready[b].size(); });
    for (uint32_t t : order) {
      State next = s;
      const size_t path_size = path_.size();
      apply(next, t, ready[t]);
      visit(std::move(next), depth + 1);
      path_.resize(path_size);
      if (!finished_) return;
    }
  }

  void record_best(int64_t depth) {
    best_count_ = depth;
    best_.clear();
    for (const Batch& batch : path_) best_.add_batch(global_[batch.type], batch.members);
  }

  ExactSearch options_;
  std::chrono::steady_clock::time_point start_;
  std::vector<ir::NodeId> node_;  // compact id -> node
  std::vector<uint32_t> type_;    // compact id -> local type
  std::vector<std::vector<uint32_t>> preds_, users_;
  size_t types_ = 0;
  std::vector<ir::TypeId> global_;
  std::vector<uint8_t> unbatchable_;
  std::vector<uint32_t> rows_;    // remaining_bound's chain counts, node x type
  std::vector<Batch> path_;
  std::unordered_map<Bits, int64_t, BitsHash> seen_;  // state -> least depth it was reached at
  Schedule best_;
  int64_t best_count_ = 0;
  int64_t explored_ = 0;
  bool finished_ = true;
};

}  // namespace

ExactResult schedule_fewest_batches(const ScheduleInput& input, const ExactSearch& options) {
  Analysis own;
  const Analysis& analysis = analysis_for(input, own);
  GreedyPolicy greedy;
  ScheduleInput with_analysis = input;
  with_analysis.analysis = &analysis;
  Schedule start;
  greedy.schedule(with_analysis, start);
  if (int64_t(analysis.dependencies.scheduled) > options.max_nodes) {
    ExactResult result;
    result.greedy_batches = int64_t(start.batch_count());
    result.schedule = std::move(start);
    return result;
  }
  return Search(input, analysis, options).run(start);
}

void ExactPolicy::schedule(const ScheduleInput& input, Schedule& out) {
  out = schedule_fewest_batches(input, options_).schedule;
}

}  // namespace edb::scheduler
