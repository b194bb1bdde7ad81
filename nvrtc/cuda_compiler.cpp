// The CUDA side of the kernel cache: key, lookup, render, compile, store.
#include "nvrtc/cuda_compiler.h"

#include "edbatch/errors.h"
#include "nvrtc/cuda_render.h"
#include "nvrtc/nvrtc_compiler.h"

namespace edb::nvrtc {

namespace {

jit::KernelCacheOptions cache_options(const std::string& directory) {
  jit::KernelCacheOptions options;
  options.directory = directory;
  return options;
}

Nvrtc& nvrtc_or_throw() {
  std::string reason;
  Nvrtc* nvrtc = Nvrtc::get(&reason);
  if (!nvrtc) throw UsageError("edb::Engine: device 'cuda' needs NVRTC: " + reason);
  return *nvrtc;
}

}  // namespace

CudaCompiler::CudaCompiler(const std::string& cache_directory, int major, int minor)
    : cache_(cache_options(cache_directory)),
      major_(major),
      minor_(minor),
      target_("sm_" + std::to_string(major * 10 + minor)),
      flags_("nvrtc " + nvrtc_or_throw().version() + " --std=c++17 -default-device") {}

template <typename Render>
CudaImage CudaCompiler::get(const std::string& description, const std::string& name, Render&& render) {
  CudaImage out;
  out.key = jit::kernel_key(description, "cuda", target_, flags_);
  if (std::optional<jit::KernelEntry> entry = cache_.lookup(out.key)) {
    out.image = std::move(entry->object);
    out.compile_ms = entry->compile_ms;
    return out;
  }
  const CompiledImage compiled = nvrtc_or_throw().compile(render(out.key.symbol()), name, major_, minor_);
  jit::KernelEntry entry;
  entry.key = out.key;
  entry.description = description;
  entry.backend = "cuda";
  entry.target = target_;
  entry.flags = flags_;
  entry.compile_ms = compiled.compile_ms;
  entry.object = compiled.image;
  entry.assembly = compiled.ptx;  // `edb-cache show` prints it
  cache_.store(entry);
  out.image = compiled.image;
  out.compiled_now = true;
  out.compile_ms = compiled.compile_ms;
  return out;
}

CudaImage CudaCompiler::elementwise(const jit::Kernel& kernel) {
  return get(jit::describe(kernel), kernel.name, [&](const std::string& symbol) { return render_kernel(kernel, symbol); });
}

CudaImage CudaCompiler::cell(const jit::CellProgram& program) {
  return get(jit::describe(program), program.name,
             [&](const std::string& symbol) { return render_cell(program, symbol, kCellVector); });
}

CudaImage CudaCompiler::gemm() {
  return get(gemm_description(), "gemm", [](const std::string& symbol) { return render_gemm(symbol); });
}

}  // namespace edb::nvrtc
