// A stand-in libcuda for tests without a GPU (tests/emulated_gpu/README.md): one "device" whose
// memory is host memory and whose kernels are the CUDA C source the emulated NVRTC hands back, built
// as host C++ by this build's compiler when a module loads and run on the CPU: a block's threads as
// fibers on the launching thread that take turns at each __syncthreads (one after another when the
// kernel never synchronises), blocks one after another. Only the Driver API functions nvrtc/cuda_driver.h
// resolves, synchronous. Device memory is tracked: a copy or a kernel's pointer argument outside
// every live allocation fails (a host pointer passed as a device one), and fresh allocations hold
// NaNs, as a GPU's memory holds whatever was there.
#undef _FORTIFY_SOURCE  // its longjmp check refuses a jump between the fibers' stacks
#include <dlfcn.h>
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#ifndef EDB_EMULATED_CXX
#error "tests/CMakeLists.txt defines EDB_EMULATED_CXX: the compiler that builds the kernels"
#endif

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kInvalidImage = 200, kNotFound = 500,
                   kIllegalAddress = 700, kLaunchFailed = 719;

constexpr const char* kImageMark = "// edbatch emulated CUDA image\n";

// CUDA's names for host C++, before a module's source.
constexpr const char* kPrelude = R"(#include <math.h>
struct EdbDim { unsigned x = 0, y = 0, z = 0; };
static thread_local EdbDim threadIdx, blockIdx;
static EdbDim blockDim, gridDim;
static void (*edb_sync)(void*) = nullptr;
static void* edb_sync_state = nullptr;
#define __global__
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() edb_sync(edb_sync_state)
static inline float __int_as_float(unsigned bits) { float f; __builtin_memcpy(&f, &bits, 4); return f; }
extern "C" void edb_emulated_launch_dims(unsigned gx, unsigned gy, unsigned bx, unsigned by, void (*sync)(void*),
                                         void* state) {
  gridDim = {gx, gy, 1};
  blockDim = {bx, by, 1};
  edb_sync = sync;
  edb_sync_state = state;
}
extern "C" void edb_emulated_thread(unsigned tx, unsigned ty, unsigned bx, unsigned by) {
  threadIdx = {tx, ty, 0};
  blockIdx = {bx, by, 0};
}
)";

std::mutex memory_mutex;
std::map<uintptr_t, size_t> allocations;  // start -> bytes

