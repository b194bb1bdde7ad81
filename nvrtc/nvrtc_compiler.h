// NVRTC loaded with dlopen (never linked): CUDA C source to a cubin for one compute capability, or
// to PTX. Needs no GPU, so compile tests run on any machine with the toolkit's libnvrtc.
#pragma once

#include <string>
#include <vector>

namespace edb::nvrtc {

// Every NVRTC function we call, once: return type, our name, the exported symbol, parameters.
// NVRTC exports no versioned names today; the symbol column is where one would go. Programs are
// opaque pointers and results ints (nvrtcResult), so no toolkit header is needed to build this.
#define EDB_NVRTC_SYMBOLS(X)                                                                          \
  X(int, nvrtcVersion, "nvrtcVersion", (int* major, int* minor))                                     \
  X(const char*, nvrtcGetErrorString, "nvrtcGetErrorString", (int result))                           \
  X(int, nvrtcCreateProgram, "nvrtcCreateProgram",                                                   \
    (void** program, const char* source, const char* name, int headers, const char* const* contents, \
     const char* const* include_names))                                                               \
  X(int, nvrtcDestroyProgram, "nvrtcDestroyProgram", (void** program))                               \
  X(int, nvrtcCompileProgram, "nvrtcCompileProgram", (void* program, int options, const char* const* values)) \
  X(int, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", (void* program, size_t* size))            \
  X(int, nvrtcGetProgramLog, "nvrtcGetProgramLog", (void* program, char* log))                       \
  X(int, nvrtcGetPTXSize, "nvrtcGetPTXSize", (void* program, size_t* size))                          \
  X(int, nvrtcGetPTX, "nvrtcGetPTX", (void* program, char* ptx))                                     \
  X(int, nvrtcGetCUBINSize, "nvrtcGetCUBINSize", (void* program, size_t* size))                      \
  X(int, nvrtcGetCUBIN, "nvrtcGetCUBIN", (void* program, char* cubin))                               \
  X(int, nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", (int* count))                       \
  X(int, nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", (int* archs))

// What came out of one compilation.
struct CompiledImage {
  std::string image;      // cubin bytes, or PTX text (NUL-terminated, as cuModuleLoadData wants)
  bool cubin = false;     // false: `image` is PTX, for the driver to compile at load
  std::string arch;       // the --gpu-architecture it was compiled for: "sm_90" or "compute_90"
  std::string ptx;        // the PTX (also beside a cubin), for `edb-cache show` and tests
  std::string log;        // NVRTC's log (warnings), often empty
  double compile_ms = 0;
};

// The process's NVRTC, loaded at first use from $EDB_NVRTC_LIBRARY if set, else libnvrtc.so.13,
// .so.12, .so on the loader's path, else the same names in $CUDA_HOME/lib64, $CUDA_PATH/lib64,
// /usr/local/cuda/lib64 and /usr/local/cuda/targets/*-linux/lib. Thread-safe.
class Nvrtc {
 public:
  // The loaded library, or nullptr with `reason` saying which files were tried and why each failed.
  static Nvrtc* get(std::string* reason = nullptr);

  std::string version() const;  // "13.0"
  std::string library() const { return library_; }
  std::vector<int> supported_archs() const;  // e.g. 75, 80, ..., 120: real architectures it targets

  // Compiles `source` (whose kernel is `name`, for messages) for compute capability
  // major.minor: a cubin for sm_XY, or with `ptx_only` (or when this NVRTC refuses sm_XY, e.g. a
  // device newer than the toolkit) PTX for compute_XY, or for the newest virtual architecture it
  // supports below that. Throws InternalError with NVRTC's error name and log when the source does
  // not compile (the renderer's fault, not the caller's).
  CompiledImage compile(const std::string& source, const std::string& name, int major, int minor,
                        bool ptx_only = false) const;

 private:
  Nvrtc() = default;
  CompiledImage compile_for(const std::string& source, const std::string& name, const std::string& arch,
                            bool cubin, int* error) const;
  void* handle_ = nullptr;
  std::string library_;

 public:
  // The loaded functions (all present once get() returned the library).
#define EDB_NVRTC_POINTER(result, name, symbol, params) result(*name) params = nullptr;
  EDB_NVRTC_SYMBOLS(EDB_NVRTC_POINTER)
#undef EDB_NVRTC_POINTER
};

}  // namespace edb::nvrtc
