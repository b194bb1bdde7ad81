// Executors run a schedule: reference (node by node, the oracle), batched (one Eigen call per
// batch) and jit (cells and elementwise batches compiled by LLVM and kept in a disk cache).
// Threads and the memory planner are engine options too.
#include <edbatch/edbatch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

edb::Tensor run(const edb::EngineOptions& options, edb::Model& model) {
  edb::Engine engine(options);
  const edb::Parameter W = model.parameter("W"), b = model.parameter("b");
  edb::Trace trace(engine);
  std::vector<edb::Expr> outputs;
  for (int i = 0; i < 32; ++i) {
    edb::Expr x = trace.input({float(i % 7), 1.0f, -1.0f, 0.5f});
    edb::Expr g = edb::sigmoid(edb::affine({trace.param(b), trace.param(W), x}));
    outputs.push_back(edb::cmult(g, edb::tanh(x)) + 1.0f);
  }
  return edb::concat(outputs).value();
}

int main() {
  edb::Model model("gates");
  model.add_parameter("W", 4, 4);
  model.add_parameter("b", 4, 1);
  const std::string cache = (std::filesystem::temp_directory_path() / "edb-guide-kernels").string();

  edb::EngineOptions reference;
  reference.executor = "reference";
  const edb::Tensor expected = run(reference, model);

  std::vector<edb::EngineOptions> variants(4);
  variants[0].executor = "batched";  // the baseline (the default is jit)
  variants[1].threads = 2;           // execution overlaps recording the next trace
  variants[2].memplan = true;        // the PQ-tree layout: fewer gathered operands
  variants[3].executor = "jit";      // compiled once, then found in the cache directory
  variants[3].cache_directory = cache;  // default: $EDB_CACHE_DIR, else ~/.cache/edbatch
  bool ok = true;
  for (const edb::EngineOptions& options : variants) {
    const edb::Tensor value = run(options, model);
    for (size_t i = 0; i < value.data.size(); ++i)
      ok = ok && std::fabs(value.data[i] - expected.data[i]) <= 1e-5f * std::fmax(1.0f, std::fabs(expected.data[i]));
    std::printf("%s, %d thread(s), memplan %s: %s\n", options.executor.c_str(), options.threads,
                options.memplan ? "on" : "off", ok ? "equal to the reference" : "DIFFERENT");
  }
  std::filesystem::remove_all(cache);
  return ok ? 0 : 1;
}
