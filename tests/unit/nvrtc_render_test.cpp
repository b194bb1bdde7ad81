// The CUDA renderer and NVRTC, which need no GPU: every kernel the sample models use renders without
// a header and compiles to PTX for sm_80 and sm_90, the GEMM too, errors carry NVRTC's log, and
// CUDA images go through the kernel cache. Skipped (with the loader's reason) without libnvrtc.
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "edbatch/errors.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "nvrtc/cuda_compiler.h"
#include "nvrtc/cuda_render.h"
#include "nvrtc/nvrtc_compiler.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "samples/training.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::TempDir;

nvrtc::Nvrtc* nvrtc_or_null(std::string& reason) { return nvrtc::Nvrtc::get(&reason); }

#define REQUIRE_NVRTC(nvrtc)                                          \
  std::string nvrtc_reason;                                           \
  nvrtc::Nvrtc* nvrtc = nvrtc_or_null(nvrtc_reason);                  \
  if (!nvrtc) GTEST_SKIP() << "no NVRTC: " << nvrtc_reason

// Every op and every access mode, with constants that need exact printing.
jit::Kernel every_op_kernel() {
  jit::Kernel k;
  k.name = "every op";
  k.inputs = {jit::OperandAccess::shared, jit::OperandAccess::strided, jit::OperandAccess::gathered};
  const jit::ValueId a = k.load(0), b = k.load(1), c = k.load(2);
  const jit::ValueId sum = k.binary(jit::KernelOp::add, a, b);
  const jit::ValueId difference = k.binary(jit::KernelOp::sub, sum, c);
  const jit::ValueId product = k.binary(jit::KernelOp::cmult, difference, a);
  const jit::ValueId scaled = k.with_constant(jit::KernelOp::scale, product, 0.1f);
  const jit::ValueId shifted = k.with_constant(jit::KernelOp::add_const, scaled, -std::numeric_limits<float>::infinity());
  k.store(k.unary(jit::KernelOp::tanh, sum));
  k.store(k.unary(jit::KernelOp::sigmoid, shifted));
  k.store(k.unary(jit::KernelOp::exp, k.unary(jit::KernelOp::relu, difference)));
  k.store(k.binary(jit::KernelOp::max, k.unary(jit::KernelOp::log, a), k.binary(jit::KernelOp::div, b, c)));
  k.store(k.binary(jit::KernelOp::min, a, b));
  k.store(k.binary(jit::KernelOp::pow, a, b));
  k.store(k.binary(jit::KernelOp::relu_grad, a, b));
  jit::ValueId chain = a;  // issue 46's unary ops
  for (jit::KernelOp op : {jit::KernelOp::sqrt, jit::KernelOp::abs, jit::KernelOp::square, jit::KernelOp::cube,
                           jit::KernelOp::softsign, jit::KernelOp::silu, jit::KernelOp::elu, jit::KernelOp::selu,
                           jit::KernelOp::log_sigmoid, jit::KernelOp::erf, jit::KernelOp::sin, jit::KernelOp::cos,
                           jit::KernelOp::sinh, jit::KernelOp::cosh, jit::KernelOp::round, jit::KernelOp::ceil,
                           jit::KernelOp::floor, jit::KernelOp::tan, jit::KernelOp::asinh, jit::KernelOp::acosh,
                           jit::KernelOp::atanh, jit::KernelOp::asin, jit::KernelOp::acos, jit::KernelOp::atan})
    chain = jit::kernel_op_has_constant(op) ? k.with_constant(op, chain, 0.5f) : k.unary(op, chain);
  k.store(chain);
  return k;
}

