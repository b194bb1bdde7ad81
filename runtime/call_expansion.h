// Batches of cell calls (ir::Op::call nodes of one runtime::CallCell) run by any executor: the
// cell's body is expanded over the batch's calls once (the body's schedule, each of its batches
// over every call), the executor runs that expansion as it runs a trace, reading each call's
// arguments where they lie, and each call's frame receives what its cell's frame holds. Executors that compile a cell (the jit) run its calls as
// one kernel instead; this is the path for every other executor, and for cells that do not lower.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "edbatch/stats.h"
#include "ir/bounded_cache.h"
#include "runtime/executor.h"

namespace edb::runtime {

struct CallCell;

class CallExpansion {
 public:
  CallExpansion();
  ~CallExpansion();
  // Runs the calls (one cell's, in the graph of `values`) on `executor`, which must not be
  // running this expansion already (bodies do not call cells); `node_by_node`: each body node a
  // batch of its own (the unbatched baseline, scheduler::Schedule::node_by_node).
  void run(Executor& executor, std::span<const ir::NodeId> calls, const Values& values, Stats& stats,
           bool node_by_node = false);

  // Expansions kept, by cell and number of calls: EngineOptions::cache_entries, at most
  // kMaxExpansions; the least recently used goes when a new one would exceed them.
  static constexpr size_t kMaxExpansions = 256;
  void set_capacity(size_t entries);
  // Forgets every expansion: the engine dropped the cell records their keys point into.
  void clear();
  CacheSize sizes() const;  // Stats::caches.call_expansions: entries, and the bytes of its arena

 private:
  struct Expanded;
  Expanded& expanded(const CallCell& cell, size_t calls, bool node_by_node);

  // By cell and number of calls (negative: node by node).
  ir::BoundedCache<std::pair<const CallCell*, int64_t>, std::unique_ptr<Expanded>, ir::PairHash> expanded_;
  std::vector<float> arena_;
};

}  // namespace edb::runtime
