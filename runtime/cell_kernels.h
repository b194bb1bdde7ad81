// Compiled cells for the jit executor: a batch of `call` nodes of one cell runs as one kernel
// compiled from the cell's program (jit/cell_program.h, lowered once per cell by
// runtime/cell_lowering.h) instead of the body's batches one by one; weights are packed once per
// model version (repacked when a parameter's version moves).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "edbatch/stats.h"
#include "ir/bounded_cache.h"
#include "jit/llvm_backend.h"
#include "runtime/cell_lowering.h"
#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::jit {
class CachedCompiler;
}

namespace edb::runtime {

// The jit executor's compiled cells: per cell, its lowering, kernel and packed weights.
class CellKernels {
 public:
  explicit CellKernels(std::string cache_directory);
  ~CellKernels();

  // Runs a batch of `call` nodes of one CallCell, which lowers, as one kernel, split across the
  // pool by calls or, for a small batch, by row tiles. A batch call (ir::CallBatch) counts as its
  // members' calls.
  void run_calls(std::span<const ir::NodeId> calls, const Values& values, ThreadPool& pool, Stats& stats);

  // The most compiled cells kept (EngineOptions::cache_entries), least recently used out; their
  // kernels stay in the kernel cache, so one evicted is lowered and packed again, not compiled.
  void set_capacity(size_t entries);
  // Forgets every compiled cell: the engine dropped the cell records their keys point into.
  void clear();
  CacheSize sizes() const;  // Stats::caches.cell_kernels: entries, packed weights' bytes

 private:
  struct PackedWeight;
  struct Cell;
  void compile(Cell& cell, Stats& stats);
  // Packs each weight again whose pieces moved or changed, its row tiles cut across the pool;
  // piece(w, p) is piece p of weight w.
  void refresh_weights(Cell& cell, const std::function<const ir::ParameterInfo&(size_t, size_t)>& piece,
                       ThreadPool& pool);
  // Runs the kernel over `calls` calls whose tables are in pointers_ and shared_.
  void launch(Cell& cell, int64_t calls, ThreadPool& pool, Stats& stats);

  std::string cache_directory_;
  jit::CachedCompiler* compiler_ = nullptr;
  ir::BoundedCache<const CallCell*, std::unique_ptr<Cell>> cells_;  // by cell; 1024 at first
  // The entry of `cell`, made empty (and the least recently used evicted) when there is none.
  std::unique_ptr<Cell>& slot(const CallCell* cell);
  std::vector<float*> pointers_;        // the batch's call tables, kept between batches
  std::vector<const float*> shared_;
  std::vector<float> sums_;          // batch calls' arguments of several terms, summed
  std::vector<float*> arguments_;    // one call's arguments
};

}  // namespace edb::runtime