TEST(NvrtcRender, KernelSourceHasNoIncludeAndTheKeySymbol) {
  const jit::Kernel kernel = every_op_kernel();
  const jit::KernelKey key = jit::kernel_key(jit::describe(kernel), "cuda", "sm_90", "f");
  const std::string source = nvrtc::render_kernel(kernel, key.symbol());
  EXPECT_EQ(source.find("#include"), std::string::npos) << source;
  EXPECT_NE(source.find("extern \"C\" __global__ void " + key.symbol() + "("), std::string::npos) << source;
  EXPECT_NE(source.find("inputs[0].base[e]"), std::string::npos) << source;                          // shared
  EXPECT_NE(source.find("inputs[1].base[k * inputs[1].stride + e]"), std::string::npos) << source;   // strided
  EXPECT_NE(source.find("inputs[2].pointers[k][e]"), std::string::npos) << source;                   // gathered
  EXPECT_NE(source.find("0x1.99999ap-4f"), std::string::npos) << source;                             // 0.1f exactly
  EXPECT_NE(source.find("__int_as_float(0xff800000)"), std::string::npos) << source;                 // -inf
  for (size_t j = 0; j < kernel.outputs.size(); ++j)
    EXPECT_NE(source.find("outputs[" + std::to_string(j) + "][i]"), std::string::npos);
  EXPECT_NE(source.find("logf(v0)"), std::string::npos) << source;
  EXPECT_NE(source.find("sqrtf(v0)"), std::string::npos) << source;
  EXPECT_NE(source.find("v0 > 0.0f ? v1 : 0.0f"), std::string::npos) << source;  // relu_grad (y, dy)
  // max and min keep a NaN of either argument (as ir::max_of and ir::min_of), unlike fmaxf
  EXPECT_NE(source.find(" != "), std::string::npos) << source;
  EXPECT_EQ(source.find("fmaxf"), std::string::npos) << source;
  EXPECT_EQ(nvrtc::render_gemm("edb_gemm_x").find("#include"), std::string::npos);
}

TEST(NvrtcRender, AnInconsistentKernelIsRefused) {
  jit::Kernel kernel;
  kernel.name = "broken";
  kernel.inputs = {jit::OperandAccess::gathered};
  kernel.load(3);  // no such input
  kernel.store(0);
  EXPECT_THROW(nvrtc::render_kernel(kernel, "edb_kernel_broken"), InternalError);
}

// A program of every column step (thread 0 of the call's block runs them), then a stage of
// blocks that reads one of their outputs after a barrier.
jit::CellProgram column_step_program() {
  return jit::parse_cell_program(
      "cell column steps\n"
      "rows 8 call_slots 11 shared_slots 0\n"
      "stage 0\n"
      "  column_step softmax cols 2 x c0*9[1+8] out c2\n"
      "  column_step log_softmax cols 1 x c0[0+8] out c3\n"
      "  column_step softmax_grad cols 2 x c0*9[1+8] y c1*8[0+8] out c4\n"
      "  column_step log_softmax_grad cols 2 x c0*9[1+8] y c1*8[0+8] out c5\n"
      "  column_step sum cols 2 x c0*9[1+8] out c6\n"
      "  column_step mean cols 1 x c1[0+8] out c7\n"
      "  column_step dot cols 1 x c0[0+8] y c1[0+8] out c9\n"
      "  column_step scalar div cols 1 x c6[0+1] y c7[0+1] out c10\n"
      "stage 1\n"
      "  %0 = load c2 block 0\n"
      "  %1 = tanh %0\n"
      "  store %1 c8 block 0\n");
}

TEST(NvrtcRender, ColumnStepsRenderAsOneThreadsLoops) {
  const std::string source = nvrtc::render_cell(column_step_program(), "edb_kernel_columns");
  EXPECT_NE(source.find("if (threadIdx.x == 0) {"), std::string::npos) << source;
  EXPECT_NE(source.find("oc[r] = expf(xc[r] - m); s += oc[r];"), std::string::npos) << source;   // softmax
  EXPECT_NE(source.find("const float l = m + logf(s);"), std::string::npos) << source;            // log_softmax
  EXPECT_NE(source.find("oc[r] = xc[r] * (yc[r] - d);"), std::string::npos) << source;            // softmax_grad
  EXPECT_NE(source.find("oc[r] = yc[r] - expf(xc[r]) * d;"), std::string::npos) << source;        // log_softmax_grad
  EXPECT_NE(source.find("o[0] = t / 8.0f;"), std::string::npos) << source;                        // mean
  EXPECT_NE(source.find("t += x[c * 0 + r] * y[c * 0 + r];"), std::string::npos) << source;        // dot
  EXPECT_NE(source.find("o[0] = x[0] / y[0];"), std::string::npos) << source;                      // scalar div
  EXPECT_LT(source.find("__syncthreads();"), source.find("// stage 1"));
}

