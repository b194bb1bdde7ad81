// edb-run --device: without a usable GPU (here forced with the toolkit's stub libcuda through
// EDB_CUDA_LIBRARY), cuda exits non-zero with one line naming the reason, and auto runs on the CPU
// after saying why once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "nvrtc/cuda_driver.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::edb_run_binary;
using testing::TempDir;

std::string stub_library() {
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(variable); root && *root)
      if (std::filesystem::exists(std::string(root) + "/lib64/stubs/libcuda.so")) return std::string(root) + "/lib64/stubs/libcuda.so";
  if (std::filesystem::exists("/usr/local/cuda/lib64/stubs/libcuda.so")) return "/usr/local/cuda/lib64/stubs/libcuda.so";
  return "";
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Runs edb-run with EDB_CUDA_LIBRARY pointing at a libcuda.so.1 symlink to the stub.
class EdbRunDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(edb_run_binary())) GTEST_FAIL() << "edb-run not found at " << edb_run_binary();
    const std::string stub = stub_library();
    if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so here";
    link_ = directory_.file("libcuda.so.1");
    std::filesystem::create_symlink(stub, link_);
  }
  testing::ProgramRun run(const std::string& args) {
    return testing::run_program("/usr/bin/env", "EDB_CUDA_LIBRARY='" + link_ + "' EDB_CACHE_DIR='" +
                                                    directory_.path() + "' '" + edb_run_binary() + "' " + args);
  }
  TempDir directory_;
  std::string link_;
};

TEST_F(EdbRunDevice, CudaWithoutAGpuIsOneLineNamingTheReason) {
  const testing::ProgramRun o = run("treelstm --limit 4 --repeat 1 --device cuda");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.status, -1);
  EXPECT_EQ(o.out, "");
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(count(o.err, "\n"), 1u) << o.err;
  EXPECT_NE(o.err.find("edb::Engine: device 'cuda' is not usable: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("stub libcuda"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("CUDA_ERROR_STUB_LIBRARY"), std::string::npos) << o.err;
}

TEST_F(EdbRunDevice, AutoWithoutAGpuRunsOnTheCpuAndSaysWhyOnce) {
  const testing::ProgramRun o = run("treelstm --limit 8 --batch 4 --repeat 2 --device auto --json");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(count(o.err, "device auto: running on the CPU ("), 1u) << o.err;
  EXPECT_NE(o.err.find("stub libcuda"), std::string::npos) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j.value("device", ""), "cpu");
  // The same loss as asking for the CPU.
  const testing::ProgramRun cpu = run("treelstm --limit 8 --batch 4 --repeat 1 --device cpu --json");
  ASSERT_EQ(cpu.status, 0) << cpu.err;
  EXPECT_EQ(cpu.err.find("device auto"), std::string::npos) << cpu.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(cpu.out).value("loss", -1.0), j.value("loss", -2.0));
}

TEST_F(EdbRunDevice, CudaWithTheReferenceExecutorIsAnError) {
  const testing::ProgramRun o = run("treelstm --limit 4 --repeat 1 --device cuda --executor reference");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find("the reference executor runs on the CPU only"), std::string::npos) << o.err;
}

// Whatever this machine has: cuda either runs or fails with one line (never a crash).
TEST(EdbRunDeviceHere, CudaRunsOrSaysWhy) {
  if (!std::filesystem::exists(edb_run_binary())) GTEST_FAIL() << "edb-run not found at " << edb_run_binary();
  TempDir cache;
  const testing::ProgramRun o = testing::run_program(
      "/usr/bin/env", "EDB_CACHE_DIR='" + cache.path() + "' '" + edb_run_binary() + "' treelstm --limit 4 --repeat 1 --device cuda --json");
  const nvrtc::DeviceProbe probe = nvrtc::probe_device();
  if (probe.usable) {
    EXPECT_EQ(o.status, 0) << o.err;
    EXPECT_EQ(nlohmann::json::parse(o.out).value("device", ""), "cuda");
  } else {
    EXPECT_EQ(o.status, 2) << o.err;  // a UsageError
    EXPECT_EQ(count(o.err, "\n"), 1u) << o.err;
    EXPECT_NE(o.err.find(probe.reason), std::string::npos) << o.err << " vs " << probe.reason;
  }
}

}  // namespace
}  // namespace edb
