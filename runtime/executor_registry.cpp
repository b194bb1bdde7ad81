// The executors selectable by name.
#include "edbatch/errors.h"
#include "runtime/batched.h"
#include "runtime/executor.h"

namespace edb::runtime {

std::vector<std::string> executor_names() { return {"reference", "batched", "jit"}; }

std::unique_ptr<Executor> make_executor(std::string_view name, int threads, const std::string& cache_directory) {
  if (threads < 1) throw UsageError("edb::Engine: threads must be at least 1, got " + std::to_string(threads));
  if (name == "reference") {
    if (threads != 1)
      throw UsageError("edb::Engine: threads = " + std::to_string(threads) +
                       ", but the reference executor runs on one thread only");
    return std::make_unique<ReferenceExecutor>();
  }
  if (name == "batched") return std::make_unique<BatchedExecutor>(threads);
  if (name == "jit") return std::make_unique<BatchedExecutor>(threads, true, cache_directory);
  std::string known;
  for (const std::string& n : executor_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("edb::Engine: unknown executor '" + std::string(name) + "' (available: " + known + ")");
}

}  // namespace edb::runtime
