// edb-bench-isa: the selected ISA's (EDB_ISA) yardsticks in one run: its FMA peak at one and two
// threads, and the weight-gradient micro-kernel (runtime/outer_products) alone at the sample
// models' weight shapes, one thread, as GFLOP/s and as a fraction of that peak.
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/fma_peak.h"
#include "ir/isa.h"
#include "jit/host.h"
#include "runtime/outer_kernel.h"
#include "runtime/outer_products.h"
#include "tools/flags.h"

namespace edb::bench {

namespace {

struct Shape {
  std::string name;
  int64_t rows, cols, uses;  // dW's rows and columns; the uses summed (a trace of 64 sentences)
};

// TreeLSTM (embed and hidden 128) over 64 SST sentences: about 1,200 leaves and 1,150 internal
// nodes; the BiLSTM tagger (embed 128, hidden 50) over 64 sentences of about 24 words, one direction.
const Shape kShapes[] = {
    {"treelstm W_iou 384x128", 384, 128, 1200},
    {"treelstm U_iou 384x256", 384, 256, 1150},
    {"treelstm U_f 128x128", 128, 128, 1150},
    {"bilstm W 200x128", 200, 128, 1536},
    {"bilstm U 200x50", 200, 50, 1536},
};


// The kernel's GFLOP/s on one thread at `shape`, its columns scattered in a pool as a trace leaves them.
double outer_products_gflops(const Shape& shape) {
  const int64_t stride = shape.rows + shape.cols + 16;
  std::vector<float> pool(size_t(stride * shape.uses));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = float(int64_t(i * 2654435761u % 1000) - 500) * 1e-3f;
  std::vector<const float*> a, b;
  for (int64_t k = 0; k < shape.uses; ++k) {
    const int64_t at = (k * 7919) % shape.uses;
    a.push_back(pool.data() + at * stride);
    b.push_back(pool.data() + at * stride + shape.rows + 16);
  }
  const runtime::OuterProducts products{shape.rows, shape.cols, a, b};
  std::vector<float> panels(size_t(products.scratch_floats()) + 16), out(size_t(shape.rows * shape.cols));
  const auto one_piece = [](int64_t count, const std::function<void(int64_t, int64_t)>& body) { body(0, count); };
  const double seconds = time_per_call([&] { products.compute(out.data(), panels.data(), one_piece); }, 7, 0.02);
  return 2.0 * double(shape.rows * shape.cols * shape.uses) / seconds / 1e9;
}

int run(int argc, char** argv) {
  tools::Flags flags("edb-bench-isa", {}, {"json", "help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::cout << "usage: [EDB_ISA=native|avx512|avx2|generic] edb-bench-isa [--json]\n"
                 "The selected ISA's FMA peak (1 and 2 threads) and the weight-gradient kernel's GFLOP/s at the\n"
                 "sample models' weight shapes (one thread), with its fraction of the peak.\n";
    return 0;
  }
  const ir::Isa isa = ir::selected_isa();
  const double peak1 = fma_peak(isa, 1), peak2 = fma_peak(isa, 2);
  nlohmann::json rows = nlohmann::json::array();
  const runtime::OuterKernel& kernel = runtime::OuterProducts::selected_kernel();
  if (!flags.has("json")) {
    std::printf("ISA %s on %s: FMA peak %.1f GFLOP/s (1 thread), %.1f (2 threads); weight-gradient tile %lldx%lld\n",
                ir::isa_name(isa), jit::host_cpu_name().c_str(), peak1, peak2, (long long)kernel.rows, (long long)kernel.cols);
    std::printf("%-28s %10s %8s\n", "weight gradient", "GFLOP/s", "of peak");
  }
  for (const Shape& shape : kShapes) {
    const double gflops = outer_products_gflops(shape);
    rows.push_back({{"shape", shape.name}, {"rows", shape.rows}, {"cols", shape.cols}, {"uses", shape.uses},
                    {"gflops", gflops}, {"of_peak", gflops / peak1}});
    if (!flags.has("json")) std::printf("%-28s %10.1f %7.0f%%\n", shape.name.c_str(), gflops, 100 * gflops / peak1);
  }
  if (flags.has("json"))
    std::cout << nlohmann::json{{"isa", ir::isa_name(isa)},
                                {"cpu", jit::host_cpu_name()},
                                {"fma_peak_gflops", {{"threads_1", peak1}, {"threads_2", peak2}}},
                                {"tile", {kernel.rows, kernel.cols}},
                                {"outer_products", rows}}
                     .dump(2)
              << "\n";
  return 0;
}

}  // namespace

}  // namespace edb::bench

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-isa", edb::bench::run, argc, argv); }
