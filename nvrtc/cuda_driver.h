// The CUDA Driver API loaded with dlopen (never linked): device detection that says why there is
// no usable GPU, and CudaDevice (primary context, one stream, memory, modules, launches). The
// types are declared here as the driver's ABI has them, so building needs no toolkit header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace edb::nvrtc {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

inline constexpr int kAttributeMultiprocessorCount = 16;       // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr int kAttributeComputeCapabilityMajor = 75;    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
inline constexpr int kAttributeComputeCapabilityMinor = 76;    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

// Every driver function we call, once: our name, the exported (versioned) symbol, parameters.
// All return CUresult. Versioned names are those cuda.h maps the plain names to.
#define EDB_CUDA_DRIVER_SYMBOLS(X)                                                                  \
  X(cuInit, "cuInit", (unsigned int flags))                                                        \
  X(cuDriverGetVersion, "cuDriverGetVersion", (int* version))                                      \
  X(cuGetErrorName, "cuGetErrorName", (CUresult error, const char** name))                         \
  X(cuGetErrorString, "cuGetErrorString", (CUresult error, const char** text))                     \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int* count))                                            \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice * device, int ordinal))                                  \
  X(cuDeviceGetName, "cuDeviceGetName", (char* name, int length, CUdevice device))                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int* value, int attribute, CUdevice device))    \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * context, CUdevice device))  \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice device))                  \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext context))                                       \
  X(cuStreamCreate, "cuStreamCreate", (CUstream * stream, unsigned int flags))                     \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream stream))                                      \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream stream))                                 \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * pointer, size_t bytes))                            \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr pointer))                                              \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr to, const void* from, size_t bytes, CUstream stream)) \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void* to, CUdeviceptr from, size_t bytes, CUstream stream))       \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr to, CUdeviceptr from, size_t bytes, CUstream stream)) \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule * module, const void* image))                  \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule module))                                           \
  X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction * function, CUmodule module, const char* name)) \
  X(cuLaunchKernel, "cuLaunchKernel",                                                              \
    (CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,     \
     unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** parameters, void** extra))

// One loaded libcuda. Kept for the process once loaded (never dlclose'd).
struct CudaDriver {
  std::string library;  // the path or name it was loaded from
#define EDB_CUDA_DRIVER_POINTER(name, symbol, params) CUresult(*name) params = nullptr;
  EDB_CUDA_DRIVER_SYMBOLS(EDB_CUDA_DRIVER_POINTER)
#undef EDB_CUDA_DRIVER_POINTER

  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the driver's words where it gives them, else ours.
  std::string describe(CUresult result) const;
  // InternalError "CUDA FUNCTION failed: NAME (text)" unless result is CUDA_SUCCESS.
  void check(CUresult result, const char* function) const;
};

// The libcuda to load: `library` if given, else $EDB_CUDA_LIBRARY, else libcuda.so.1, libcuda.so.
// nullptr with `reason` when none loads or one lacks a symbol. Thread-safe; one load per path.
const CudaDriver* load_driver(const std::string& library, std::string* reason);

// Whether device 0 can run kernels, and if not, why: no libcuda, the toolkit's stub libcuda (its
// cuInit returns CUDA_ERROR_STUB_LIBRARY), a driver too old, no device. Never throws.
struct DeviceProbe {
  bool usable = false;
  std::string reason;   // when not usable: one line naming the cause
  std::string library;  // the libcuda that was loaded, if one was
  std::string name;     // device 0's name
  int major = 0, minor = 0;
  int multiprocessors = 0;
  int driver_version = 0;  // e.g. 13000
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }
};
DeviceProbe probe_device(const std::string& library = {});

// Device 0 with its primary context and one stream; every copy and launch goes to that stream in
// order. Not thread-safe: one executor owns one device object. Failures throw InternalError
// naming the driver function and the decoded error.
class CudaDevice {
 public:
  // UsageError with probe_device's reason when there is no usable device.
  explicit CudaDevice(const std::string& library = {});
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const DeviceProbe& probe() const { return probe_; }
  const CudaDriver& driver() const { return *driver_; }

  CUdeviceptr allocate(size_t bytes);
  void release(CUdeviceptr pointer);
  void upload(CUdeviceptr to, const void* from, size_t bytes);    // `from` may be reused on return
  void download(void* to, CUdeviceptr from, size_t bytes);        // waits for the stream
  void copy(CUdeviceptr to, CUdeviceptr from, size_t bytes);
  // Loads a cubin or NUL-terminated PTX image and returns its function `symbol`; the module stays
  // loaded until unload_function or while the device lives.
  CUfunction load_function(const std::string& image, const std::string& symbol);
  // Unloads the module of a function load_function returned, once the stream's work is done.
  void unload_function(CUfunction function);
  void launch(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y,
              void** parameters);
  void synchronize();

 private:
  void make_current();
  DeviceProbe probe_;
  const CudaDriver* driver_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<std::pair<CUmodule, CUfunction>> modules_;  // each loaded module and its function
};

}  // namespace edb::nvrtc
