// Compiled kernels through the kernel cache: a miss compiles and stores the object, a fresh
// compiler (a new backend: a second process, as far as the JIT knows) on the same directory
// loads it without compiling and computes what the interpreter does, a corrupt file or an
// unloadable object is one warning and a recompile, and a second edb-run on a warm directory
// stores no new kernel and prints the same loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ir/isa.h"
#include "jit/cached_compiler.h"
#include "jit/kernel_ir.h"
#include "tests/support/test_support.h"

namespace edb::jit {
namespace {

namespace fs = std::filesystem;
using edb::testing::read_file;
using edb::testing::TempDir;
using edb::testing::write_file;

// A compiler on `dir` whose warnings land in `warnings` (none expected when null).
CachedCompilerOptions options_for(const std::string& dir, std::vector<std::string>* warnings) {
  CachedCompilerOptions o;
  o.cache.directory = dir;
  o.cache.warn = [warnings](const std::string& line) {
    if (warnings) warnings->push_back(line);
    else ADD_FAILURE() << "unexpected warning: " << line;
  };
  return o;
}

// c = sigmoid(x0) * tanh(x1) + exp(scale(x2)) * bias; h = relu(c + 0.25): strided, gathered
// and shared inputs, two outputs. `variant` changes a constant, so each variant is its own kernel.
Kernel cell_kernel(int variant = 0) {
  Kernel k;
  k.name = "cache test cell " + std::to_string(variant);
  k.inputs = {OperandAccess::strided, OperandAccess::gathered, OperandAccess::strided, OperandAccess::shared};
  const ValueId i = k.unary(KernelOp::sigmoid, k.load(0));
  const ValueId g = k.unary(KernelOp::tanh, k.load(1));
  const ValueId e = k.unary(KernelOp::exp, k.with_constant(KernelOp::scale, k.load(2), 0.5f + float(variant)));
  const ValueId c = k.binary(KernelOp::add, k.binary(KernelOp::cmult, i, g), k.binary(KernelOp::cmult, e, k.load(3)));
  k.store(c);
  k.store(k.unary(KernelOp::relu, k.with_constant(KernelOp::add_const, c, 0.25f)));
  return k;
}

// Runs `compiled` and the interpreter on the same random inputs and compares every output.
void expect_matches_interpreter(const CompiledKernel& compiled, const Kernel& kernel) {
  ASSERT_NE(compiled.function, nullptr);
  const int64_t members = 37, elements = 53;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-3, 3);
  std::vector<std::vector<float>> storage(kernel.inputs.size());
  std::vector<std::vector<const float*>> pointers(kernel.inputs.size());
  std::vector<KernelInput> inputs(kernel.inputs.size());
  for (size_t n = 0; n < kernel.inputs.size(); ++n) {
    const bool shared = kernel.inputs[n] == OperandAccess::shared;
    storage[n].resize(size_t(shared ? elements : members * elements));
    for (float& x : storage[n]) x = value(rng);
    inputs[n] = {storage[n].data(), shared ? 0 : elements, nullptr};
    if (kernel.inputs[n] == OperandAccess::gathered) {
      for (int64_t m = members - 1; m >= 0; --m) pointers[n].push_back(storage[n].data() + m * elements);
      inputs[n] = {nullptr, 0, pointers[n].data()};
    }
  }
  auto run = [&](bool jit) {
    std::vector<std::vector<float>> out(kernel.outputs.size(), std::vector<float>(size_t(members * elements)));
    std::vector<float*> out_pointers;
    for (auto& o : out) out_pointers.push_back(o.data());
    const KernelArgs args{members, elements, inputs.data(), out_pointers.data()};
    if (jit) compiled(args);
    else interpret(kernel, args);
    return out;
  };
  const auto got = run(true), want = run(false);
  for (size_t j = 0; j < got.size(); ++j)
    for (size_t n = 0; n < got[j].size(); ++n)
      ASSERT_LE(std::abs(got[j][n] - want[j][n]), 1e-5 * std::max(1.0f, std::abs(want[j][n])))
          << "output " << j << " element " << n;
}

size_t kernel_files(const std::string& dir) {
  size_t count = 0;
  for (const auto& file : fs::directory_iterator(dir)) count += file.path().extension() == ".kernel";
  return count;
}

TEST(CachedCompiler, AMissCompilesAndStoresAFreshCompilerLoadsWithoutCompiling) {
  TempDir dir;
  const Kernel kernel = cell_kernel();
  KernelKey key;
  {
    CachedCompiler first(options_for(dir.path(), nullptr));
    bool compiled_now = false;
    const CompiledKernel compiled = first.get(kernel, compiled_now);
    EXPECT_TRUE(compiled_now);
    EXPECT_FALSE(compiled.object.empty());
    expect_matches_interpreter(compiled, kernel);
    key = compiled.key;
    EXPECT_TRUE(fs::exists(first.cache().entry_path(key)));
    const auto stored = first.cache().read(key);
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->description, describe(kernel));
    EXPECT_EQ(stored->backend, "llvm");
    EXPECT_EQ(stored->flags, llvm_kernel_flags());
    EXPECT_EQ(stored->object, compiled.object);
    EXPECT_FALSE(stored->ir.empty());  // keep_ir is on by default
    EXPECT_GT(stored->compile_ms, 0);
    first.get(kernel, compiled_now);  // held in memory: no second compile
    EXPECT_FALSE(compiled_now);
    EXPECT_EQ(first.backend().kernels(), 1u);
  }
  CachedCompiler second(options_for(dir.path(), nullptr));  // a fresh JIT on a warm directory
  bool compiled_now = true;
  const CompiledKernel loaded = second.get(kernel, compiled_now);
  EXPECT_FALSE(compiled_now);
  EXPECT_EQ(loaded.key, key);
  EXPECT_EQ(loaded.symbol(), key.symbol());
  expect_matches_interpreter(loaded, kernel);
  EXPECT_EQ(second.cache().counters().disk_hits, 1u);
  EXPECT_EQ(second.cache().counters().stores, 0u);
  EXPECT_EQ(kernel_files(dir.path()), 1u);
}

