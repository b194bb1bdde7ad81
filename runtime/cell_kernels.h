// Compiled cells for the jit executor: a batch of cell calls (scheduler::Schedule::CallBatch) runs
// as one kernel compiled from the cell's program (jit/cell_program.h) instead of the body's
// batches one by one. The body is lowered once per cell from its first call's copy in a trace;
// weights are packed once per model version (repacked when a parameter's version moves).
// Precondition: the plan gives every body node of every call its place (memplan's Plan).
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
  void keep_every_value() { keep_every_value_ = true; }  // before the first run
  void check_shared_reads() { check_shared_reads_ = true; }  // Executor::check_shared_reads
  ~CellKernels();

  // Runs a batch of calls as one kernel, split by calls across the pool; false when its cell does
  // not lower (the caller runs the batches instead).
  bool run(const scheduler::Schedule& schedule, const scheduler::Schedule::CallBatch& batch, const Values& values,
           ThreadPool& pool, Stats& stats);
  // Runs a batch of `call` nodes of one CallCell as one kernel.
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
  Cell& cell_of(const scheduler::Schedule& schedule, const scheduler::Schedule::CallBatch& batch, const Values& values,
                Stats& stats);
  void compile(Cell& cell, Stats& stats);
  // Packs each weight again whose pieces moved or changed; piece(w, p) is piece p of weight w.
  void refresh_weights(Cell& cell, const std::function<const ir::ParameterInfo&(size_t, size_t)>& piece);
  // Runs the kernel over `calls` calls whose tables are in pointers_ and shared_.
  void launch(Cell& cell, int64_t calls, ThreadPool& pool, Stats& stats);

  std::string cache_directory_;
  bool keep_every_value_ = false;
  bool check_shared_reads_ = false;
  jit::CachedCompiler* compiler_ = nullptr;
  // By CellSchedule and the calls' type (which parameters they pass decides the lowering), or by
  // CallCell.
  ir::BoundedCache<std::pair<const void*, ir::TypeId>, std::unique_ptr<Cell>, ir::PairHash> cells_;  // 1024 at first
  // The entry of `key`, made empty (and the least recently used evicted) when there is none.
  std::unique_ptr<Cell>& slot(const void* cell, ir::TypeId type);
  std::vector<float*> pointers_;        // the batch's call tables, kept between batches
  std::vector<const float*> shared_;
};

}  // namespace edb::runtime
