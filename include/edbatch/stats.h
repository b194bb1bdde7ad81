// Counters and times of evaluation, summed over a run; the runners print them and --json emits them.
#pragma once

#include <cstdint>

namespace edb {

struct StageTimes {
  double schedule_ms = 0;
  double plan_ms = 0;
  double compile_ms = 0;
  double execute_ms = 0;
};

struct Stats {
  int64_t nodes = 0;           // nodes evaluated (leaves excluded)
  int64_t batches = 0;         // scheduled groups run
  int64_t lower_bound = 0;     // DESIGN.md's LB summed over evaluations
  int64_t kernel_calls = 0;    // compute calls made (a batch may take several)
  int64_t bytes_gathered = 0;  // operand bytes copied or read through index arrays
  int64_t kernels_compiled = 0;
  int64_t cache_hits = 0;
  int64_t flops = 0;           // model arithmetic: 2 per multiply-add, 1 per elementwise op
  int64_t policy_decisions = 0;  // learned policies (fsm, learned): steps decided
  int64_t policy_unseen = 0;     // of which fell back to greedy on a state the table lacks
  StageTimes time;

  Stats& operator+=(const Stats& other);
  Stats& operator-=(const Stats& other);  // what was counted between two readings: later -= earlier
};

}  // namespace edb