TEST(CachedCompiler, ACorruptEntryFileIsAWarningAndARecompile) {
  TempDir dir;
  const Kernel kernel = cell_kernel();
  bool compiled_now = false;
  const KernelKey key = CachedCompiler(options_for(dir.path(), nullptr)).get(kernel, compiled_now).key;
  const std::string path = dir.file(key.hex() + ".kernel");
  std::string bytes = read_file(path);
  bytes[bytes.size() / 2] ^= 0x40;
  write_file(path, bytes);

  std::vector<std::string> warnings;
  CachedCompiler reader(options_for(dir.path(), &warnings));
  const CompiledKernel compiled = reader.get(kernel, compiled_now);
  EXPECT_TRUE(compiled_now);
  expect_matches_interpreter(compiled, kernel);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(key.hex()), std::string::npos) << warnings[0];
  EXPECT_EQ(warnings[0].find('\n'), std::string::npos);

  CachedCompiler fresh(options_for(dir.path(), nullptr));  // the recompile repaired the entry
  fresh.get(kernel, compiled_now);
  EXPECT_FALSE(compiled_now);
}

TEST(CachedCompiler, AnUnloadableObjectIsAWarningAndARecompile) {
  TempDir dir;
  const Kernel a = cell_kernel(0), b = cell_kernel(1);
  CompiledKernel compiled_a, compiled_b;
  {
    CachedCompiler writer(options_for(dir.path(), nullptr));
    bool compiled_now = false;
    compiled_a = writer.get(a, compiled_now);
    compiled_b = writer.get(b, compiled_now);
  }
  // Sound files whose objects do not give their kernel: garbage bytes, and a real object that
  // defines another kernel's symbol.
  struct Case {
    std::string name, object;
  };
  for (const Case& c : {Case{"garbage", "this is not an object file"}, Case{"another kernel's object", compiled_a.object}}) {
    SCOPED_TRACE(c.name);
    {
      KernelEntry entry{compiled_b.key, compiled_b.description, "llvm", compiled_b.target, compiled_b.flags,
                        compiled_b.compile_ms, c.object, "", ""};
      CachedCompiler(options_for(dir.path(), nullptr)).cache().store(entry);
    }
    std::vector<std::string> warnings;
    CachedCompiler reader(options_for(dir.path(), &warnings));
    bool compiled_now = false;
    const CompiledKernel kernel_b = reader.get(b, compiled_now);
    EXPECT_TRUE(compiled_now);
    expect_matches_interpreter(kernel_b, b);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("cannot load " + compiled_b.key.hex()), std::string::npos) << warnings[0];
    EXPECT_EQ(warnings[0].find('\n'), std::string::npos) << warnings[0];
    // The failed load left nothing behind: kernel a's own entry still loads into the same JIT.
    const CompiledKernel kernel_a = reader.get(a, compiled_now);
    EXPECT_FALSE(compiled_now);
    expect_matches_interpreter(kernel_a, a);
    EXPECT_EQ(warnings.size(), 1u);

    CachedCompiler fresh(options_for(dir.path(), nullptr));  // the recompile replaced the entry
    expect_matches_interpreter(fresh.get(b, compiled_now), b);
    EXPECT_FALSE(compiled_now);
  }
}