TEST(NvrtcCompile, ColumnStepsCompileToPtx) {
  REQUIRE_NVRTC(nvrtc);
  const std::string source = nvrtc::render_cell(column_step_program(), "edb_kernel_columns");
  const nvrtc::CompiledImage ptx = nvrtc->compile(source, "edb_kernel_columns", 8, 0, true);
  EXPECT_NE(ptx.ptx.find(".entry edb_kernel_columns"), std::string::npos) << source;
}

// The selection steps (pick_neg_log_softmax and its gradient, argmax, kmax_pooling and its
// gradient, transpose), also by thread 0, as the reference's loops.
jit::CellProgram selection_step_program() {
  return jit::parse_cell_program(
      "cell selection steps\n"
      "rows 8 call_slots 9 shared_slots 0\n"
      "stage 0\n"
      "  column_step pick_neg_log_softmax cols 1 index 3 x c0[1+8] out c2\n"
      "  column_step pick_neg_log_softmax_grad cols 1 index 3 x c0[1+8] y c1[0+1] out c3\n"
      "  column_step argmax cols 4 x c0*9[1+8] out c4\n"
      "  column_step kmax_pooling cols 4 index 2 x c0*9[1+8] out c5\n"
      "  column_step kmax_pooling_grad cols 4 index 2 x c0*9[1+8] y c1*8[0+8] out c6\n"
      "  column_step transpose cols 4 x c0*9[1+8] out c7\n"
      "stage 1\n"
      "  %0 = load c5 block 0\n"
      "  %1 = tanh %0\n"
      "  store %1 c8 block 0\n");
}

TEST(NvrtcRender, SelectionStepsRenderAsOneThreadsLoops) {
  const std::string source = nvrtc::render_cell(selection_step_program(), "edb_kernel_selections");
  EXPECT_NE(source.find("o[0] = l - x[3];"), std::string::npos) << source;                                // pick_neg_log_softmax
  EXPECT_NE(source.find("o[3] -= 1.0f;"), std::string::npos) << source;                                   // its gradient
  EXPECT_NE(source.find("if (xc[r] > xc[b] || (xc[r] != xc[r] && xc[b] == xc[b])) b = r;"), std::string::npos) << source;  // argmax
  EXPECT_NE(source.find("if (rank < 2) o[place++ * 8 + r] = v;"), std::string::npos) << source;          // kmax_pooling
  EXPECT_NE(source.find("o[p * 8 + r] = rank < 2 ? y[place++ * 8 + r] : 0.0f;"), std::string::npos) << source;  // its gradient
  EXPECT_NE(source.find("o[r * 4 + c] = x[c * 9 + r];"), std::string::npos) << source;                   // transpose
  EXPECT_LT(source.find("__syncthreads();"), source.find("// stage 1"));
}

TEST(NvrtcCompile, SelectionStepsCompileToPtx) {
  REQUIRE_NVRTC(nvrtc);
  const std::string source = nvrtc::render_cell(selection_step_program(), "edb_kernel_selections");
  const nvrtc::CompiledImage ptx = nvrtc->compile(source, "edb_kernel_selections", 8, 0, true);
  EXPECT_NE(ptx.ptx.find(".entry edb_kernel_selections"), std::string::npos) << source;
}

TEST(NvrtcCompile, EveryOpAndTheGemmCompileForSm80AndSm90) {
  REQUIRE_NVRTC(nvrtc);
  const std::string kernel = nvrtc::render_kernel(every_op_kernel(), "edb_kernel_every_op");
  const std::string gemm = nvrtc::render_gemm("edb_gemm_test");
  for (int major : {8, 9}) {
    for (const auto& [source, symbol] : {std::pair{kernel, "edb_kernel_every_op"}, std::pair{gemm, "edb_gemm_test"}}) {
      const nvrtc::CompiledImage ptx = nvrtc->compile(source, symbol, major, 0, true);
      EXPECT_FALSE(ptx.cubin);
      EXPECT_EQ(ptx.arch, "compute_" + std::to_string(major) + "0");
      EXPECT_NE(ptx.ptx.find(".entry " + std::string(symbol)), std::string::npos) << ptx.ptx.substr(0, 400);
      EXPECT_EQ(ptx.image.back(), '\0');
      const nvrtc::CompiledImage cubin = nvrtc->compile(source, symbol, major, 0);
      EXPECT_TRUE(cubin.cubin);
      EXPECT_EQ(cubin.arch, "sm_" + std::to_string(major) + "0");
      ASSERT_GE(cubin.image.size(), 4u);
      EXPECT_EQ(cubin.image.substr(0, 4), "\x7f" "ELF");
    }
  }
}

