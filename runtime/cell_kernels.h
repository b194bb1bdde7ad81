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

  // run_calls in two halves, so that batches prepared one after another on one thread may then
  // run side by side (runtime/side_by_side.h): prepare() compiles the cell where needed, repacks
  // its weights and builds the calls' tables into launch `lane` (kept until that lane is prepared
  // again); launch() runs them, split across `pool`. Launches of different lanes may run at once on
  // different threads.
  void prepare(std::span<const ir::NodeId> calls, const Values& values, ThreadPool& pool, Stats& stats, size_t lane);
  void launch(size_t lane, ThreadPool& pool, Stats& stats);

  // The most compiled cells kept (EngineOptions::cache_entries), least recently used out; their
  // kernels stay in the kernel cache, so one evicted is lowered and packed again, not compiled.
  void set_capacity(size_t entries);
  // Forgets every compiled cell: the engine dropped the cell records their keys point into.
  void clear();
  CacheSize sizes() const;  // Stats::caches.cell_kernels: entries, packed weights' bytes

 private:
  struct PackedWeight;
  struct Cell;
  struct Launch;  // a prepared batch of calls: its cell, tables and shared slots
  void compile(Cell& cell, Stats& stats);
  // Packs each weight again whose pieces moved or changed, its row tiles cut across the pool;
  // piece(w, p) is piece p of weight w.
  void refresh_weights(Cell& cell, const std::function<const ir::ParameterInfo&(size_t, size_t)>& piece,
                       ThreadPool& pool);

  std::string cache_directory_;
  jit::CachedCompiler* compiler_ = nullptr;
  // By cell; 1024 at first. Shared with the launches prepared from it, which an eviction by a
  // later prepare() must not leave pointing nowhere.
  ir::BoundedCache<const CallCell*, std::shared_ptr<Cell>> cells_;
  // The entry of `cell`, made empty (and the least recently used evicted) when there is none.
  std::shared_ptr<Cell>& slot(const CallCell* cell);
  std::vector<std::unique_ptr<Launch>> launches_;  // per lane, kept between batches
  std::vector<float*> arguments_;                  // one call's arguments
};

}  // namespace edb::runtime