TEST(CachedCompiler, AnEntryForAnotherTargetIsNotLoaded) {
  TempDir dir;
  const Kernel kernel = cell_kernel();
  bool compiled_now = false;
  const CompiledKernel compiled = CachedCompiler(options_for(dir.path(), nullptr)).get(kernel, compiled_now);
  KernelEntry other{kernel_key(compiled.description, "llvm", "some-other-cpu", compiled.flags), compiled.description,
                    "llvm", "some-other-cpu", compiled.flags, 1, compiled.object, "", ""};
  LlvmBackend backend;
  const std::string message = [&] {
    try {
      backend.load(other);
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(message.find("LlvmBackend::load"), std::string::npos) << message;
  EXPECT_NE(message.find("some-other-cpu"), std::string::npos) << message;
  EXPECT_EQ(backend.kernels(), 0u);
}

// Issue 48: a build whose code generator differs (say, sigmoid's sign) while the kernel's
// description, target and flags do not must not run the kernels an earlier build cached. Here the
// other build's entry holds this very kernel's object, so only the code identity in the key tells
// them apart; this build compiles its own and stores it beside the other.
TEST(CachedCompiler, AKernelCachedByAnotherBuildIsNotLoaded) {
  TempDir dir;
  const Kernel kernel = cell_kernel();
  KernelEntry theirs;
  {
    CachedCompiler other_build(options_for(dir.path(), nullptr));
    bool compiled_now = false;
    const CompiledKernel compiled = other_build.get(kernel, compiled_now);
    ASSERT_TRUE(compiled_now);
    theirs = *other_build.cache().read(compiled.key);
  }
  fs::remove(dir.file(theirs.key.hex() + ".kernel"));
  theirs.code = "jit+nvrtc 0000000000000000 llvm " + code_identity().substr(code_identity().rfind(' ') + 1);
  theirs.key = kernel_key(theirs.description, theirs.backend, theirs.target, theirs.flags, theirs.code);
  CachedCompiler(options_for(dir.path(), nullptr)).cache().store(theirs);
  ASSERT_EQ(kernel_files(dir.path()), 1u);

  CachedCompiler this_build(options_for(dir.path(), nullptr));  // no warning expected
  bool compiled_now = false;
  const CompiledKernel compiled = this_build.get(kernel, compiled_now);
  EXPECT_TRUE(compiled_now);
  EXPECT_NE(compiled.key, theirs.key);
  expect_matches_interpreter(compiled, kernel);
  EXPECT_EQ(this_build.cache().counters().disk_hits, 0u);
  EXPECT_EQ(this_build.cache().counters().stores, 1u);
  EXPECT_EQ(kernel_files(dir.path()), 2u);
  EXPECT_EQ(this_build.cache().read(compiled.key)->code, code_identity());
  const KernelCacheStats stats = this_build.cache().stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.other_build_entries, 1u);
  // Nor does the backend link another build's entry handed to it directly.
  LlvmBackend backend;
  EXPECT_THROW(backend.load(theirs), InternalError);
  EXPECT_EQ(backend.kernels(), 0u);
}

// ---- a second edb-run process on a warm directory ----

std::string edb_run_binary() {
  if (const char* path = std::getenv("EDB_RUN_BINARY")) return path;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return (self.parent_path() / ".." / "tools" / "edb-run").lexically_normal().string();
}

TEST(CachedCompiler, ASecondEdbRunOnAWarmDirectoryStoresNothingNewAndAgrees) {
  if (!fs::exists(edb_run_binary())) GTEST_SKIP() << "edb-run not built at " << edb_run_binary();
  TempDir dir;
  const std::string args = "EDB_CACHE_DIR='" + dir.path() + "' '" + edb_run_binary() +
                           "' treelstm --executor jit --json --limit 64 --repeat 1";
  const testing::ProgramRun cold = testing::run_program("/usr/bin/env", args);
  ASSERT_EQ(cold.status, 0) << cold.err;
  EXPECT_EQ(cold.err, "");
  const size_t files = kernel_files(dir.path());
  EXPECT_GT(files, 0u);
  std::map<std::string, fs::file_time_type> written;
  for (const auto& file : fs::directory_iterator(dir.path()))
    if (file.path().extension() == ".kernel") written[file.path().string()] = file.last_write_time();

  const testing::ProgramRun warm = testing::run_program("/usr/bin/env", args);
  ASSERT_EQ(warm.status, 0) << warm.err;
  EXPECT_EQ(warm.err, "");
  EXPECT_EQ(kernel_files(dir.path()), files);
  for (const auto& [path, time] : written) EXPECT_EQ(fs::last_write_time(path), time) << path << " rewritten";
  const auto cold_json = nlohmann::json::parse(cold.out), warm_json = nlohmann::json::parse(warm.out);
  EXPECT_EQ(warm_json.at("kernels_compiled"), 0);
  EXPECT_EQ(warm_json.at("loss"), cold_json.at("loss"));
  // Every hit was counted in the directory's lifetime counters: the warm run found them all.
  KernelCacheOptions options;  // the default memory cap; a disk cap no test reaches
  options.directory = dir.path();
  options.max_bytes = uint64_t{1} << 30;
  KernelCache cache(options);
  EXPECT_GE(cache.stats().hits, files);
}

std::string edb_cache_binary() {
  if (const char* path = std::getenv("EDB_CACHE_BINARY")) return path;
  return (fs::path(edb_run_binary()).parent_path() / "edb-cache").string();
}

// Engines store neither IR nor assembly; `edb-cache show` rebuilds both from the description, and
// since the key comes out the same, says it is the same code.
TEST(CachedCompiler, EdbCacheShowRegeneratesIrAndAssembly) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  TempDir dir;
  CachedCompilerOptions options = options_for(dir.path(), nullptr);
  options.backend = LlvmBackendOptions{false, false};
  CachedCompiler compiler(options);
  bool compiled_now = false;
  const CompiledKernel kernel = compiler.get(cell_kernel(), compiled_now);
  ASSERT_TRUE(compiled_now);
  ASSERT_TRUE(kernel.ir.empty());
  const testing::ProgramRun shown =
      testing::run_program(edb_cache_binary(), "show " + kernel.key.hex() + " --json --dir '" + dir.path() + "'");
  ASSERT_EQ(shown.status, 0) << shown.err;
  const auto json = nlohmann::json::parse(shown.out);
  EXPECT_EQ(json.at("description"), describe(cell_kernel()));
  EXPECT_NE(json.at("ir").get<std::string>().find("define void @" + kernel.symbol()), std::string::npos);
  EXPECT_NE(json.at("assembly").get<std::string>().find(kernel.symbol() + ":"), std::string::npos);
  EXPECT_NE(json.at("regenerated").get<std::string>().find("same key"), std::string::npos);
}