TEST(NvrtcCompile, ADeviceNewerThanNvrtcGetsPtxOfTheNewestKnownArchitecture) {
  REQUIRE_NVRTC(nvrtc);
  const std::vector<int> archs = nvrtc->supported_archs();
  ASSERT_FALSE(archs.empty());
  const int newest = *std::max_element(archs.begin(), archs.end());
  const nvrtc::CompiledImage image = nvrtc->compile(nvrtc::render_gemm("edb_gemm_future"), "gemm", 99, 9);
  EXPECT_FALSE(image.cubin);
  EXPECT_EQ(image.arch, "compute_" + std::to_string(newest));
}

TEST(NvrtcCompile, ASourceErrorCarriesTheNvrtcLog) {
  REQUIRE_NVRTC(nvrtc);
  try {
    nvrtc->compile("extern \"C\" __global__ void edb_bad() { undefined_name = 1; }", "edb_bad", 9, 0);
    FAIL() << "no error";
  } catch (const InternalError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("nvrtcCompileProgram"), std::string::npos) << message;
    EXPECT_NE(message.find("edb_bad"), std::string::npos) << message;
    EXPECT_NE(message.find("undefined_name"), std::string::npos) << message;  // from the log
  }
}

// The kernels the jit executor builds for every sample model (collected from its kernel cache),
// each also with its inputs read shared, strided and gathered in turn, as the GPU executor may.
TEST(NvrtcCompile, EverySampleModelKernelCompilesToPtxForSm80AndSm90) {
  REQUIRE_NVRTC(nvrtc);
  int compiled = 0, cells = 0;
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 6;
    config.embed = 8;
    config.hidden = 8;
    EngineOptions options;
    options.executor = "jit";
    options.cache_directory = cache.path();
    Engine engine(options);
    const auto model = entry.make(config);
    samples::RunOptions run;
    run.batch = 3;
    run.repeat = 1;
    samples::run_inference(*model, engine, run);
    jit::KernelCacheOptions cache_options;
    cache_options.directory = cache.path();
    const jit::KernelCache kernels(cache_options);
    const std::vector<jit::KernelInfo> list = kernels.list();
    EXPECT_FALSE(list.empty()) << entry.name << ": the jit executor stored no kernel";
    for (const jit::KernelInfo& info : list) {
      const std::optional<jit::KernelEntry> stored = kernels.read(info.key);
      ASSERT_TRUE(stored) << entry.name << " " << info.key.hex();
      // Renders under `description`'s key and compiles for sm_80 and sm_90.
      auto compile = [&](const std::string& description, auto render) {
        const jit::KernelKey key = jit::kernel_key(description, "cuda", "compute_80", "test");
        const std::string source = render(key.symbol());
        EXPECT_EQ(source.find("#include"), std::string::npos) << source;
        for (int major : {8, 9}) {
          const nvrtc::CompiledImage image = nvrtc->compile(source, key.symbol(), major, 0, true);
          EXPECT_NE(image.ptx.find(".entry " + key.symbol()), std::string::npos) << entry.name << "\n" << source;
          ++compiled;
        }
      };
      if (stored->description.starts_with("cell ")) {  // a compiled cell's program
        const jit::CellProgram program = jit::parse_cell_program(stored->description);
        compile(stored->description, [&](const std::string& symbol) { return nvrtc::render_cell(program, symbol); });
        ++cells;
        continue;
      }
      jit::Kernel kernel = jit::parse_kernel(stored->description);
      for (int variant = 0; variant < 2; ++variant) {
        if (variant == 1)
          for (size_t i = 0; i < kernel.inputs.size(); ++i) kernel.inputs[i] = jit::OperandAccess(i % 3);
        compile(jit::describe(kernel), [&](const std::string& symbol) { return nvrtc::render_kernel(kernel, symbol); });
      }
    }
  }
  EXPECT_GT(compiled, 0);
  EXPECT_GT(cells, 0);  // the tree and sequence models' cells compile
}

