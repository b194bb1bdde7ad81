// The Driver API side: detection names why there is no usable GPU (no libcuda, the toolkit's stub
// libcuda), the engine's device choice follows it, and, on a machine with a GPU only, rendered
// kernels and the GEMM run and match the CPU. Launch tests skip with the detection's reason.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "edbatch/errors.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "nvrtc/cuda_driver.h"
#include "nvrtc/cuda_render.h"
#include "nvrtc/nvrtc_compiler.h"
#include "runtime/cuda_executor.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "samples/training.h"
#include "tests/support/sample_gradients.h"
#include "tests/support/test_support.h"

#ifdef EDB_TEST_CUDA_HEADERS
#include <cuda.h>
// Our declarations against the toolkit's: the ABI we call through dlsym.
static_assert(std::is_same_v<edb::nvrtc::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<edb::nvrtc::CUdevice, CUdevice>);
static_assert(edb::nvrtc::kAttributeComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(edb::nvrtc::kAttributeComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(edb::nvrtc::kAttributeMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(CUDA_ERROR_STUB_LIBRARY == 34 && CUDA_ERROR_NO_DEVICE == 100);
static_assert(CU_STREAM_NON_BLOCKING == 1);
#endif

namespace edb {
namespace {

using testing::TempDir;

// The toolkit's stub libcuda, or "" when there is no toolkit here.
std::string stub_library() {
  std::vector<std::string> places;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(variable); root && *root) places.push_back(std::string(root) + "/lib64/stubs/libcuda.so");
  places.push_back("/usr/local/cuda/lib64/stubs/libcuda.so");
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/local/cuda/targets", error))
    places.push_back(entry.path().string() + "/lib/stubs/libcuda.so");
  for (const std::string& place : places)
    if (std::filesystem::exists(place)) return place;
  return "";
}

// The stub as the loader would find a driver: a symlink named libcuda.so.1 in a temp directory.
class StubDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string stub = stub_library();
    if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so here";
    // Load the real driver first, if any: once the stub (soname libcuda.so.1) is in the process,
    // dlopen("libcuda.so.1") would return it, and the launch tests would not find the GPU.
    nvrtc::load_driver("", nullptr);
    link_ = directory_.file("libcuda.so.1");
    std::filesystem::create_symlink(stub, link_);
    const char* old = std::getenv("EDB_CUDA_LIBRARY");
    had_ = old != nullptr;
    if (old) old_ = old;
    setenv("EDB_CUDA_LIBRARY", link_.c_str(), 1);
  }
  void TearDown() override {
    if (had_) setenv("EDB_CUDA_LIBRARY", old_.c_str(), 1);
    else unsetenv("EDB_CUDA_LIBRARY");
  }
  TempDir directory_;
  std::string link_, old_;
  bool had_ = false;
};

TEST_F(StubDriver, IsNoGpuWithTheReason) {
  const nvrtc::DeviceProbe probe = nvrtc::probe_device();
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.library, link_);
  EXPECT_NE(probe.reason.find("stub"), std::string::npos) << probe.reason;
  EXPECT_NE(probe.reason.find("CUDA_ERROR_STUB_LIBRARY"), std::string::npos) << probe.reason;
  EXPECT_NE(probe.reason.find(link_), std::string::npos) << probe.reason;
  // The same through an explicit path, and a second time (the library stays loaded).
  EXPECT_EQ(nvrtc::probe_device(link_).reason, probe.reason);
}

TEST_F(StubDriver, CudaDeviceIsAUsageErrorNamingTheStub) {
  const std::string message = testing::usage_error([] { nvrtc::CudaDevice device; });
  EXPECT_EQ(message.rfind("edb::Engine: device 'cuda' is not usable: ", 0), 0u) << message;
  EXPECT_NE(message.find("stub"), std::string::npos) << message;
}

TEST_F(StubDriver, EngineDeviceCudaFailsAndAutoRunsOnTheCpu) {
  EngineOptions cuda;
  cuda.device = "cuda";
  const std::string message = testing::usage_error([&] { Engine engine(cuda); });
  EXPECT_EQ(message.rfind("edb::Engine: device 'cuda' is not usable: ", 0), 0u) << message;
  EXPECT_NE(message.find("stub"), std::string::npos) << message;

  EngineOptions automatic;
  automatic.device = "auto";
  Engine engine(automatic);
  EXPECT_EQ(engine.options().device, "cpu");
  Trace trace(engine);
  EXPECT_FLOAT_EQ(tanh(trace.input({0.5f})).scalar(), std::tanh(0.5f));
}

TEST(CudaDriver, AMissingLibraryIsNoGpuWithTheReason) {
  const nvrtc::DeviceProbe probe = nvrtc::probe_device("/nonexistent/libcuda.so.1");
  EXPECT_FALSE(probe.usable);
  EXPECT_NE(probe.reason.find("no NVIDIA driver"), std::string::npos) << probe.reason;
  EXPECT_NE(probe.reason.find("/nonexistent/libcuda.so.1"), std::string::npos) << probe.reason;
}

TEST(CudaDriver, TheDefaultProbeAnswersWithoutThrowing) {
  const nvrtc::DeviceProbe probe = nvrtc::probe_device();
  if (probe.usable) {
    EXPECT_GT(probe.major, 0);
    EXPECT_FALSE(probe.name.empty());
  } else {
    EXPECT_FALSE(probe.reason.empty());
  }
}

TEST(CudaDriver, DeviceNamesAndReferenceOnCuda) {
  EngineOptions options;
  options.device = "tpu";
  EXPECT_EQ(testing::usage_error([&] { Engine engine(options); }),
            "edb::Engine: device 'tpu' is not available in this build (available: cpu, cuda, auto)");
  options.device = "cuda";
  options.executor = "reference";
  EXPECT_EQ(testing::usage_error([&] { Engine engine(options); }),
            "edb::Engine: device 'cuda' is not usable: the reference executor runs on the CPU only");
}

// --- Launch tests: only where a GPU is usable. ---

#define REQUIRE_GPU(probe)                                          \
  const nvrtc::DeviceProbe probe = nvrtc::probe_device();           \
  if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.reason

TEST(CudaLaunch, AnElementwiseKernelMatchesTheInterpreter) {
  REQUIRE_GPU(probe);
  std::string reason;
  nvrtc::Nvrtc* compiler = nvrtc::Nvrtc::get(&reason);
  ASSERT_TRUE(compiler) << reason;
  jit::Kernel kernel;
  kernel.name = "launch test";
  kernel.inputs = {jit::OperandAccess::shared, jit::OperandAccess::strided, jit::OperandAccess::gathered};
  const jit::ValueId a = kernel.load(0), b = kernel.load(1), c = kernel.load(2);
  kernel.store(kernel.unary(jit::KernelOp::tanh, kernel.binary(jit::KernelOp::add, a, b)));
  kernel.store(kernel.unary(jit::KernelOp::sigmoid, kernel.binary(jit::KernelOp::cmult, c, b)));
  const int64_t members = 37, elements = 129, stride = 140;
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(-2, 2);
  std::vector<float> shared(elements), strided(members * stride), gathered(members * elements);
  for (std::vector<float>* v : {&shared, &strided, &gathered})
    for (float& x : *v) x = uniform(random);
  std::vector<const float*> order(members);
  for (int64_t k = 0; k < members; ++k) order[k] = gathered.data() + ((k * 7) % members) * elements;
  std::vector<float> expected0(members * elements), expected1(members * elements);
  const jit::KernelInput host_inputs[3] = {{shared.data(), 0, nullptr}, {strided.data(), stride, nullptr},
                                           {nullptr, 0, order.data()}};
  float* host_outputs[2] = {expected0.data(), expected1.data()};
  jit::interpret(kernel, jit::KernelArgs{members, elements, host_inputs, host_outputs});

  nvrtc::CudaDevice device;
  auto upload = [&](const void* data, size_t bytes) {
    const nvrtc::CUdeviceptr p = device.allocate(bytes);
    device.upload(p, data, bytes);
    return p;
  };
  const nvrtc::CUdeviceptr d_shared = upload(shared.data(), shared.size() * 4);
  const nvrtc::CUdeviceptr d_strided = upload(strided.data(), strided.size() * 4);
  const nvrtc::CUdeviceptr d_gathered = upload(gathered.data(), gathered.size() * 4);
  std::vector<nvrtc::CUdeviceptr> d_order(members);
  for (int64_t k = 0; k < members; ++k) d_order[k] = d_gathered + nvrtc::CUdeviceptr(order[k] - gathered.data()) * 4;
  const nvrtc::CUdeviceptr d_table = upload(d_order.data(), d_order.size() * 8);
  struct Input { nvrtc::CUdeviceptr base; int64_t stride; nvrtc::CUdeviceptr pointers; };
  const Input inputs[3] = {{d_shared, 0, 0}, {d_strided, stride, 0}, {0, 0, d_table}};
  const nvrtc::CUdeviceptr d_inputs = upload(inputs, sizeof inputs);
  const nvrtc::CUdeviceptr d_out0 = device.allocate(expected0.size() * 4), d_out1 = device.allocate(expected1.size() * 4);
  const nvrtc::CUdeviceptr outs[2] = {d_out0, d_out1};
  const nvrtc::CUdeviceptr d_outputs = upload(outs, sizeof outs);
  const nvrtc::CompiledImage image = compiler->compile(nvrtc::render_kernel(kernel, "edb_kernel_launch"), "launch", probe.major, probe.minor);
  nvrtc::CUfunction function = device.load_function(image.image, "edb_kernel_launch");
  long long m = members, e = elements;
  nvrtc::CUdeviceptr in_address = d_inputs, out_address = d_outputs;
  void* parameters[] = {&m, &e, &in_address, &out_address};
  device.launch(function, 7, 1, 128, 1, parameters);  // fewer threads than elements: the grid-stride loop
  std::vector<float> got0(expected0.size()), got1(expected1.size());
  device.download(got0.data(), d_out0, got0.size() * 4);
  device.download(got1.data(), d_out1, got1.size() * 4);
  for (size_t i = 0; i < got0.size(); ++i) {
    ASSERT_NEAR(got0[i], expected0[i], 1e-5f) << i;
    ASSERT_NEAR(got1[i], expected1[i], 1e-5f) << i;
  }
  for (nvrtc::CUdeviceptr p : {d_shared, d_strided, d_gathered, d_table, d_inputs, d_out0, d_out1, d_outputs}) device.release(p);
}

TEST(CudaLaunch, TheGemmMatchesAHostProduct) {
  REQUIRE_GPU(probe);
  std::string reason;
  nvrtc::Nvrtc* compiler = nvrtc::Nvrtc::get(&reason);
  ASSERT_TRUE(compiler) << reason;
  const int rows = 37, depth = 45, cols = 2;
  const int64_t members = 19;
  std::mt19937 random(2);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> w(rows * depth), x(members * depth * cols), c(rows * members * cols);
  for (float& v : w) v = uniform(random);
  for (float& v : x) v = uniform(random);
  for (float& v : c) v = uniform(random);
  std::vector<float> expected = c;  // accumulate = 1: C + W X, member m's X at slot (m * 5) % members
  for (int64_t m = 0; m < members; ++m)
    for (int col = 0; col < cols; ++col)
      for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int d = 0; d < depth; ++d) sum += double(w[d * rows + r]) * x[((m * 5) % members) * depth * cols + col * depth + d];
        expected[(m * cols + col) * rows + r] += float(sum);
      }
  nvrtc::CudaDevice device;
  const nvrtc::CUdeviceptr d_w = device.allocate(w.size() * 4), d_x = device.allocate(x.size() * 4),
                           d_c = device.allocate(c.size() * 4), d_table = device.allocate(members * 8);
  device.upload(d_w, w.data(), w.size() * 4);
  device.upload(d_x, x.data(), x.size() * 4);
  device.upload(d_c, c.data(), c.size() * 4);
  std::vector<nvrtc::CUdeviceptr> table(members);
  for (int64_t m = 0; m < members; ++m) table[m] = d_x + nvrtc::CUdeviceptr((m * 5) % members) * depth * cols * 4;
  device.upload(d_table, table.data(), table.size() * 8);
  const nvrtc::CompiledImage image = compiler->compile(nvrtc::render_gemm("edb_gemm_launch"), "gemm", probe.major, probe.minor);
  nvrtc::CUfunction gemm = device.load_function(image.image, "edb_gemm_launch");
  int r = rows, d = depth, k = cols, add = 1;
  long long n = members;
  nvrtc::CUdeviceptr pw = d_w, px = d_table, pc = d_c;
  void* parameters[] = {&r, &d, &k, &n, &pw, &px, &pc, &add};
  const unsigned tile = nvrtc::kGemmTile;
  device.launch(gemm, (rows + tile - 1) / tile, 2 /* fewer than the column tiles: the kernel loops */, tile, tile, parameters);
  std::vector<float> got(c.size());
  device.download(got.data(), d_c, got.size() * 4);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-4f) << i;
  for (nvrtc::CUdeviceptr p : {d_w, d_x, d_c, d_table}) device.release(p);
}

