// NVRTC through dlopen: finding the library, resolving EDB_NVRTC_SYMBOLS, compiling with the log.
#include "nvrtc/nvrtc_compiler.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "edbatch/errors.h"

namespace edb::nvrtc {

namespace {

constexpr const char* kLibraryNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

// Where to look, in order: the override alone when set, else the loader's path, then the toolkit's.
std::vector<std::string> candidates() {
  if (const char* path = std::getenv("EDB_NVRTC_LIBRARY"); path && *path) return {path};
  std::vector<std::string> out(std::begin(kLibraryNames), std::end(kLibraryNames));
  std::vector<std::string> directories;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(variable); root && *root) directories.push_back(std::string(root) + "/lib64");
  directories.push_back("/usr/local/cuda/lib64");
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/local/cuda/targets", error))
    directories.push_back(entry.path().string() + "/lib");
  for (const std::string& directory : directories)
    for (const char* name : kLibraryNames) out.push_back(directory + "/" + name);
  return out;
}

struct Loaded {
  Nvrtc* nvrtc = nullptr;
  std::string reason;
};

}  // namespace

Nvrtc* Nvrtc::get(std::string* reason) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& path : candidates()) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char* error = dlerror();
        // Only say why for files that exist: "not found" for every guess is noise.
        if (path.find('/') == std::string::npos || std::filesystem::exists(path))
          tried += "\n  " + path + ": " + (error ? error : "dlopen failed");
        continue;
      }
      auto* nvrtc = new Nvrtc();  // kept for the process: kernels compiled by it may be in use
      nvrtc->handle_ = handle;
      nvrtc->library_ = path;
      std::string missing;
#define EDB_NVRTC_RESOLVE(result, name, symbol, params)                      \
  nvrtc->name = reinterpret_cast<result(*) params>(dlsym(handle, symbol)); \
  if (!nvrtc->name) missing += std::string(missing.empty() ? "" : ", ") + symbol;
      EDB_NVRTC_SYMBOLS(EDB_NVRTC_RESOLVE)
#undef EDB_NVRTC_RESOLVE
      if (missing.empty()) {
        loaded.nvrtc = nvrtc;
        return;
      }
      tried += "\n  " + path + ": lacks " + missing;
      delete nvrtc;
      dlclose(handle);
    }
    loaded.reason = "NVRTC could not be loaded (set EDB_NVRTC_LIBRARY to libnvrtc.so's path); tried:" +
                    (tried.empty() ? std::string(" libnvrtc.so.13, .so.12, .so (not found)") : tried);
  });
  if (!loaded.nvrtc && reason) *reason = loaded.reason;
  return loaded.nvrtc;
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> Nvrtc::supported_archs() const {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != 0 || count <= 0) return {};
  std::vector<int> archs(size_t(count), 0);
  if (nvrtcGetSupportedArchs(archs.data()) != 0) return {};
  return archs;
}

CompiledImage Nvrtc::compile_for(const std::string& source, const std::string& name, const std::string& arch,
                                 bool cubin, int* error) const {
  const auto start = std::chrono::steady_clock::now();
  void* program = nullptr;
  auto fail = [&](const char* function, int result, const std::string& log) {
    const std::string text = std::string("NVRTC ") + function + " failed for kernel " + name + " (" + arch +
                             "): " + nvrtcGetErrorString(result) + (log.empty() ? "" : "\n" + log);
    if (program) nvrtcDestroyProgram(&program);
    throw InternalError(text);
  };
  int result = nvrtcCreateProgram(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (result != 0) fail("nvrtcCreateProgram", result, "");
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "--std=c++17", "-default-device"};
  result = nvrtcCompileProgram(program, int(std::size(options)), options);
  CompiledImage out;
  out.arch = arch;
  out.cubin = cubin;
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) == 0 && size > 1) {
    out.log.resize(size);
    nvrtcGetProgramLog(program, out.log.data());
    out.log.resize(size - 1);
  }
  if (result != 0) {
    if (error) {  // the caller may try another architecture
      *error = result;
      nvrtcDestroyProgram(&program);
      out.log = std::string(nvrtcGetErrorString(result)) + (out.log.empty() ? "" : ": " + out.log);
      return out;
    }
    fail("nvrtcCompileProgram", result, out.log);
  }
  if ((result = nvrtcGetPTXSize(program, &size)) == 0 && size > 0) {
    out.ptx.resize(size);
    if ((result = nvrtcGetPTX(program, out.ptx.data())) != 0) fail("nvrtcGetPTX", result, out.log);
    out.ptx.resize(size - 1);  // without its NUL; `image` keeps one
  }
  if (cubin) {
    if ((result = nvrtcGetCUBINSize(program, &size)) != 0) fail("nvrtcGetCUBINSize", result, out.log);
    out.image.resize(size);
    if ((result = nvrtcGetCUBIN(program, out.image.data())) != 0) fail("nvrtcGetCUBIN", result, out.log);
  } else {
    if (out.ptx.empty()) fail("nvrtcGetPTX", result, out.log);
    out.image = out.ptx + '\0';
  }
  nvrtcDestroyProgram(&program);
  if (error) *error = 0;
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

CompiledImage Nvrtc::compile(const std::string& source, const std::string& name, int major, int minor,
                             bool ptx_only) const {
  const int wanted = major * 10 + minor;
  const std::vector<int> archs = supported_archs();
  const bool supported = archs.empty() || std::find(archs.begin(), archs.end(), wanted) != archs.end();
  if (!ptx_only && supported) {
    int error = 0;
    CompiledImage image = compile_for(source, name, "sm_" + std::to_string(wanted), true, &error);
    if (error == 0) return image;
    // NVRTC_ERROR_INVALID_OPTION (5): this NVRTC cannot target the architecture; other errors are
    // in the source, and PTX would fail the same way.
    if (error != 5)
      throw InternalError("NVRTC nvrtcCompileProgram failed for kernel " + name + " (sm_" + std::to_string(wanted) +
                          "): " + image.log);
  }
  // PTX for the device's own virtual architecture, or the newest this NVRTC knows below it (the
  // driver compiles PTX of an older architecture for a newer device).
  int virtual_arch = wanted;
  if (!supported) {
    virtual_arch = 0;
    for (int arch : archs)
      if (arch <= wanted) virtual_arch = std::max(virtual_arch, arch);
    if (virtual_arch == 0)
      throw InternalError("NVRTC " + version() + " targets no architecture at or below compute capability " +
                          std::to_string(major) + "." + std::to_string(minor));
  }
  return compile_for(source, name, "compute_" + std::to_string(virtual_arch), false, nullptr);
}

}  // namespace edb::nvrtc
