// Key, look up, load or compile and store: the whole cache protocol of the JIT executor.
#include "jit/cached_compiler.h"

#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <utility>

#include "jit/host.h"

namespace edb::jit {

namespace {

std::function<void(const std::string&)> warn_or_stderr(std::function<void(const std::string&)> warn) {
  if (warn) return warn;
  return [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

}  // namespace

CachedCompiler::CachedCompiler(CachedCompilerOptions options)
    : warn_(warn_or_stderr(options.cache.warn)),
      cache_([&] {
        options.cache.warn = warn_;
        return std::move(options.cache);
      }()),
      backend_(options.backend) {}

CompiledKernel CachedCompiler::get(const Kernel& kernel, bool& compiled_now) {
  return get_described(kernel, describe(kernel), compiled_now);  // describe verifies the kernel
}

CompiledKernel CachedCompiler::get(const CellProgram& program, bool& compiled_now) {
  return get_described(program, describe(program), compiled_now);
}

template <typename Program>
CompiledKernel CachedCompiler::get_described(const Program& program, const std::string& description, bool& compiled_now) {
  compiled_now = false;
  const KernelKey key = kernel_key(description, "llvm", host_cpu_name(), llvm_kernel_flags());
  if (std::optional<KernelEntry> entry = cache_.lookup(key)) {
    try {
      return backend_.load(*entry);
    } catch (const std::exception& e) {
      std::string why = e.what();
      for (char& c : why)
        if (c == '\n') c = ' ';
      warn_("edbatch kernel cache: warning: cannot load " + key.hex() + " (" + why + "); recompiling");
    }
  }
  CompiledKernel compiled = backend_.compile(program);
  compiled_now = true;
  KernelEntry entry;
  entry.key = compiled.key;
  entry.description = compiled.description;
  entry.backend = "llvm";
  entry.target = compiled.target;
  entry.flags = compiled.flags;
  entry.compile_ms = compiled.compile_ms;
  entry.object = compiled.object;
  entry.ir = compiled.ir;
  entry.assembly = compiled.assembly;
  cache_.store(entry);
  return compiled;
}

void compiler_cache_sizes(CachedCompiler& compiler, CacheSize& linked, CacheSize& memory) {
  const LlvmBackend::Sizes held = compiler.backend().sizes();
  linked = CacheSize{int64_t(held.kernels), int64_t(held.bytes), int64_t(held.max_kernels), 0, int64_t(held.evictions)};
  const KernelCacheCounters counters = compiler.cache().counters();
  memory = CacheSize{int64_t(counters.memory_entries), int64_t(counters.memory_bytes), 0,
                     int64_t(compiler.cache().max_memory_bytes()), int64_t(counters.memory_evictions)};
}

namespace {

// The compilers by resolved directory, created on first use and never destroyed.
struct SharedCompilers {
  std::mutex mutex;
  std::map<std::string, CachedCompiler*> by_directory;
};
SharedCompilers& shared_compilers() {
  static auto* compilers = new SharedCompilers;  // never destroyed
  return *compilers;
}

}  // namespace

CachedCompiler& shared_compiler(const std::string& directory) {
  SharedCompilers& shared = shared_compilers();
  const std::string resolved = directory.empty() ? KernelCache::default_directory() : directory;
  std::lock_guard lock(shared.mutex);
  CachedCompiler*& compiler = shared.by_directory[resolved];
  if (!compiler) {
    CachedCompilerOptions options;
    options.cache.directory = resolved;
    options.backend = LlvmBackendOptions{false, false};
    compiler = new CachedCompiler(std::move(options));
  }
  return *compiler;
}

CachedCompiler* find_shared_compiler(const std::string& directory) {
  SharedCompilers& shared = shared_compilers();
  const std::string resolved = directory.empty() ? KernelCache::default_directory() : directory;
  std::lock_guard lock(shared.mutex);
  const auto it = shared.by_directory.find(resolved);
  return it == shared.by_directory.end() ? nullptr : it->second;
}

}  // namespace edb::jit