// Every sample model: the GPU executor's loss against the CPU's batched executor.
TEST(CudaLaunch, EverySampleModelMatchesTheCpu) {
  REQUIRE_GPU(probe);
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 24;
    samples::RunOptions run;
    run.batch = 8;
    run.repeat = 1;
    double losses[2] = {0, 0};
    for (int gpu = 0; gpu < 2; ++gpu) {
      EngineOptions options;
      options.device = gpu ? "cuda" : "cpu";
      options.cache_directory = cache.path();
      options.verify = true;
      Engine engine(options);
      ASSERT_EQ(engine.options().device, options.device);
      const auto model = entry.make(config);
      losses[gpu] = samples::run_inference(*model, engine, run).loss;
    }
    EXPECT_TRUE(testing::near_relative(losses[1], losses[0], 1e-4)) << entry.name;
  }
}

// With room for one kernel function on the device, TreeLSTM's elementwise kernels unload one
// another (least recently used out), and the loss is still the CPU's.
TEST(CudaLaunch, DeviceKernelsStayWithinCacheEntries) {
  REQUIRE_GPU(probe);
  TempDir cache;
  samples::ModelConfig config;
  config.limit = 16;
  samples::RunOptions run;
  run.batch = 8;
  run.repeat = 2;
  const samples::ModelEntry* treelstm = nullptr;
  for (const samples::ModelEntry& entry : samples::model_registry())
    if (entry.name == "treelstm") treelstm = &entry;
  ASSERT_NE(treelstm, nullptr);
  double losses[2] = {0, 0};
  CacheSize device_kernels;
  for (int gpu = 0; gpu < 2; ++gpu) {
    EngineOptions options;
    options.device = gpu ? "cuda" : "cpu";
    options.cache_directory = cache.path();
    options.cache_entries = 1;
    Engine engine(options);
    const auto model = treelstm->make(config);
    losses[gpu] = samples::run_inference(*model, engine, run).loss;
    if (gpu) device_kernels = engine.stats().caches.device_kernels;
  }
  EXPECT_TRUE(testing::near_relative(losses[1], losses[0], 1e-4));
  EXPECT_EQ(device_kernels.max_entries, 1);
  EXPECT_EQ(device_kernels.entries, 1);
  EXPECT_GT(device_kernels.evictions, 0);
}

