// The executors selectable by name.
#include <algorithm>
#include <cstdio>
#include <mutex>

#include "edbatch/errors.h"
#include "nvrtc/cuda_driver.h"
#include "runtime/batched.h"
#include "runtime/cuda_executor.h"
#include "runtime/executor.h"
#include "runtime/jit_executor.h"

namespace edb::runtime {

std::vector<std::string> executor_names() { return {"reference", "batched", "jit"}; }

namespace {

std::string unknown_executor(std::string_view name) {
  std::string known;
  for (const std::string& n : executor_names()) known += (known.empty() ? "" : ", ") + n;
  return "edb::Engine: unknown executor '" + std::string(name) + "' (available: " + known + ")";
}

}  // namespace

std::optional<Capabilities> executor_capabilities(std::string_view name) {
  if (name == "reference") return ReferenceExecutor::kCapabilities;
  if (name == "batched") return BatchedExecutor::kCapabilities;
  if (name == "jit") return JitExecutor::kCapabilities;
  return std::nullopt;
}

std::unique_ptr<Executor> make_executor(std::string_view name, int threads, const std::string& cache_directory) {
  if (threads < 1) throw UsageError("edb::Engine: threads must be at least 1, got " + std::to_string(threads));
  if (name == "reference") {
    if (threads != 1)
      throw UsageError("edb::Engine: threads = " + std::to_string(threads) +
                       ", but the reference executor runs on one thread only");
    return std::make_unique<ReferenceExecutor>();
  }
  if (name == "batched") return std::make_unique<BatchedExecutor>(threads);
  if (name == "jit") return std::make_unique<JitExecutor>(threads, cache_directory);
  throw UsageError(unknown_executor(name));
}

// Devices (issue #8): cpu, cuda, and auto, which falls back to the CPU with one line saying why.
std::vector<std::string> device_names() { return {"cpu", "cuda", "auto"}; }

std::unique_ptr<Executor> make_device_executor(const std::string& device, std::string_view executor, int threads,
                                               const std::string& cache_directory, std::string& resolved) {
  if (device != "cpu" && device != "cuda" && device != "auto")
    throw UsageError("edb::Engine: device '" + device + "' is not available in this build (available: cpu, cuda, auto)");
  resolved = "cpu";
  if (device == "cpu") return make_executor(executor, threads, cache_directory);
  const std::vector<std::string> names = executor_names();
  if (std::find(names.begin(), names.end(), executor) == names.end() || threads < 1)
    return make_executor(executor, threads, cache_directory);  // throws the CPU's UsageError
  std::string reason = "the reference executor runs on the CPU only";
  if (executor != "reference") {
    const nvrtc::DeviceProbe probe = nvrtc::probe_device();
    if (probe.usable) {
      resolved = "cuda";
      return std::make_unique<CudaExecutor>(cache_directory, std::string(), executor_capabilities(executor)->lowers_cells);
    }
    reason = probe.reason;
  }
  if (device == "cuda") throw UsageError("edb::Engine: device 'cuda' is not usable: " + reason);
  static std::once_flag said;
  std::call_once(said, [&] { std::fprintf(stderr, "edbatch: device auto: running on the CPU (%s)\n", reason.c_str()); });
  return make_executor(executor, threads, cache_directory);
}

}  // namespace edb::runtime