// An entry compiled under EDB_ISA=avx2 is shown with its own code, not this CPU's widest: `edb-cache
// show` regenerates for the entry's ISA (same key), with no AVX-512 register in the assembly.
TEST(CachedCompiler, EdbCacheShowRegeneratesAnEntryForItsOwnIsa) {
  if (!fs::exists(edb_cache_binary())) GTEST_SKIP() << "edb-cache not built at " << edb_cache_binary();
  if (ir::host_isa() < ir::Isa::avx2) GTEST_SKIP() << "this CPU runs no AVX2";
  TempDir dir;
  const testing::ProgramRun run = testing::run_program(
      "env", "EDB_ISA=avx2 EDB_CACHE_DIR='" + dir.path() + "' '" + testing::edb_run_binary() +
                 "' treelstm --limit 4 --repeat 1 --executor jit");
  ASSERT_EQ(run.status, 0) << run.err;
  const testing::ProgramRun listed = testing::run_program(edb_cache_binary(), "list --json --dir '" + dir.path() + "'");
  ASSERT_EQ(listed.status, 0) << listed.err;
  const auto entries = nlohmann::json::parse(listed.out);
  ASSERT_FALSE(entries.empty());
  for (const auto& entry : entries) {
    const std::string hash = entry.at("hash");
    const testing::ProgramRun shown = testing::run_program(
        "env", "-u EDB_ISA '" + edb_cache_binary() + "' show " + hash + " --json --dir '" + dir.path() + "'");
    ASSERT_EQ(shown.status, 0) << shown.err;
    const auto json = nlohmann::json::parse(shown.out);
    EXPECT_NE(json.at("flags").get<std::string>().find("isa=avx2"), std::string::npos) << hash;
    EXPECT_NE(json.at("regenerated").get<std::string>().find("same key"), std::string::npos)
        << hash << ": " << json.at("regenerated").get<std::string>();
    EXPECT_EQ(json.at("assembly").get<std::string>().find("zmm"), std::string::npos) << hash;
  }
}

