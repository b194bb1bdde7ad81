// The batched CPU executor on Eigen: one call per batch. Operands already contiguous and in member
// order are used in place, shared ones (one weight for every member) once, and the rest are
// gathered into scratch memory (counted in Stats::bytes_gathered). Matrix products over a shared
// weight become one GEMM over all members, split into column blocks across the thread pool.
// Precondition: the plan puts each batch's outputs consecutively in member order (memplan's C1).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::runtime {

struct JitKernels;  // compiled elementwise kernels by description (batched.cpp)
class CellKernels;  // compiled cells (runtime/cell_kernels.h)
class CallExpansion;  // cell calls run batch by batch (runtime/call_expansion.h)

// With `jit`, a batch of cell calls whose body lowers to a cell program runs as one compiled kernel
// (runtime/cell_kernels.h), and other elementwise batches run kernels compiled by the LLVM backend:
// operands are read through per-member pointers inside the kernel's loads, and consecutive
// elementwise batches over the same members fuse into one kernel; the rest stays Eigen. Kernels
// are kept in the kernel cache in `cache_directory` (empty: the default, jit/kernel_cache.h).
class BatchedExecutor final : public Executor {
 public:
  explicit BatchedExecutor(int threads, bool jit = false, std::string cache_directory = {});
  ~BatchedExecutor() override;
  std::string_view name() const override { return jit_ ? "jit" : "batched"; }
  void execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) override;
  void keep_every_value() override;
  void check_shared_reads() override;
  void set_cache_entries(size_t entries) override;
  void cache_sizes(CacheSizes& sizes) const override;
  void forget_cells() override;
  ThreadPool* thread_pool() override { return &pool_; }

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
    std::vector<std::vector<float>> blocks_;
    size_t used_block_ = 0, used_in_block_ = 0;
    int64_t trims_ = 0;
  };

 private:
  ThreadPool pool_;
  Scratch scratch_;
  bool jit_;
  std::unique_ptr<JitKernels> kernels_;  // null unless jit
  std::unique_ptr<CellKernels> cells_;   // null unless jit
  std::unique_ptr<CallExpansion> calls_;  // batches of calls of cells not compiled
};

}  // namespace edb::runtime
