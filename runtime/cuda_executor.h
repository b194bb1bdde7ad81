// The GPU executor (device "cuda"): values in a device arena that grows, leaves uploaded per
// execution, elementwise batches through rendered CUDA kernels (gathers fused into the loads),
// matrix products over a shared weight through the tiled batched GEMM, a batch of cell calls as one
// kernel rendered from its cell's program (cells lowered as the jit lowers them) or as its body's
// batches over the calls in their frames (runtime/call_expansion.h), every other batch on the host
// with evaluate_node and the arena copied across (correct, not fast).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/executor.h"

namespace edb::runtime {

class CudaExecutor final : public Executor {
 public:
  // UsageError naming the reason when there is no usable GPU or no NVRTC. `library` is the libcuda
  // to load (empty: $EDB_CUDA_LIBRARY, else libcuda.so.1). With `lower_cells` (the CPU executor of
  // the same name lowers them: jit), a batch of calls of a cell that lowers runs as one rendered
  // kernel (nvrtc::render_cell); otherwise as its body's batches.
  explicit CudaExecutor(const std::string& cache_directory, const std::string& library = {}, bool lower_cells = false);
  ~CudaExecutor() override;
  std::string_view name() const override { return "cuda"; }
  Capabilities capabilities() const override;
  void execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) override;
  void set_cache_entries(size_t entries) override;
  void cache_sizes(CacheSizes& sizes) const override;
  void forget_cells() override;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Device selection (EngineOptions::device): "cpu" is make_executor(executor, ...); "cuda" is a
// CudaExecutor (executor batched or jit; reference runs on the CPU only), or a UsageError naming
// why there is no usable GPU; "auto" is cuda when usable, else the CPU executor after one line on
// stderr (once per process) saying why. `resolved` gets the device chosen: "cpu" or "cuda".
std::unique_ptr<Executor> make_device_executor(const std::string& device, std::string_view executor, int threads,
                                               const std::string& cache_directory, std::string& resolved);
std::vector<std::string> device_names();  // cpu, cuda, auto

}  // namespace edb::runtime