// The gradients of the sum of `model`'s instances' losses, on `device` under `executor`.
Gradients gradients_on(samples::SampleModel& model, const char* device, const char* executor, const std::string& cache) {
  EngineOptions options;
  options.device = device;
  options.executor = executor;
  options.cache_directory = cache;
  options.verify = true;
  Engine engine(options);
  return testing::summed_loss_gradients(engine, model);
}

// The loss and every gradient (parameters and tables' rows) of `gpu` against `cpu`.
void expect_gradients_near(const Gradients& gpu, const Gradients& cpu, const std::string& what) {
  EXPECT_TRUE(testing::near_relative(gpu.loss, cpu.loss, 1e-4)) << what;
  ASSERT_EQ(gpu.parameters.size(), cpu.parameters.size()) << what;
  for (const Gradients::Dense& d : cpu.parameters) {
    const Tensor* g = gpu.of(d.parameter);
    ASSERT_NE(g, nullptr) << what << " " << d.parameter.name();
    EXPECT_TRUE(testing::near_relative(*g, d.gradient, 1e-3)) << what << " " << d.parameter.name();
  }
  ASSERT_EQ(gpu.tables.size(), cpu.tables.size()) << what;
  for (const Gradients::Rows& rows : cpu.tables) {
    const Gradients::Rows* g = gpu.of(rows.table);
    ASSERT_NE(g, nullptr) << what << " " << rows.table.name();
    EXPECT_EQ(g->entries, rows.entries) << what << " " << rows.table.name();
    EXPECT_TRUE(testing::near_relative(Tensor{int(g->gradients.size()), 1, g->gradients},
                                       Tensor{int(rows.gradients.size()), 1, rows.gradients}, 1e-3))
        << what << " " << rows.table.name();
  }
}

