// Counters and times of evaluation, summed over a run; the runners print them and --json emits them.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace edb {

struct StageTimes {
  double schedule_ms = 0;
  double plan_ms = 0;
  double compile_ms = 0;
  double execute_ms = 0;
  // Trace::record_backward's own work: recording the backward pass's nodes (its schedule and plan
  // are in schedule_ms and plan_ms).
  double record_backward_ms = 0;
};

// The size of one cache that grows with the structures a process sees, and its bound (0: that
// unit is not the bound, or not counted). Each cache evicts when it reaches its bound, so entries
// <= max_entries and bytes <= max_bytes hold after every evaluation.
struct CacheSize {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
  int64_t evictions = 0;  // entries evicted (or, for a table cleared whole, entries cleared) so far
};

// Every such cache, as read when Engine::stats() is called. These are gauges, not sums: `+=` and
// `-=` leave this Stats' sizes as they are, so `later -= earlier` keeps the later reading; every
// Engine::stats() reads them afresh. Defaults and knobs: docs/edb-run.md.
struct CacheSizes {
  CacheSize signatures;        // the engine's signature table: types (16 x EngineOptions::cache_entries)
  CacheSize search_schedules;  // the search policy's schedules by trace structure
  // Process-wide, for the engine's kernel cache directory (jit): kernels linked into the LLVM JIT
  // (jit::LlvmBackendOptions::max_kernels), and the kernel cache's entries kept in memory
  // (jit::KernelCacheOptions::max_memory_bytes).
  CacheSize linked_kernels;
  CacheSize kernel_memory;
  CacheSize jit_kernels;  // the jit executor's compiled kernels by batch structure
  CacheSize scratch;      // the batched and jit executors' scratch blocks (bytes, between evaluations)
  // The engine's records of distinct cell bodies (each with its backward body once derived):
  // dropped together when over EngineOptions::cache_entries and no trace of the engine is alive.
  CacheSize cell_records;
  CacheSize cell_kernels;     // jit: compiled cells by cell and call type, with their packed weights (bytes)
  CacheSize call_expansions;  // cell bodies expanded over a batch's number of calls (executors but jit's lowered cells)
  CacheSize device_kernels;   // cuda: kernel functions loaded on the device by kernel text

  // Every cache above by the name edb-run --json and Python give it, in one list.
  std::array<std::pair<const char*, const CacheSize*>, 10> named() const {
    return {{{"signatures", &signatures},
             {"search_schedules", &search_schedules},
             {"linked_kernels", &linked_kernels},
             {"kernel_memory", &kernel_memory},
             {"jit_kernels", &jit_kernels},
             {"scratch", &scratch},
             {"cell_records", &cell_records},
             {"cell_kernels", &cell_kernels},
             {"call_expansions", &call_expansions},
             {"device_kernels", &device_kernels}}};
  }
};

// nodes, batches and lower_bound describe the schedule, so they are the same for every executor
// that runs it; kernel_calls and bytes_gathered say what the executor did with it. With cells on
// (EngineOptions::cells), each call of a cell counts as the nodes of its body.
struct Stats {
  int64_t nodes = 0;           // nodes evaluated, leaves excluded; a cell call: its body's operations
  // Batches of the schedule: the policy's, with each batch of cell calls counted as the cell's own
  // batches (a cell of 3 internal batches called 50 times in one batch: 3). The reference executor
  // still runs them node by node (its kernel_calls are its nodes), and the jit runs a batch of
  // calls as one compiled kernel; both count the schedule's batches here.
  int64_t batches = 0;
  // The lower bound on `batches`, summed over evaluations: for each type of node the policy
  // schedules, the longest chain of nodes of that type (none can share a batch) times the batches
  // one of its batches counts, plus one per unbatchable node. A cell call counts as one node of
  // its call type, weighted by its cell's batches, whether the executor copies its body or records
  // it as one node; so, like `batches`, it is the same under every executor.
  int64_t lower_bound = 0;
  // Compute calls made: the reference one per node computed; batched one or more per batch; the
  // jit one per fused group of elementwise batches and per batch of cell calls run as one kernel
  // (each counted once per thread that took a share of it).
  int64_t kernel_calls = 0;
  int64_t bytes_gathered = 0;  // operand bytes copied or read through index arrays
  // With two or more threads: blocks of a weight gradient's uses run ahead of the gradient's own
  // batch, on a thread that waited for the evaluation while the backward pass's last batches ran.
  int64_t early_gradient_blocks = 0;
  // With two or more threads: batches run side by side with independent ones, each whole on one
  // thread (runtime/side_by_side.h), rather than one after another.
  int64_t side_by_side_batches = 0;
  int64_t kernels_compiled = 0;
  int64_t cache_hits = 0;
  int64_t flops = 0;           // model arithmetic: 2 per multiply-add, 1 per elementwise op
  // Learned policies (fsm, learned): the steps at which it had a choice to make (two or more
  // ready types; the other steps take greedy's one choice and are not counted). With cells on the policy sees each
  // call as one node, so a batch of calls is at most one decision however many batches the cell has.
  int64_t policy_decisions = 0;
  int64_t policy_unseen = 0;     // of which fell back to greedy on a state the table lacks
  StageTimes time;
  CacheSizes caches;  // gauges (see CacheSizes), read at Engine::stats()

  Stats& operator+=(const Stats& other);
  Stats& operator-=(const Stats& other);  // what was counted between two readings: later -= earlier
};

}  // namespace edb
