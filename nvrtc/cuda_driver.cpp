// The Driver API through dlopen: loading libcuda, resolving EDB_CUDA_DRIVER_SYMBOLS, detection with
// a reason, and the device's memory, modules and launches.
#include "nvrtc/cuda_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

#include "edbatch/errors.h"

namespace edb::nvrtc {

namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kStubLibrary = 34;         // CUDA_ERROR_STUB_LIBRARY
constexpr CUresult kInsufficientDriver = 35;  // CUDA_ERROR_INSUFFICIENT_DRIVER
constexpr CUresult kNoDevice = 100;           // CUDA_ERROR_NO_DEVICE

// Names for the errors we expect, for drivers (and the stub) whose cuGetErrorName fails too.
const char* known_error_name(CUresult result) {
  switch (result) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 46: return "CUDA_ERROR_DEVICES_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

std::vector<std::string> candidates(const std::string& library) {
  if (!library.empty()) return {library};
  if (const char* path = std::getenv("EDB_CUDA_LIBRARY"); path && *path) return {path};
  return {"libcuda.so.1", "libcuda.so"};
}

struct LoadResult {
  std::unique_ptr<CudaDriver> driver;
  std::string reason;
};

LoadResult load(const std::string& path) {
  LoadResult result;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    result.reason = "cannot load " + path + " (" + (error ? error : "dlopen failed") + ")";
    return result;
  }
  auto driver = std::make_unique<CudaDriver>();
  driver->library = path;
  std::string missing;
#define EDB_CUDA_DRIVER_RESOLVE(name, symbol, params)                      \
  driver->name = reinterpret_cast<CUresult(*) params>(dlsym(handle, symbol)); \
  if (!driver->name) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  EDB_CUDA_DRIVER_SYMBOLS(EDB_CUDA_DRIVER_RESOLVE)
#undef EDB_CUDA_DRIVER_RESOLVE
  if (!missing.empty()) {
    result.reason = path + " lacks " + missing + " (an NVIDIA driver too old for this build?)";
    dlclose(handle);
    return result;
  }
  result.driver = std::move(driver);
  return result;
}

}  // namespace

std::string CudaDriver::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName(result, &name) != kSuccess || !name) name = known_error_name(result);
  if (cuGetErrorString(result, &text) != kSuccess) text = nullptr;
  std::string out = name ? name : "CUDA error " + std::to_string(result);
  if (text && *text) out += std::string(" (") + text + ")";
  return out;
}

void CudaDriver::check(CUresult result, const char* function) const {
  if (result != kSuccess) throw InternalError(std::string("CUDA ") + function + " failed: " + describe(result));
}

const CudaDriver* load_driver(const std::string& library, std::string* reason) {
  // Loaded libraries by path, kept for the process: functions from them may be called until exit.
  static std::mutex mutex;
  static std::map<std::string, LoadResult> loaded;
  std::lock_guard lock(mutex);
  std::string reasons;
  for (const std::string& path : candidates(library)) {
    auto [it, inserted] = loaded.try_emplace(path);
    if (inserted) it->second = load(path);
    if (it->second.driver) return it->second.driver.get();
    reasons += (reasons.empty() ? "" : "; ") + it->second.reason;
  }
  if (reason) *reason = "no NVIDIA driver: " + reasons;
  return nullptr;
}

DeviceProbe probe_device(const std::string& library) {
  DeviceProbe probe;
  const CudaDriver* driver = load_driver(library, &probe.reason);
  if (!driver) return probe;
  probe.library = driver->library;
  const CUresult init = driver->cuInit(0);
  if (init == kStubLibrary) {
    probe.reason = driver->library + " is the CUDA toolkit's stub libcuda, not an NVIDIA driver (cuInit: " +
                   driver->describe(init) + ")";
    return probe;
  }
  if (init == kNoDevice) {
    probe.reason = "no CUDA device (cuInit: " + driver->describe(init) + ")";
    return probe;
  }
  if (init == kInsufficientDriver) {
    probe.reason = "the NVIDIA driver is too old (cuInit: " + driver->describe(init) + ")";
    return probe;
  }
  if (init != kSuccess) {
    probe.reason = "cuInit failed: " + driver->describe(init);
    return probe;
  }
  driver->cuDriverGetVersion(&probe.driver_version);
  int count = 0;
  if (const CUresult r = driver->cuDeviceGetCount(&count); r != kSuccess) {
    probe.reason = "cuDeviceGetCount failed: " + driver->describe(r);
    return probe;
  }
  if (count == 0) {
    probe.reason = "no CUDA device (the driver found none)";
    return probe;
  }
  CUdevice device = 0;
  char name[256] = {};
  CUresult r = driver->cuDeviceGet(&device, 0);
  if (r == kSuccess) r = driver->cuDeviceGetName(name, int(sizeof name) - 1, device);
  if (r == kSuccess) r = driver->cuDeviceGetAttribute(&probe.major, kAttributeComputeCapabilityMajor, device);
  if (r == kSuccess) r = driver->cuDeviceGetAttribute(&probe.minor, kAttributeComputeCapabilityMinor, device);
  if (r == kSuccess) r = driver->cuDeviceGetAttribute(&probe.multiprocessors, kAttributeMultiprocessorCount, device);
  if (r != kSuccess) {
    probe.reason = "querying CUDA device 0 failed: " + driver->describe(r);
    return probe;
  }
  probe.name = name;
  probe.usable = true;
  return probe;
}