// Every sample model's backward pass: the GPU executor's gradients against the CPU's (jit, the
// default executor: on the GPU, cells that lower run as rendered cell kernels).
TEST(CudaLaunch, EverySampleModelsGradientsMatchTheCpu) {
  REQUIRE_GPU(probe);
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 8;
    config.embed = 16;
    config.hidden = 16;
    const auto model = entry.make(config);
    expect_gradients_near(gradients_on(*model, "cuda", "jit", cache.path()), gradients_on(*model, "cpu", "jit", cache.path()),
                          entry.name);
  }
}

// Under jit, a batch of calls of a cell that lowers runs as one kernel rendered from its program
// (under batched, as its body's batches): every sample model's loss and gradients on the GPU, both
// ways, against the CPU's jit, and the cell kernels were compiled for the device.
TEST(CudaLaunch, CompiledCellsMatchTheCpu) {
  REQUIRE_GPU(probe);
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 6;
    config.embed = 16;
    config.hidden = 12;  // blocks of 12 rows: rows past a warp's lanes idle, packed tiles padded
    const auto model = entry.make(config);
    const Gradients cpu = gradients_on(*model, "cpu", "jit", cache.path());
    for (const char* executor : {"jit", "batched"})
      expect_gradients_near(gradients_on(*model, "cuda", executor, cache.path()), cpu,
                            entry.name + " on cuda under " + executor);
    int cpu_cells = 0, gpu_cells = 0;
    jit::KernelCacheOptions cache_options;
    cache_options.directory = cache.path();
    for (const jit::KernelInfo& info : jit::KernelCache(cache_options).list())
      if (info.signature.starts_with("cell ")) ++(info.backend == "cuda" ? gpu_cells : cpu_cells);
    EXPECT_EQ(gpu_cells > 0, cpu_cells > 0) << entry.name << ": " << cpu_cells << " cell kernels for the CPU, "
                                            << gpu_cells << " for the GPU";
  }
}

