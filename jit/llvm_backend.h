// The LLVM backend: a kernel IR kernel compiled to native code for the host CPU with ORC LLJIT at
// O3, its element loop vectorised, tanh / sigmoid / exp inlined as polynomials (no libm calls).
// The object code of each kernel is kept, so a KernelCache can store it and a later process load it
// without optimising or generating code again (jit/cached_compiler.h). No LLVM types here.
#pragma once

#include <memory>
#include <string>

#include "jit/cell_program.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"

namespace edb::jit {

// The compiled function: `extern "C" void edb_kernel_<hex>(const KernelArgs*)`; a compiled cell
// program's takes `const CellArgs*` instead (CompiledKernel::cell()).
using KernelFunction = void (*)(const KernelArgs*);
using CellFunction = void (*)(const CellArgs*);

// A compiled kernel; it keeps its JIT and its code alive however long it is held.
struct CompiledKernel {
  KernelFunction function = nullptr;
  KernelKey key;            // kernel_key(description, "llvm", target, flags)
  std::string description;  // describe(kernel)
  std::string target;       // host CPU name
  std::string flags;        // llvm_kernel_flags()
  std::string ir;           // optimised LLVM IR text (when LlvmBackendOptions::keep_ir)
  std::string assembly;     // assembly text (when LlvmBackendOptions::keep_assembly)
  std::string object;       // the relocatable object file the JIT linked (ELF on Linux)
  double compile_ms = 0;    // IR building, optimisation and code generation (for a loaded kernel:
                            // the time its entry records)
  std::shared_ptr<void> keep_alive;

  void operator()(const KernelArgs& args) const { function(&args); }
  // The entry point of a kernel compiled from a CellProgram (its description starts "cell ").
  CellFunction cell() const { return reinterpret_cast<CellFunction>(function); }
  std::string symbol() const { return key.symbol(); }
};

struct LlvmBackendOptions {
  bool keep_ir = true;         // print the optimised module into CompiledKernel::ir
  bool keep_assembly = false;  // run the code generator a second time for CompiledKernel::assembly
  // Kernels the backend keeps linked for a later compile or load of the same key, least recently
  // used out first past this; a kernel's code leaves the JIT once no CompiledKernel holds it.
  size_t max_kernels = 4096;
  // Append each kernel's functions to perf's map of JIT code (perf_map_path()) as it is linked, so
  // `perf report` names samples in compiled kernels ("edb_kernel_HEX cell NAME", a stage's
  // epilogue as "edb_kernel_HEX.stage0_epilogue_t1 cell NAME"). Also on when the environment
  // variable EDB_PERF_MAP is set to anything but "" or "0" when the backend is made.
  bool perf_map = false;
};

// /tmp/perf-PID.map of this process: where perf looks for the names of JIT code.
std::string perf_map_path();

// What goes into a key besides the text, the CPU and the build's code_identity() (which changes
// with any source of jit/, so nothing here is bumped by hand): the optimisation level and the
// host features and the ISA they were narrowed to.
std::string llvm_kernel_flags();

// Floats per vector register in compiled cell programs on this host (16 with AVX-512, 8 with
// AVX, else 4): the row tile of their packed weights (jit::pack_weight).
int32_t cell_vector_floats();
// A cell program's row tiles (rows / cell_vector_floats(), rounded up), and where a tile range
// (CellArgs::tile_begin) may begin: at a multiple of the step, so that every stage's register
// blocks of tiles stay whole; a range ends at a multiple of it or at the last tile.
int64_t cell_tiles(const CellProgram& program);
int64_t cell_tile_step(const CellProgram& program);

// One JIT per backend object; compiling a kernel it already holds returns the same code.
// Thread-safe. Throws InternalError (with LLVM's message) when LLVM rejects the module.
class LlvmBackend {
 public:
  explicit LlvmBackend(LlvmBackendOptions options = {});
  ~LlvmBackend();
  LlvmBackend(const LlvmBackend&) = delete;
  LlvmBackend& operator=(const LlvmBackend&) = delete;

  CompiledKernel compile(const Kernel& kernel);
  // The same for a cell program: one kernel over a batch of calls (jit/cell_program.h).
  CompiledKernel compile(const CellProgram& program);
  // Links a cached kernel's object into the JIT without optimising or generating code. Throws
  // InternalError (with LLVM's message) when the entry is not this backend's (backend, target,
  // flags or key differ) or its object does not load or lacks the kernel's symbol; the JIT is
  // then as before, so compiling the kernel afterwards still works.
  CompiledKernel load(const KernelEntry& entry);
  size_t kernels() const;  // kernels the backend keeps now (at most max_kernels)
  struct Sizes {
    size_t kernels = 0, bytes = 0, max_kernels = 0;  // bytes: their objects and texts
    int64_t evictions = 0;
  };
  Sizes sizes() const;

 private:
  struct State;
  template <typename Render>
  CompiledKernel compile_described(std::string description, Render&& render);
  LlvmBackendOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace edb::jit
