// Compiled kernels through the kernel cache: a kernel whose key is on disk (or already in memory)
// is linked from its stored object, any other is compiled by the LLVM backend and stored, so a
// second process with a warm cache directory compiles nothing. No LLVM types here.
#pragma once

#include <functional>
#include <string>

#include "edbatch/stats.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "jit/llvm_backend.h"

namespace edb::jit {

struct CachedCompilerOptions {
  KernelCacheOptions cache;    // directory empty: KernelCache::default_directory()
  LlvmBackendOptions backend;  // keep_ir also decides whether stored entries carry IR text
};

// One cache and one backend. A cached entry that does not load (a bad object, another target) is
// one warning through the cache's warn function, then a compile whose entry replaces it; a bad
// entry file is the cache's warning and a miss. Nothing here fails for a cache problem. Thread-safe.
class CachedCompiler {
 public:
  explicit CachedCompiler(CachedCompilerOptions options = {});

  // The kernel's code; compiled_now says whether LLVM compiled it in this call (false: loaded
  // from the cache, or already held by this compiler's backend).
  CompiledKernel get(const Kernel& kernel, bool& compiled_now);
  CompiledKernel get(const CellProgram& program, bool& compiled_now);  // the same for a cell program

  KernelCache& cache() { return cache_; }
  LlvmBackend& backend() { return backend_; }

 private:
  template <typename Program>
  CompiledKernel get_described(const Program& program, const std::string& description, bool& compiled_now);
  std::function<void(const std::string&)> warn_;
  KernelCache cache_;
  LlvmBackend backend_;
};

// Stats::caches' process-wide sizes of `compiler`: the kernels its backend linked, and the cache's
// entries kept in memory.
void compiler_cache_sizes(CachedCompiler& compiler, CacheSize& linked, CacheSize& memory);

// The process's compiler for a cache directory (empty: KernelCache::default_directory() as it is at
// this call), created on first use and never destroyed, since the code it linked may run until the
// process exits. Executors on the same directory share one; IR text is not kept. Thread-safe.
CachedCompiler& shared_compiler(const std::string& directory);
// The same compiler if one was made for the directory, else null (nothing is created).
CachedCompiler* find_shared_compiler(const std::string& directory);

}  // namespace edb::jit
