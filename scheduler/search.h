// Schedule search for graphs too large for exact.h: a beam over "which type runs next", each
// candidate valued by a rollout of the tight-first rule to the end, within a time budget. Tight
// types run without branching (they cost nothing beyond the lower bound); the best complete
// schedule any rollout reached is returned, so the search stops at any time with a schedule no
// worse than the tight-first rule's. With `widen`, passes of wider beams follow while time is left. Costs count batches once cell calls expand.
// Precondition: none beyond ScheduleInput's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "ir/bounded_cache.h"
#include "scheduler/schedule.h"

namespace edb::scheduler {

struct SearchOptions {
  std::chrono::microseconds budget{1000000};  // wall-clock time for one graph
  int beam_width = 64;      // states kept per step at most (1: one-step rollouts over the rule); the
                            // budget narrows it
  int max_candidates = 12;  // types tried per state, the rule's favourites first
  // When the first pass ends with budget left, passes that branch on tight types too (a tight
  // batch run at once cannot wait for lower nodes of its type that are not ready yet, so forcing it
  // can miss the best schedule), from the first pass's width doubling up to 64 x beam_width, with
  // every candidate, until the budget ends; the best schedule of any pass is kept. Off for the
  // search policy (its budget caps a new shape's latency); on in the learned policy's training.
  bool widen = false;
};

struct SearchResult {
  Schedule schedule;           // a policy's schedule: cell calls as one node each
  int64_t batches = 0;         // of `schedule`, once cells expand
  int64_t rule_batches = 0;    // of the tight-first rule alone (rollouts follow the best of it and the remaining rules)
  int64_t greedy_batches = 0;  // of the greedy policy
  int64_t lower_bound = 0;     // weighted, over the policy's nodes
  int64_t rollouts = 0;
  int passes = 0;              // beam passes started (more than one only when widening)
  int last_width = 0;          // the widest beam a pass used
  bool finished = false;       // the first pass of the beam ran to the end within the budget
};

SearchResult search_schedule(const ScheduleInput& input, const SearchOptions& options = {});

// The trace's structure as an exact key: per node of the range its type's signature (or none) and
// the offsets of the scheduled nodes it reads. Two inputs with equal keys have the same schedules
// up to the offset of `begin`.
std::string structure_key(const ScheduleInput& input);

// "search": searches each trace within the budget and caches the schedule by structure_key, for
// programs that run one graph shape many times (a hit costs a key, no search). The cache keeps the
// `capacity` most recently used schedules.
class SearchPolicy final : public Policy {
 public:
  explicit SearchPolicy(SearchOptions options = {}, size_t capacity = 64) : options_(options), cache_(capacity) {}
  std::string_view name() const override { return "search"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;
  void set_budget(std::chrono::microseconds budget) { options_.budget = budget; }
  int64_t searches() const { return searches_; }
  int64_t cache_hits() const { return cache_.hits(); }
  size_t cached() const { return cache_.size(); }
  size_t capacity() const { return cache_.max_entries(); }
  void set_capacity(size_t capacity) { cache_.set_limits(capacity); }  // evicts the least recently used beyond it
  int64_t evictions() const { return cache_.evictions(); }
  CacheSize sizes() const { return cache_.sizes(); }
  void clear() { cache_.clear(); }  // forgets every schedule (their batches name types of a signature table reset since)

 private:
  SearchOptions options_;
  ir::BoundedCache<std::string, Schedule> cache_;  // node ids relative to the input's begin
  int64_t searches_ = 0;
};

}  // namespace edb::scheduler
