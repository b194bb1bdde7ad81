// The CUDA renderer's compiled cells, run without a GPU: nvrtc::render_cell's source is compiled as
// host C++ (this build's compiler) with a prelude that plays CUDA's part, a block's threads as
// std::threads meeting at a std::barrier for __syncthreads, blocks one after another, and each
// program's kernel must write what the LLVM backend's kernel of the same program writes, on the same
// random memory. The programs are those the sample models (trained, so backward bodies too) and
// random cell programs compile under jit. NVRTC's PTX is checked in nvrtc_render_test.cpp; this is
// the check of the source's arithmetic and addressing, which otherwise only a GPU would run.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "jit/cell_program.h"
#include "jit/kernel_cache.h"
#include "jit/llvm_backend.h"
#include "nvrtc/cuda_render.h"
#include "samples/models.h"
#include "samples/training.h"
#include "tests/support/random_cells.h"
#include "tests/support/test_support.h"

#ifndef EDB_TEST_CXX
#error "tests/CMakeLists.txt defines EDB_TEST_CXX, the compiler the emulated kernels are built with"
#endif

namespace edb {
namespace {

using jit::CellProgram;
using testing::TempDir;

// CUDA's names for host C++: one block's threads run as std::threads (threadIdx per thread), blocks
// one after another; a __syncthreads is the block's barrier.
constexpr const char* kPrelude = R"(#include <barrier>
#include <cstring>
#include <math.h>
#include <thread>
#include <vector>
struct EdbDim { unsigned x = 0, y = 0, z = 0; };
static thread_local EdbDim threadIdx;
static EdbDim blockIdx, blockDim, gridDim;
static std::barrier<>* edb_block_barrier = nullptr;
#define __global__
#define __restrict__ __restrict
#define __syncthreads() edb_block_barrier->arrive_and_wait()
static inline float __int_as_float(unsigned bits) { float f; std::memcpy(&f, &bits, 4); return f; }
template <typename Kernel>
static void edb_launch(Kernel kernel, int blocks, int threads, long long calls, const float* const* shared,
                       const float* const* weights, float* const* pointers) {
  gridDim.x = unsigned(blocks);
  blockDim.x = unsigned(threads);
  for (int b = 0; b < blocks; ++b) {
    blockIdx.x = unsigned(b);
    std::barrier<> barrier(threads);
    edb_block_barrier = &barrier;
    std::vector<std::thread> block;
    for (int t = 0; t < threads; ++t)
      block.emplace_back([=] { threadIdx.x = unsigned(t); kernel(calls, shared, weights, pointers); });
    for (std::thread& thread : block) thread.join();
  }
}
)";

using Launch = void (*)(int blocks, int threads, long long calls, const float* const* shared,
                        const float* const* weights, float* const* pointers);

// The rendered programs, compiled into one shared object and loaded.
class EmulatedKernels {
 public:
  EmulatedKernels(const std::vector<CellProgram>& programs, const std::string& directory, int vector) {
    std::ostringstream source;
    source << kPrelude;
    for (size_t i = 0; i < programs.size(); ++i) {
      const std::string symbol = "edb_cell_" + std::to_string(i);
      source << nvrtc::render_cell(programs[i], symbol, vector) << '\n'
             << "extern \"C\" void launch_" << i
             << "(int blocks, int threads, long long calls, const float* const* shared, const float* const* weights,"
                " float* const* pointers) { edb_launch(" << symbol << ", blocks, threads, calls, shared, weights, pointers); }\n";
    }
    const std::string cpp = directory + "/emulated.cpp", library = directory + "/emulated.so";
    std::ofstream(cpp) << source.str();
    // No sanitizer flags: the object is the rendered code alone, loaded into whatever this build is.
    const std::string command = std::string(EDB_TEST_CXX) + " -std=c++20 -O1 -fPIC -shared -pthread -w -o '" + library +
                                "' '" + cpp + "' 2>'" + directory + "/errors.txt'";
    if (std::system(command.c_str()) != 0) {
      std::ifstream errors(directory + "/errors.txt");
      std::stringstream text;
      text << errors.rdbuf();
      error_ = "compiling the rendered cells failed: " + command + "\n" + text.str().substr(0, 4000);
      return;
    }
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      error_ = std::string("dlopen: ") + dlerror();
      return;
    }
    for (size_t i = 0; i < programs.size(); ++i)
      launches_.push_back(reinterpret_cast<Launch>(dlsym(handle_, ("launch_" + std::to_string(i)).c_str())));
  }
  ~EmulatedKernels() {
    if (handle_) dlclose(handle_);
  }
  const std::string& error() const { return error_; }
  Launch launch(size_t i) const { return launches_.at(i); }

 private:
  void* handle_ = nullptr;
  std::string error_;
  std::vector<Launch> launches_;
};