// Whether [p, p + bytes) lies inside one live allocation.
bool on_device(uintptr_t p, size_t bytes) {
  std::lock_guard lock(memory_mutex);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

struct Module;

struct Kernel {
  Module* module = nullptr;
  std::string name;
  std::vector<std::string> types;  // parameter types
  bool syncs = false;              // its source calls __syncthreads
  void (*run)(void**) = nullptr;
};

struct Module {
  void* handle = nullptr;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
  void (*dims)(unsigned, unsigned, unsigned, unsigned, void (*)(void*), void*) = nullptr;
  void (*thread)(unsigned, unsigned, unsigned, unsigned) = nullptr;
};

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t begin = 0;
  while (begin < s.size() && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  return s.substr(begin);
}

// Each `extern "C" __global__ void NAME(PARAMETERS)` of the source: its name and parameter types.
std::vector<Kernel> kernels_of(const std::string& source) {
  std::vector<Kernel> out;
  const std::string head = "extern \"C\" __global__ void ";
  for (size_t at = source.find(head); at != std::string::npos; at = source.find(head, at + 1)) {
    const size_t open = source.find('(', at);
    Kernel kernel;
    kernel.name = trim(source.substr(at + head.size(), open - at - head.size()));
    const size_t close = source.find(')', open);
    std::stringstream parameters(source.substr(open + 1, close - open - 1));
    for (std::string parameter; std::getline(parameters, parameter, ',');) {
      parameter = trim(parameter);
      size_t name_begin = parameter.size();
      while (name_begin > 0 && (std::isalnum(static_cast<unsigned char>(parameter[name_begin - 1])) || parameter[name_begin - 1] == '_'))
        --name_begin;
      std::string type = trim(parameter.substr(0, name_begin));
      for (size_t r = type.find("__restrict__"); r != std::string::npos; r = type.find("__restrict__")) type.erase(r, 12);
      kernel.types.push_back(trim(type));
    }
    out.push_back(std::move(kernel));
  }
  return out;
}

// The module's source as host C++ with a runner per kernel: run_NAME(parameters) calls NAME with
// the values parameters[i] points at.
std::string host_source(const std::string& source, const std::vector<Kernel>& kernels) {
  std::ostringstream out;
  out << kPrelude << source << '\n';
  for (const Kernel& kernel : kernels) {
    out << "extern \"C\" void edb_emulated_run_" << kernel.name << "(void** p) {\n  " << kernel.name << "(";
    for (size_t i = 0; i < kernel.types.size(); ++i) {
      out << (i ? ", " : "") << "*reinterpret_cast<" << kernel.types[i] << "*>(p[" << i << "])";
    }
    out << ");\n}\n";
  }
  return out.str();
}

// Builds `cpp` into a shared object, kept in $EDB_EMULATED_GPU_CACHE (or a temp directory) by the
// hash of its text. Empty with `error` set when the compiler fails.
std::string build(const std::string& cpp, std::string& error) {
  const char* cache = std::getenv("EDB_EMULATED_GPU_CACHE");
  const std::filesystem::path directory = cache && *cache ? std::filesystem::path(cache) : std::filesystem::temp_directory_path();
  std::error_code ignored;
  std::filesystem::create_directories(directory, ignored);
  const std::string compiler = EDB_EMULATED_CXX, flags = "-std=c++17 -O1 -fPIC -shared -w";
  const size_t hash = std::hash<std::string>()(compiler + '\n' + flags + '\n' + cpp);
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016zx", hash);
  const std::filesystem::path library = directory / ("edb-emulated-" + std::string(hex) + ".so");
  if (std::filesystem::exists(library)) return library.string();
  const std::string stem = (directory / ("edb-emulated-" + std::string(hex) + "-" + std::to_string(getpid()))).string();
  std::ofstream(stem + ".cpp") << cpp;
  const std::string command =
      compiler + " " + flags + " -o '" + stem + ".so' '" + stem + ".cpp' > '" + stem + ".log' 2>&1";
  const int status = std::system(command.c_str());
  if (status != 0) {
    std::ifstream log(stem + ".log");
    std::stringstream text;
    text << log.rdbuf();
    error = command + "\n" + text.str();
    return "";
  }
  std::filesystem::rename(stem + ".so", library);  // whole, for another process reading the cache
  std::filesystem::remove(stem + ".cpp", ignored);
  std::filesystem::remove(stem + ".log", ignored);
  return library.string();
}

// A block's threads as fibers on the launching thread: each runs until it reaches a __syncthreads or
// returns, then the next; a round ends with every thread at the same barrier (OS threads spinning
// at a barrier by the hundred would swamp a small machine). A fiber starts on its own stack through
// makecontext and swapcontext; after that, switches are _setjmp and _longjmp, which save no signal
// mask (swapcontext's system call each way made a GEMM's thousands of barriers cost seconds).
struct Block {
  struct Fiber {
    ucontext_t context;
    jmp_buf at_barrier;
    char* stack = nullptr;  // kStack bytes of the launching thread's stacks, kept between launches
    bool started = false, done = false;
  };
  static constexpr size_t kStack = 64 * 1024;
  const Kernel* kernel = nullptr;
  void** parameters = nullptr;
  jmp_buf scheduler;
  std::vector<Fiber> fibers;
  size_t current = 0;
};
thread_local Block* running = nullptr;
thread_local std::vector<std::unique_ptr<char[]>> fiber_stacks;  // not zeroed: zeroing each launch's cost most of it

void fiber_sync(void*) {
  Block& block = *running;
  if (_setjmp(block.fibers[block.current].at_barrier) == 0) _longjmp(block.scheduler, 1);
}

void fiber_main() {
  Block& block = *running;
  block.kernel->run(block.parameters);
  block.fibers[block.current].done = true;
  _longjmp(block.scheduler, 1);
}

// Runs fiber `t` until its next barrier or its end.
void resume(Block& block, size_t t) {
  block.current = t;
  Block::Fiber& fiber = block.fibers[t];
  if (_setjmp(block.scheduler) != 0) return;
  if (fiber.started) _longjmp(fiber.at_barrier, 1);
  fiber.started = true;
  ucontext_t from;
  swapcontext(&from, &fiber.context);  // never returns here: the fiber comes back by _longjmp
}

CUresult launch(const Kernel& kernel, unsigned gx, unsigned gy, unsigned bx, unsigned by, void** parameters) {
  for (size_t i = 0; i < kernel.types.size(); ++i) {
    if (kernel.types[i].find('*') == std::string::npos) continue;
    uintptr_t value = 0;
    std::memcpy(&value, parameters[i], sizeof value);
    if (value != 0 && !on_device(value, 1)) {
      std::fprintf(stderr, "emulated libcuda: %s's parameter %zu (%s) is 0x%llx, in no device allocation\n",
                   kernel.name.c_str(), i, kernel.types[i].c_str(), static_cast<unsigned long long>(value));
      return kIllegalAddress;
    }
  }
  Module& module = *kernel.module;
  const unsigned threads = bx * by;
  if (!kernel.syncs) {  // no thread waits for another: one after another
    module.dims(gx, gy, bx, by, nullptr, nullptr);
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x)
        for (unsigned t = 0; t < threads; ++t) {
          module.thread(t % bx, t / bx, x, y);
          kernel.run(parameters);
        }
    return kSuccess;
  }
  Block block;
  block.kernel = &kernel;
  block.parameters = parameters;
  block.fibers.resize(threads);
  while (fiber_stacks.size() < threads) fiber_stacks.emplace_back(new char[Block::kStack]);
  for (unsigned t = 0; t < threads; ++t) block.fibers[t].stack = fiber_stacks[t].get();
  Block* const outer = running;
  running = &block;
  module.dims(gx, gy, bx, by, fiber_sync, nullptr);
  CUresult result = kSuccess;
  for (unsigned y = 0; y < gy && result == kSuccess; ++y)
    for (unsigned x = 0; x < gx && result == kSuccess; ++x) {
      for (Block::Fiber& fiber : block.fibers) {
        getcontext(&fiber.context);
        fiber.context.uc_stack.ss_sp = fiber.stack;
        fiber.context.uc_stack.ss_size = Block::kStack;
        fiber.context.uc_link = nullptr;  // fiber_main never returns
        fiber.started = fiber.done = false;
        makecontext(&fiber.context, fiber_main, 0);
      }
      for (bool alive = true; alive;) {  // one round: every live thread to its next barrier
        unsigned finished = 0;
        for (unsigned t = 0; t < threads; ++t) {
          if (block.fibers[t].done) {
            ++finished;
            continue;
          }
          module.thread(t % bx, t / bx, x, y);
          resume(block, t);
          finished += block.fibers[t].done;
        }
        alive = finished < threads;
        if (alive && finished > 0) {
          std::fprintf(stderr, "emulated libcuda: in %s, block (%u, %u): %u of %u threads returned while the rest wait at "
                       "a __syncthreads\n", kernel.name.c_str(), x, y, finished, threads);
          result = kLaunchFailed;
          break;
        }
      }
    }
  running = outer;
  return result;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int) { return kSuccess; }
CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}
CUresult cuGetErrorName(CUresult error, const char** name) {
  *name = error == kSuccess ? "CUDA_SUCCESS" : nullptr;
  return error == kSuccess ? kSuccess : kInvalidValue;  // the caller names the rest itself
}
CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = error == kSuccess ? "no error" : "edbatch's emulated libcuda (see its message on stderr)";
  return kSuccess;
}
CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* device, int ordinal) {
  if (ordinal != 0) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *device = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int length, int) {
  std::snprintf(name, size_t(length), "%s", "edbatch emulated GPU (host C++)");
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, int) {
  switch (attribute) {
    case 16: *value = 2; return kSuccess;   // multiprocessors
    case 75: *value = 8; return kSuccess;   // compute capability 8.0
    case 76: *value = 0; return kSuccess;
    default: return kInvalidValue;
  }
}
CUresult cuDevicePrimaryCtxRetain(void** context, int) {
  static int primary;
  *context = &primary;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
CUresult cuCtxSetCurrent(void*) { return kSuccess; }
CUresult cuStreamCreate(void** stream, unsigned int) {
  static int only;
  *stream = &only;
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void*) { return kSuccess; }
CUresult cuStreamSynchronize(void*) { return kSuccess; }

CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* memory = std::aligned_alloc(256, rounded);
  if (!memory) return kOutOfMemory;
  const uint32_t nan = 0x7fc00000;
  for (size_t i = 0; i + 4 <= rounded; i += 4) std::memcpy(static_cast<char*>(memory) + i, &nan, 4);
  std::lock_guard lock(memory_mutex);
  allocations[reinterpret_cast<uintptr_t>(memory)] = bytes;
  *pointer = reinterpret_cast<uintptr_t>(memory);
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr pointer) {
  std::lock_guard lock(memory_mutex);
  auto it = allocations.find(uintptr_t(pointer));
  if (it == allocations.end()) {
    std::fprintf(stderr, "emulated libcuda: cuMemFree of 0x%llx, which is no allocation\n", pointer);
    return kInvalidValue;
  }
  allocations.erase(it);
  std::free(reinterpret_cast<void*>(pointer));
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr to, const void* from, size_t bytes, void*) {
  if (!on_device(to, bytes)) {
    std::fprintf(stderr, "emulated libcuda: cuMemcpyHtoD of %zu bytes to 0x%llx, outside device memory\n", bytes, to);
    return kIllegalAddress;
  }
  std::memcpy(reinterpret_cast<void*>(to), from, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoHAsync_v2(void* to, CUdeviceptr from, size_t bytes, void*) {
  if (!on_device(from, bytes)) {
    std::fprintf(stderr, "emulated libcuda: cuMemcpyDtoH of %zu bytes from 0x%llx, outside device memory\n", bytes, from);
    return kIllegalAddress;
  }
  std::memcpy(to, reinterpret_cast<const void*>(from), bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr to, CUdeviceptr from, size_t bytes, void*) {
  if (!on_device(to, bytes) || !on_device(from, bytes)) {
    std::fprintf(stderr, "emulated libcuda: cuMemcpyDtoD of %zu bytes, 0x%llx to 0x%llx, outside device memory\n", bytes,
                 from, to);
    return kIllegalAddress;
  }
  std::memmove(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
  return kSuccess;
}

CUresult cuModuleLoadData(void** out, const void* image) {
  const std::string text = static_cast<const char*>(image);
  if (text.rfind(kImageMark, 0) != 0) {
    std::fprintf(stderr, "emulated libcuda: an image not made by the emulated NVRTC\n");
    return kInvalidImage;
  }
  const std::string source = text.substr(std::strlen(kImageMark));
  auto module = std::make_unique<Module>();
  std::vector<Kernel> kernels = kernels_of(source);
  std::string error;
  const std::string library = build(host_source(source, kernels), error);
  if (library.empty()) {
    std::fprintf(stderr, "emulated libcuda: the module's source does not build as host C++:\n%s\n", error.c_str());
    return kInvalidImage;
  }
  module->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!module->handle) {
    std::fprintf(stderr, "emulated libcuda: dlopen %s: %s\n", library.c_str(), dlerror());
    return kInvalidImage;
  }
  module->dims = reinterpret_cast<decltype(module->dims)>(dlsym(module->handle, "edb_emulated_launch_dims"));
  module->thread = reinterpret_cast<decltype(module->thread)>(dlsym(module->handle, "edb_emulated_thread"));
  for (Kernel& kernel : kernels) {
    kernel.run = reinterpret_cast<void (*)(void**)>(dlsym(module->handle, ("edb_emulated_run_" + kernel.name).c_str()));
    kernel.syncs = source.find("__syncthreads") != std::string::npos;
    kernel.module = module.get();
    const std::string name = kernel.name;
    module->kernels[name] = std::make_unique<Kernel>(std::move(kernel));
  }
  *out = module.release();
  return kSuccess;
}
CUresult cuModuleUnload(void* handle) {
  auto* module = static_cast<Module*>(handle);
  if (module->handle) dlclose(module->handle);
  delete module;
  return kSuccess;
}
CUresult cuModuleGetFunction(void** function, void* handle, const char* name) {
  auto* module = static_cast<Module*>(handle);
  auto it = module->kernels.find(name);
  if (it == module->kernels.end() || !it->second->run) return kNotFound;
  *function = it->second.get();  // a function is its kernel, which knows its module
  return kSuccess;
}
CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared_bytes, void*, void** parameters, void** extra) {
  if (gz != 1 || bz != 1 || shared_bytes != 0 || extra || gx == 0 || gy == 0 || bx == 0 || by == 0 || bx * by > 1024)
    return kInvalidValue;
  const CUresult result = launch(*static_cast<const Kernel*>(function), gx, gy, bx, by, parameters);
  return result == kSuccess ? kSuccess : result == kIllegalAddress ? kIllegalAddress : kLaunchFailed;
}

}  // extern "C"
