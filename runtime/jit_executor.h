// The jit executor: the batched executor (runtime/batched.h) with kernels compiled at run time
// where they apply. A batch of cell calls whose cell lowers to a cell program runs as one compiled
// kernel (runtime/cell_kernels.h); consecutive elementwise batches over the same members fuse into
// one kernel compiled by the LLVM backend, its operands read through per-member pointers inside its
// loads; the rest runs on the batched executor's kernels. Kernels are kept in the kernel cache in
// `cache_directory` (empty: the default, jit/kernel_cache.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/batched.h"

namespace edb::runtime {

struct JitKernels;  // compiled elementwise kernels by description (jit_executor.cpp)
struct JitLaunch;   // one such kernel prepared to run (jit_executor.cpp)
class CellKernels;  // compiled cells (runtime/cell_kernels.h)

class JitExecutor final : public BatchedExecutor {
 public:
  JitExecutor(int threads, std::string cache_directory);
  ~JitExecutor() override;
  std::string_view name() const override { return "jit"; }
  static constexpr Capabilities kCapabilities{.lowers_cells = true, .threads = true, .node_batches = true};
  Capabilities capabilities() const override { return kCapabilities; }
  void set_cache_entries(size_t entries) override;
  void cache_sizes(CacheSizes& sizes) const override;
  void forget_cells() override;

 protected:
  size_t run_compiled(const scheduler::Schedule& schedule, const Values& values, size_t b, Stats& stats) override;
  bool runs_beside(const scheduler::Schedule& schedule, const Values& values, size_t b) const override;
  void prepare_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k, Lane& lane,
                      Stats& stats) override;
  void run_beside(const scheduler::Schedule& schedule, const Values& values, size_t b, size_t k, Lane& lane) override;

 private:
  enum class Beside;
  Beside beside_kind(const scheduler::Schedule& schedule, const Values& values, size_t b) const;

  std::unique_ptr<JitKernels> kernels_;
  std::unique_ptr<CellKernels> cells_;
  std::vector<std::unique_ptr<JitLaunch>> groups_;  // per lane of a window: its prepared group
};

}  // namespace edb::runtime