// Training on one engine: each step's trace runs its cells' kernels with the weights the step
// before updated (the GPU repacks a cell's weights only when a parameter moved), so each step's
// loss equals the CPU's, and the trained weights too, up to rounding grown over the steps.
TEST(CudaLaunch, TrainingStepsMatchTheCpu) {
  REQUIRE_GPU(probe);
  for (const char* name : {"treelstm", "bilstm"}) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 24;
    config.embed = 16;
    config.hidden = 12;
    std::vector<float> losses[2];
    std::vector<std::vector<float>> weights[2];
    for (int gpu = 0; gpu < 2; ++gpu) {
      const samples::ModelEntry* entry = nullptr;
      for (const samples::ModelEntry& e : samples::model_registry())
        if (e.name == name) entry = &e;
      ASSERT_NE(entry, nullptr) << name;
      const auto model = entry->make(config);
      EngineOptions options;
      options.device = gpu ? "cuda" : "cpu";
      options.cache_directory = cache.path();
      Engine engine(options);
      Optimizer optimizer(model->model(), {.kind = "sgd", .learning_rate = 0.1f});
      samples::TrainOptions train;
      train.batch = 4;
      for (const samples::EpochResult& epoch : samples::train(*model, engine, optimizer, train).epochs)
        losses[gpu].insert(losses[gpu].end(), epoch.step_losses.begin(), epoch.step_losses.end());
      for (const Parameter& p : model->model().parameters()) weights[gpu].emplace_back(p.values().begin(), p.values().end());
    }
    ASSERT_EQ(losses[1].size(), losses[0].size()) << name;
    ASSERT_GT(losses[0].size(), 4u) << name;
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_TRUE(testing::near_relative(losses[1][i], losses[0][i], 1e-3)) << name << " step " << i;
    ASSERT_EQ(weights[1].size(), weights[0].size()) << name;
    for (size_t i = 0; i < weights[0].size(); ++i)
      EXPECT_TRUE(testing::near_relative(Tensor{int(weights[1][i].size()), 1, weights[1][i]},
                                         Tensor{int(weights[0][i].size()), 1, weights[0][i]}, 1e-2))
          << name << " parameter " << i;
  }
}

}  // namespace
}  // namespace edb
