// EngineOptions::cache_directory: a jit engine keeps its compiled kernels in the directory it is
// given (not in $EDB_CACHE_DIR), engines on two directories each compile and store their own, and
// an engine on a warm directory compiles nothing; values equal the batched executor's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <edbatch/edbatch.h>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace edb {
namespace {

namespace fs = std::filesystem;
using edb::testing::TempDir;

size_t kernel_files(const std::string& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (const auto& file : fs::directory_iterator(dir)) n += file.path().extension() == ".kernel";
  return n;
}

// The jit's own tanh and sigmoid differ from Eigen's in the last bits.
void expect_near(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5f) << "value " << i;
}

// Sets an environment variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Four instances of an elementwise chain (its constants are this test's own, so no other test's
// kernel matches); returns every instance's values in order.
std::vector<float> run_chain(const EngineOptions& options, Stats* stats = nullptr) {
  Engine engine(options);
  Trace trace(engine);
  std::vector<Expr> outputs;
  for (int i = 0; i < 4; ++i) {
    const Expr x = trace.input({0.1f * float(i), -0.7f, 1.3f, 0.25f * float(i)});
    outputs.push_back(tanh(sigmoid(x * 1.734f + 0.318f) * 2.5f + x));
  }
  std::vector<float> values;
  for (const Expr& y : outputs)
    for (float v : y.value().data) values.push_back(v);
  if (stats) *stats = engine.stats();
  return values;
}

TEST(CacheDirectory, JitKernelsGoToTheEnginesDirectoryNotTheEnvironments) {
  TempDir environment_dir, first_dir, second_dir;
  const ScopedEnv env("EDB_CACHE_DIR", environment_dir.path());
  EngineOptions baseline;
  baseline.executor = "batched";  // compiles nothing
  const std::vector<float> expected = run_chain(baseline);

  EngineOptions options;
  options.executor = "jit";
  options.cache_directory = first_dir.path();
  Stats first;
  expect_near(run_chain(options, &first), expected);
  EXPECT_GT(first.kernels_compiled, 0);
  const size_t stored = kernel_files(first_dir.path());
  EXPECT_EQ(stored, size_t(first.kernels_compiled));

  // Another directory: a compiler of its own, which compiles and stores the same kernels there.
  options.cache_directory = second_dir.path();
  Stats second;
  expect_near(run_chain(options, &second), expected);
  EXPECT_EQ(second.kernels_compiled, first.kernels_compiled);
  EXPECT_EQ(kernel_files(second_dir.path()), stored);

  // The first directory again: a new engine finds every kernel, compiles none and stores none.
  options.cache_directory = first_dir.path();
  Stats warm;
  expect_near(run_chain(options, &warm), expected);
  EXPECT_EQ(warm.kernels_compiled, 0);
  EXPECT_EQ(kernel_files(first_dir.path()), stored);

  EXPECT_EQ(kernel_files(environment_dir.path()), 0u) << "$EDB_CACHE_DIR was used";
}

TEST(CacheDirectory, EmptyMeansTheEnvironmentsDirectory) {
  TempDir environment_dir;
  const ScopedEnv env("EDB_CACHE_DIR", environment_dir.path());
  EngineOptions options;
  options.executor = "jit";
  Stats stats;
  run_chain(options, &stats);
  // The default is read when the engine first compiles, so a fresh $EDB_CACHE_DIR is a fresh cache.
  EXPECT_GT(stats.kernels_compiled, 0);
  EXPECT_EQ(kernel_files(environment_dir.path()), size_t(stats.kernels_compiled));
}

// Two jit engines in two threads on one directory (so one process-wide compiler and one cache,
// compiling the same kernels at the same time), several times over: the values equal the batched
// executor's and the directory holds each kernel once, sound.
TEST(CacheDirectory, TwoEnginesInTwoThreadsShareTheCache) {
  TempDir dir;
  EngineOptions batched;
  batched.executor = "batched";
  const std::vector<float> expected = run_chain(batched);
  EngineOptions jit;
  jit.executor = "jit";
  jit.cache_directory = dir.path();
  for (int round = 0; round < 4; ++round) {
    std::vector<float> first, second;
    std::thread a([&] { first = run_chain(jit); });
    std::thread b([&] { second = run_chain(jit); });
    a.join();
    b.join();
    expect_near(first, expected);
    expect_near(second, expected);
  }
  const size_t files = kernel_files(dir.path());
  EXPECT_GT(files, 0u);
  Stats stats;
  run_chain(jit, &stats);
  EXPECT_EQ(stats.kernels_compiled, 0);  // everything is in the shared compiler already
  EXPECT_EQ(kernel_files(dir.path()), files);
}

}  // namespace
}  // namespace edb