// More floats than any operand of `program` reaches from its pointer: the sum of the largest of
// each term an address is made of (a row, blocks of rows, a column's stride, a matrix's leading
// dimension over its depth, a column step's columns).
int64_t slot_floats_bound(const CellProgram& program) {
  int64_t row = 0, rows = program.rows, blocks = 1, stride = 0, columns = 1, leading = 0, depth = 0, step = 1, index = 1;
  auto operand = [&](const CellProgram::Operand& o) { stride = std::max<int64_t>(stride, o.stride); };
  auto segment = [&](const CellProgram::Segment& s) {
    operand(s.operand);
    row = std::max<int64_t>(row, s.row);
    rows = std::max<int64_t>(rows, s.rows);
  };
  for (const CellProgram::Stage& stage : program.stages) {
    columns = std::max<int64_t>(columns, stage.columns);
    for (const CellProgram::Contraction& c : stage.contractions) {
      blocks = std::max<int64_t>(blocks, c.blocks);
      int64_t k = 0;
      for (const CellProgram::Segment& x : c.x) {
        segment(x);
        k += x.rows;
      }
      depth = std::max(depth, k);
      if (c.has_bias) segment(c.bias);
      if (c.has_matrix) segment(c.matrix);
      leading = std::max<int64_t>(leading, c.leading);
      step = std::max<int64_t>(step, c.x_step);
    }
    for (const CellProgram::Instruction& in : stage.body)
      if (in.kind == CellProgram::Instruction::load) {
        operand(in.operand);
        blocks = std::max<int64_t>(blocks, in.block + 1);
      }
    for (const CellProgram::Store& s : stage.stores) {
      operand(s.operand);
      blocks = std::max<int64_t>(blocks, s.block + 1);
    }
    for (const CellProgram::ColumnStep& s : stage.steps) {
      segment(s.x);
      segment(s.y);
      operand(s.out);
      columns = std::max<int64_t>(columns, s.cols);
      index = std::max<int64_t>(index, s.index);
    }
  }
  return 2 * (row + rows * blocks + stride * columns + leading * (depth + 1) + step * depth + rows * columns * index +
              rows * blocks * columns) + 64;
}

// The programs the jit stored in the kernel cache at `directory`.
void programs_in(const std::string& directory, std::map<std::string, CellProgram>& out) {
  jit::KernelCacheOptions options;
  options.directory = directory;
  const jit::KernelCache kernels(options);
  for (const jit::KernelInfo& info : kernels.list()) {
    const std::optional<jit::KernelEntry> stored = kernels.read(info.key);
    ASSERT_TRUE(stored) << info.key.hex();
    if (stored->description.starts_with("cell ")) out.emplace(stored->description, jit::parse_cell_program(stored->description));
  }
}

// Every sample model trained for a step (forward and backward bodies), hidden `hidden`, embed 8.
void sample_model_programs(int hidden, std::map<std::string, CellProgram>& out) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    TempDir cache;
    samples::ModelConfig config;
    config.limit = 4;
    config.embed = 8;
    config.hidden = hidden;
    EngineOptions options;
    options.executor = "jit";
    options.cache_directory = cache.path();
    Engine engine(options);
    const auto model = entry.make(config);
    Optimizer optimizer(model->model(), {.kind = "sgd", .learning_rate = 0.01f});
    samples::TrainOptions train;
    train.batch = 4;
    samples::train(*model, engine, optimizer, train);
    programs_in(cache.path(), out);
  }
}

// Random cell programs (tests/support/random_cells.h), forward and backward.
void random_cell_programs(uint64_t first_seed, int count, std::map<std::string, CellProgram>& out) {
  TempDir cache;
  for (uint64_t seed = first_seed; seed < first_seed + uint64_t(count); ++seed) {
    testing::CellProgram program(testing::random_cell_program(seed));
    EngineOptions options;
    options.executor = "jit";
    options.cache_directory = cache.path();
    Engine engine(options);
    Trace trace(engine);
    const std::vector<Expr> compared = program.record(trace);
    std::vector<Expr> terms;
    for (const Expr& x : compared) terms.push_back(sum_elements(x));
    Gradients g;
    trace.backward(sum(terms), g);
  }
  programs_in(cache.path(), out);
}

bool close(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= 2e-4f * (1.0f + std::abs(want));
}

struct Grid {
  int blocks, threads;
};

