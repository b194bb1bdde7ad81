// The batched CPU executor on Eigen: one call per batch. Operands already contiguous and in member
// order are used in place, shared ones (one weight for every member) once, and the rest are
// gathered into scratch memory (counted in Stats::bytes_gathered). Matrix products over a shared
// weight become one GEMM over all members, split into column blocks across the thread pool.
// Precondition: the plan puts each batch's outputs consecutively in member order (memplan's C1).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::runtime {

class CallExpansion;  // cell calls run batch by batch (runtime/call_expansion.h)
struct BatchContext;  // runtime/batch_context.h
struct MemberTable;   // runtime/batch_context.h
class WeightGradients;  // runtime/weight_gradients.h
class SideBySide;       // runtime/side_by_side.h
struct Lane;            // runtime/side_by_side.h

// Batches of cell calls run their cells' bodies batch by batch (runtime/call_expansion.h). The
// jit executor (runtime/jit_executor.h) is this executor with compiled kernels where they apply.
class BatchedExecutor : public Executor {
 public:
  explicit BatchedExecutor(int threads);
  ~BatchedExecutor() override;
  std::string_view name() const override { return "batched"; }
  static constexpr Capabilities kCapabilities{.lowers_cells = false, .threads = true, .node_batches = false};
  Capabilities capabilities() const override { return kCapabilities; }
  void execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) override;
  void set_cache_entries(size_t entries) override;
  void cache_sizes(CacheSizes& sizes) const override;
  void forget_cells() override;
  ThreadPool* thread_pool() override { return &pool_; }
  // Tests: 1 runs independent batches side by side, 0 never, -1 (the default) as EDB_SIDE_BY_SIDE
  // said when the executor was made.
  static std::atomic<int> side_by_side_override;

  // Grow-only scratch blocks, reset per batch (pointers stay valid within a batch).
  class Scratch {
   public:
    float* allocate(size_t floats);
    const float** allocate_pointers(size_t count);
    void reset() { used_block_ = 0; used_in_block_ = 0; }
    size_t bytes() const;
    size_t blocks() const { return blocks_.size(); }
    // Between executions: frees every block when they hold more than max_bytes (a batch larger
    // than any before grew them), so the scratch kept stays within kMaxBytes.
    void trim(size_t max_bytes);
    int64_t trims() const { return trims_; }
    static constexpr size_t kMaxBytes = size_t{64} << 20;

   private:
    // Aligned as Eigen's packets (Eigen::aligned_allocator), and handed out in 64-byte steps: a
    // pointer into a block is then as aligned as its offset, wherever the block landed. Eigen's
    // vectorized reductions start at an aligned element, so their sums depended on where malloc
    // put a block: run to run, and thread to thread.
    std::vector<std::vector<float, Eigen::aligned_allocator<float>>> blocks_;
    size_t used_block_ = 0, used_in_block_ = 0;
    int64_t trims_ = 0;
  };

 protected:
  // Runs batches [b, end) of `schedule` as one unit and returns end, or returns b to leave batch b
  // to this executor's kernels. The jit's compiled cells and fused elementwise kernels.
  virtual size_t run_compiled(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats) {
    (void)schedule, (void)values, (void)stats;
    return b;
  }
  // Batch b of `schedule` (its outputs checked consecutive in member order) over this executor's
  // scratch and pool.
  BatchContext context(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats);
  // context() of a batch of batch nodes (ir::NodeBatch): their members, read through table_.
  BatchContext node_batches(std::span<const ir::NodeId> nodes, const Values& values, Stats& stats);
  Scratch& scratch() { return scratch_; }
  ThreadPool& pool() { return pool_; }
  // Independent batches side by side (runtime/side_by_side.h): whether batch b may run beside
  // others, then its two halves: prepare_beside on the executor's thread, the window's batches one
  // after another, and run_beside on whichever thread takes it, over the lane of the window's k-th.
  virtual bool runs_beside(const scheduler::Schedule& schedule, const Values& values, size_t b) const;
  // (Lane k's scratch is reset before its batch is prepared, and not again before it runs.)
  virtual void prepare_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k,
                              Lane& lane, Stats& stats) {
    (void)schedule, (void)values, (void)b, (void)k, (void)lane, (void)stats;
  }
  virtual void run_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k, Lane& lane);
  // Batch b's context over `lane` (its outputs checked consecutive in member order).
  static BatchContext lane_context(const scheduler::Schedule& schedule, const Values& values, size_t b, Lane& lane);

 private:
  // Batch b alone (or the batches from b that run as one compiled unit): returns the next batch.
  size_t run_alone(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats);
  void run_window(const scheduler::Schedule& schedule, const Values& values, size_t begin, size_t end, Stats& stats);
  // Plan contract C1: batch b's outputs lie one after another in member order.
  static void check_consecutive(const Values& values, std::span<const ir::NodeId> members, size_t b);

  ThreadPool pool_;
  Scratch scratch_;
  std::unique_ptr<CallExpansion> calls_;  // batches of calls the executor runs by their bodies
  std::unique_ptr<MemberTable> table_;    // node_batches()': one batch's at a time
  // Weight gradients whose blocks run early on waiting threads (two or more threads).
  std::unique_ptr<WeightGradients> weight_gradients_;
  int depth_ = 0;  // execute() calls under way: a batch of calls run by its bodies is one more
  std::unique_ptr<SideBySide> side_;  // windows of independent batches, with two or more threads
  std::vector<size_t> window_;        // run_window's batches that run something
  bool side_by_side_here_ = false;    // EDB_SIDE_BY_SIDE, read when the executor is made
};

}  // namespace edb::runtime