CudaDevice::CudaDevice(const std::string& library) : probe_(probe_device(library)) {
  if (!probe_.usable) throw UsageError("edb::Engine: device 'cuda' is not usable: " + probe_.reason);
  driver_ = load_driver(library, nullptr);
  driver_->check(driver_->cuDeviceGet(&device_, 0), "cuDeviceGet");
  driver_->check(driver_->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  make_current();
  const CUresult r = driver_->cuStreamCreate(&stream_, 1 /* CU_STREAM_NON_BLOCKING */);
  if (r != kSuccess) {
    driver_->cuDevicePrimaryCtxRelease(device_);
    driver_->check(r, "cuStreamCreate");
  }
}

CudaDevice::~CudaDevice() {
  // Nothing here may throw; errors at teardown are ignored.
  driver_->cuCtxSetCurrent(context_);
  driver_->cuStreamSynchronize(stream_);
  for (const auto& [module, function] : modules_) driver_->cuModuleUnload(module);
  driver_->cuStreamDestroy(stream_);
  driver_->cuDevicePrimaryCtxRelease(device_);
}

// The context is per thread: the executor may run on the caller's thread or a queue's.
void CudaDevice::make_current() { driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

CUdeviceptr CudaDevice::allocate(size_t bytes) {
  make_current();
  CUdeviceptr pointer = 0;
  driver_->check(driver_->cuMemAlloc(&pointer, bytes == 0 ? 1 : bytes), "cuMemAlloc_v2");
  return pointer;
}

void CudaDevice::release(CUdeviceptr pointer) {
  if (!pointer) return;
  make_current();
  driver_->check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
  driver_->check(driver_->cuMemFree(pointer), "cuMemFree_v2");
}

void CudaDevice::upload(CUdeviceptr to, const void* from, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  // From pageable memory the driver stages the bytes before returning, so `from` may be reused.
  driver_->check(driver_->cuMemcpyHtoDAsync(to, from, bytes, stream_), "cuMemcpyHtoDAsync_v2");
}

void CudaDevice::download(void* to, CUdeviceptr from, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  driver_->check(driver_->cuMemcpyDtoHAsync(to, from, bytes, stream_), "cuMemcpyDtoHAsync_v2");
  driver_->check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void CudaDevice::copy(CUdeviceptr to, CUdeviceptr from, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  driver_->check(driver_->cuMemcpyDtoDAsync(to, from, bytes, stream_), "cuMemcpyDtoDAsync_v2");
}

CUfunction CudaDevice::load_function(const std::string& image, const std::string& symbol) {
  make_current();
  CUmodule module = nullptr;
  driver_->check(driver_->cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
  CUfunction function = nullptr;
  const CUresult r = driver_->cuModuleGetFunction(&function, module, symbol.c_str());
  modules_.emplace_back(module, r == kSuccess ? function : nullptr);
  if (r != kSuccess)
    throw InternalError("CUDA cuModuleGetFunction(" + symbol + ") failed: " + driver_->describe(r));
  return function;
}

void CudaDevice::unload_function(CUfunction function) {
  auto it = std::find_if(modules_.begin(), modules_.end(), [&](const auto& loaded) { return loaded.second == function; });
  if (it == modules_.end()) throw InternalError("CudaDevice::unload_function: a function this device did not load");
  make_current();
  driver_->check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize");  // a queued launch may still run it
  driver_->check(driver_->cuModuleUnload(it->first), "cuModuleUnload");
  modules_.erase(it);
}

void CudaDevice::launch(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y,
                        void** parameters) {
  make_current();
  driver_->check(driver_->cuLaunchKernel(function, grid_x, grid_y, 1, block_x, block_y, 1, 0, stream_, parameters, nullptr),
                 "cuLaunchKernel");
}

void CudaDevice::synchronize() {
  make_current();
  driver_->check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

}  // namespace edb::nvrtc
