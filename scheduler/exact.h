// The fewest batches for a small graph (a cell's body, planned once and reused for every batch of
// calls): depth-first branch and bound over frontier states, starting from greedy's schedule and
// stopping at a time cap with the best schedule found so far. Precondition: none beyond
// ScheduleInput's; the search is exponential, so it is meant for graphs of tens of nodes.
#pragma once

#include <chrono>
#include <cstdint>

#include "scheduler/schedule.h"

namespace edb::scheduler {

struct ExactSearch {
  std::chrono::microseconds time_cap{200000};
  int64_t max_nodes = 1024;  // more scheduled nodes than this: greedy's schedule, not searched
};

struct ExactResult {
  Schedule schedule;
  bool optimal = false;         // the search finished: no schedule has fewer batches
  int64_t greedy_batches = 0;   // the starting point, for reports
  int64_t states_explored = 0;
};

// Steps that cannot cost a batch are taken without branching: a type all of whose remaining nodes
// are ready, and a ready unbatchable node. Each branch runs every ready node of one type. Bounds:
// a state's depth plus the lower bound of its remaining nodes (per type, the longest same-type
// chain); states already reached at no greater depth are cut.
ExactResult schedule_fewest_batches(const ScheduleInput& input, const ExactSearch& options = {});

// The same search as a Policy ("exact"), for tests and small graphs.
class ExactPolicy final : public Policy {
 public:
  explicit ExactPolicy(ExactSearch options = {}) : options_(options) {}
  std::string_view name() const override { return "exact"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;

 private:
  ExactSearch options_;
};

}  // namespace edb::scheduler