// Golden kernels: the fused kernels the jit executor builds for a small TreeLSTM workload, by
// their canonical text (which holds no hashes). A change in what is fused, or in how operands
// are read, shows here as a diff; EDB_UPDATE_GOLDEN=1 rewrites the file after a deliberate change.
// The canonical texts of the kernels `edb-run ARGUMENTS` compiles into an empty cache, sorted.
std::vector<std::string> compiled_descriptions(const std::string& arguments) {
  TempDir dir;
  const testing::ProgramRun run = testing::run_program(
      "/usr/bin/env", "EDB_CACHE_DIR='" + dir.path() + "' '" + edb_run_binary() + "' " + arguments);
  EXPECT_EQ(run.status, 0) << run.err;
  std::vector<std::string> texts;
  KernelCacheOptions options;  // the default memory cap; a disk cap no test reaches
  options.directory = dir.path();
  options.max_bytes = uint64_t{1} << 30;
  KernelCache cache(options);
  for (const KernelInfo& info : cache.list()) texts.push_back(cache.read(info.key)->description);
  std::sort(texts.begin(), texts.end());
  return texts;
}

// `texts` against tests/golden/NAME, which EDB_UPDATE_GOLDEN=1 rewrites.
void expect_golden(const std::vector<std::string>& texts, const std::string& name) {
  std::string all;
  for (const std::string& text : texts) all += text + "\n";
  const std::string golden = std::string(EDB_SOURCE_DIR) + "/tests/golden/" + name;
  if (std::getenv("EDB_UPDATE_GOLDEN")) write_file(golden, all);
  EXPECT_EQ(all, read_file(golden)) << "kernels differ from " << golden << " (EDB_UPDATE_GOLDEN=1 rewrites it)";
}

TEST(CachedCompiler, TreeLstmKernelsMatchTheGoldenFile) {
  if (!fs::exists(edb_run_binary())) GTEST_SKIP() << "edb-run not built at " << edb_run_binary();
  const std::vector<std::string> texts =
      compiled_descriptions("treelstm --executor jit --limit 16 --batch 8 --repeat 1 --embed 8 --hidden 8");
  ASSERT_FALSE(HasFailure());
  expect_golden(texts, "treelstm_jit_kernels.txt");
}

// Golden backward cells: the programs of the TreeLSTM's backward bodies (trace/backward.cpp's
// derive_backward, lowered like forward cells: dx = W^T dy over the weight packed transposed, the
// activation gradients from kernel ops) as one training epoch compiles them, by canonical text.
TEST(CachedCompiler, TreeLstmBackwardCellProgramsMatchTheGoldenFile) {
  if (!fs::exists(edb_run_binary())) GTEST_SKIP() << "edb-run not built at " << edb_run_binary();
  std::vector<std::string> texts =
      compiled_descriptions("treelstm --executor jit --limit 16 --batch 8 --embed 8 --hidden 8 --train --epochs 1");
  ASSERT_FALSE(HasFailure());
  std::erase_if(texts, [](const std::string& text) { return text.rfind("cell backward of ", 0) != 0; });
  ASSERT_EQ(texts.size(), 2u) << "the leaf's and the internal node's backward cells";
  expect_golden(texts, "treelstm_backward_cells.txt");
}

}  // namespace
}  // namespace edb::jit