// MV-RNN's cells, forward and backward (a training step on the jit), are programs of per-call
// matrices: stages of several columns, matrices read in place, transposed (dot products) and read
// with a step. Each renders and compiles to PTX.
TEST(NvrtcCompile, PerCallMatrixCellsCompileToPtx) {
  REQUIRE_NVRTC(nvrtc);
  TempDir cache;
  samples::ModelConfig config;
  config.limit = 8;
  config.hidden = 8;
  EngineOptions options;
  options.executor = "jit";
  options.cache_directory = cache.path();
  Engine engine(options);
  const auto model = samples::make_mvrnn(config);
  Optimizer optimizer(model->model(), {.kind = "sgd", .learning_rate = 0.1f});
  samples::TrainOptions train;
  train.batch = 4;
  samples::train(*model, engine, optimizer, train);
  jit::KernelCacheOptions cache_options;
  cache_options.directory = cache.path();
  const jit::KernelCache kernels(cache_options);
  std::set<std::string> constructs;
  for (const jit::KernelInfo& info : kernels.list()) {
    const std::optional<jit::KernelEntry> stored = kernels.read(info.key);
    ASSERT_TRUE(stored);
    if (!stored->description.starts_with("cell ")) continue;
    const jit::CellProgram program = jit::parse_cell_program(stored->description);
    for (const char* construct : {" columns ", " matrix ", " transposed ", " step "})
      if (stored->description.find(construct) != std::string::npos) constructs.insert(construct);
    const jit::KernelKey key = jit::kernel_key(stored->description, "cuda", "compute_80", "test");
    const std::string source = nvrtc::render_cell(program, key.symbol());
    const nvrtc::CompiledImage image = nvrtc->compile(source, key.symbol(), 8, 0, true);
    EXPECT_NE(image.ptx.find(".entry " + key.symbol()), std::string::npos) << source;
  }
  EXPECT_EQ(constructs, (std::set<std::string>{" columns ", " matrix ", " transposed "}));
}

TEST(NvrtcCompile, CudaImagesGoThroughTheKernelCache) {
  REQUIRE_NVRTC(nvrtc);
  TempDir cache;
  const jit::Kernel kernel = every_op_kernel();
  jit::KernelKey key;
  {
    nvrtc::CudaCompiler compiler(cache.path(), 9, 0);
    EXPECT_EQ(compiler.target(), "sm_90");
    const nvrtc::CudaImage first = compiler.elementwise(kernel);
    EXPECT_TRUE(first.compiled_now);
    EXPECT_EQ(first.image.substr(0, 4), "\x7f" "ELF");
    key = first.key;
    EXPECT_EQ(key, jit::kernel_key(jit::describe(kernel), "cuda", "sm_90", compiler.flags()));
    EXPECT_FALSE(compiler.elementwise(kernel).compiled_now);  // memory
    EXPECT_TRUE(compiler.gemm().compiled_now);
  }
  nvrtc::CudaCompiler later(cache.path(), 9, 0);  // another process, as far as the cache can tell
  const nvrtc::CudaImage again = later.elementwise(kernel);
  EXPECT_FALSE(again.compiled_now);
  EXPECT_EQ(again.key, key);
  EXPECT_FALSE(later.gemm().compiled_now);
  // Another architecture is another key.
  nvrtc::CudaCompiler other(cache.path(), 8, 0);
  EXPECT_TRUE(other.elementwise(kernel).compiled_now);
  std::set<std::string> backends, targets;
  for (const jit::KernelInfo& info : later.cache().list()) {
    backends.insert(info.backend);
    targets.insert(info.target);
  }
  EXPECT_EQ(backends, std::set<std::string>{"cuda"});
  EXPECT_EQ(targets, (std::set<std::string>{"sm_80", "sm_90"}));
}

}  // namespace
}  // namespace edb
