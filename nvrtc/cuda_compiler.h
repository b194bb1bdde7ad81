// CUDA kernels through the kernel cache shared with the CPU backend: backend "cuda", target the
// architecture ("sm_90"), flags naming the NVRTC version and options, and (as in every key) the
// build's jit::code_identity(), so no image another build rendered loads. An image whose key is
// cached is taken from memory or disk; any other is rendered, compiled by NVRTC and stored.
#pragma once

#include <string>

#include "jit/cell_program.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"

namespace edb::nvrtc {

struct CudaImage {
  jit::KernelKey key;
  std::string image;      // cubin (ELF) or NUL-terminated PTX, for CudaDevice::load_function
  bool compiled_now = false;
  double compile_ms = 0;  // NVRTC's time (for a cached image: the time its entry records)
  std::string symbol() const { return key.symbol(); }
};

// Throws UsageError when NVRTC cannot be loaded (with Nvrtc::get's reason), InternalError when a
// rendered kernel does not compile. Thread-safe as far as KernelCache is; one per executor.
class CudaCompiler {
 public:
  CudaCompiler(const std::string& cache_directory, int major, int minor);

  CudaImage elementwise(const jit::Kernel& kernel);  // render_kernel's source
  CudaImage gemm();                                  // render_gemm's source
  // render_cell's source, weights packed in kCellVector floats per row tile.
  static constexpr int kCellVector = 32;
  CudaImage cell(const jit::CellProgram& program);

  const std::string& target() const { return target_; }
  const std::string& flags() const { return flags_; }
  jit::KernelCache& cache() { return cache_; }

 private:
  template <typename Render>
  CudaImage get(const std::string& description, const std::string& name, Render&& render);
  jit::KernelCache cache_;
  int major_, minor_;
  std::string target_, flags_;
};

}  // namespace edb::nvrtc