// Runs each program on `calls` calls of random memory through the LLVM kernel and the emulated
// CUDA kernel (on each grid of blocks of threads) and compares every float either may write.
void expect_equal_to_llvm(const std::map<std::string, CellProgram>& by_text, int calls, std::initializer_list<Grid> grids) {
  std::vector<CellProgram> programs;
  for (const auto& [text, program] : by_text) programs.push_back(program);
  ASSERT_FALSE(programs.empty());
  constexpr int kCudaVector = 32;
  TempDir directory;
  const EmulatedKernels emulated(programs, directory.path(), kCudaVector);
  ASSERT_EQ(emulated.error(), "");
  jit::LlvmBackend backend;
  const int32_t llvm_vector = jit::cell_vector_floats();
  for (size_t p = 0; p < programs.size(); ++p) {
    const CellProgram& program = programs[p];
    SCOPED_TRACE(jit::describe(program));
    std::mt19937 random(uint32_t(p * 7919 + 17));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const int64_t slot = slot_floats_bound(program);
    // Memory: every call's slots, then the shared slots, each slot `slot` floats apart.
    const int64_t call_floats = slot * program.call_slots, shared_floats = slot * std::max(program.shared_slots, 1);
    std::vector<float> memory(size_t(call_floats * calls + shared_floats));
    for (float& v : memory) v = uniform(random);
    // Weights: per weight index, its contraction's shape, random values, packed for each backend.
    std::vector<std::vector<float>> packed_llvm(size_t(program.weight_count())), packed_cuda(packed_llvm.size());
    for (const CellProgram::Stage& stage : program.stages)
      for (const CellProgram::Contraction& c : stage.contractions) {
        if (c.weight < 0 || !packed_llvm[size_t(c.weight)].empty()) continue;
        int64_t k = 0;
        for (const CellProgram::Segment& x : c.x) k += x.rows;
        std::vector<float> w(size_t(int64_t(c.blocks) * program.rows * k));
        for (float& v : w) v = uniform(random) * 0.5f;
        for (auto [packed, vector] : {std::pair{&packed_llvm, llvm_vector}, std::pair{&packed_cuda, kCudaVector}}) {
          // One vector of slack, so the start can be aligned as the executor's allocation is.
          (*packed)[size_t(c.weight)].assign(size_t(jit::packed_weight_floats(program.rows, c.blocks, k, vector) + vector), 0.0f);
        }
        float* llvm_start = packed_llvm[size_t(c.weight)].data();
        while (reinterpret_cast<uintptr_t>(llvm_start) % (size_t(llvm_vector) * 4) != 0) ++llvm_start;
        jit::pack_weight(program.rows, c.blocks, {{w.data(), k}}, llvm_vector, llvm_start);
        jit::pack_weight(program.rows, c.blocks, {{w.data(), k}}, kCudaVector, packed_cuda[size_t(c.weight)].data());
      }
    auto weights_of = [&](std::vector<std::vector<float>>& packed, int32_t vector) {
      std::vector<const float*> out;
      for (std::vector<float>& w : packed) {
        const float* start = w.data();
        if (vector != kCudaVector)
          while (reinterpret_cast<uintptr_t>(start) % (size_t(vector) * 4) != 0) ++start;
        out.push_back(start);
      }
      return out;
    };
    const std::vector<const float*> weights_llvm = weights_of(packed_llvm, llvm_vector);
    const std::vector<const float*> weights_cuda = weights_of(packed_cuda, kCudaVector);
    const jit::CompiledKernel kernel = backend.compile(program);
    auto run = [&](const Grid* cuda) {
      std::vector<float> m = memory;
      std::vector<float*> pointers(size_t(calls) * size_t(program.call_slots));
      for (int j = 0; j < calls; ++j)
        for (int s = 0; s < program.call_slots; ++s)
          pointers[size_t(j * program.call_slots + s)] = m.data() + j * call_floats + s * slot;
      std::vector<const float*> shared;
      for (int s = 0; s < program.shared_slots; ++s) shared.push_back(m.data() + calls * call_floats + s * slot);
      if (cuda) {
        emulated.launch(p)(cuda->blocks, cuda->threads, calls, shared.data(), weights_cuda.data(), pointers.data());
      } else {
        const jit::CellArgs args{calls, shared.data(), weights_llvm.data(), pointers.data()};
        kernel.cell()(&args);
      }
      return m;
    };
    const std::vector<float> want = run(nullptr);
    int64_t written = 0;
    for (size_t i = 0; i < want.size(); ++i) written += want[i] != memory[i];
    EXPECT_GT(written, 0) << "the program wrote nothing";
    for (const Grid& grid : grids) {
      const std::vector<float> got = run(&grid);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(close(got[i], want[i]))
            << grid.blocks << " blocks of " << grid.threads << " threads: float " << i << " (call " << int64_t(i) / call_floats
            << ", slot " << (int64_t(i) % call_floats) / slot << ", at " << int64_t(i) % slot << "): CUDA " << got[i]
            << ", LLVM " << want[i] << ", before " << memory[i];
    }
  }
}

TEST(CudaCellEmulation, SampleModelCellsEqualTheLlvmKernels) {
  std::map<std::string, CellProgram> programs;
  sample_model_programs(8, programs);
  sample_model_programs(13, programs);
  ASSERT_GE(programs.size(), 16u);
  std::cout << programs.size() << " programs\n";
  expect_equal_to_llvm(programs, 5, {{1, 1}, {2, 3}});
}

TEST(CudaCellEmulation, RandomCellsEqualTheLlvmKernels) {
  std::map<std::string, CellProgram> programs;
  random_cell_programs(5101, 40, programs);
  ASSERT_GE(programs.size(), 20u);
  expect_equal_to_llvm(programs, 4, {{1, 1}, {2, 3}});
}

}  // namespace
}  // namespace edb
