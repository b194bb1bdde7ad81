// edb-bench-cells: the yardsticks of compiled cells, measured in one run: the selected ISA's FMA peak
// (independent vector FMAs in registers, one and two threads), the cell micro-kernel alone (one
// contraction, its blocks stored) at each sample model's cell shapes, the whole TreeLSTM internal
// cell, and Eigen's GEMM at the same shapes, for N = 1, 4, 16, 64, 256, 1024 calls; then recording and scheduling per call.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/fma_peak.h"
#include "bench/gemm_rate.h"
#include "edbatch/edbatch.h"
#include "edbatch/errors.h"
#include "ir/isa.h"
#include "jit/cell_program.h"
#include "jit/llvm_backend.h"
#include "tools/flags.h"

namespace edb::bench {

namespace {

using edb::Cell;
using edb::Engine;
using edb::Expr;
using edb::Model;
using edb::Parameter;
using edb::Trace;

using Clock = std::chrono::steady_clock;
using Program = jit::CellProgram;

struct Shape {
  std::string name;   // model and contraction
  int rows;           // block rows (hidden)
  int blocks;         // gates
  std::vector<int> x; // the x pieces' rows (K = their sum)
};

// One contraction over x pieces (call slots 0..), bias shared slot 0, every block stored (call
// slots after the pieces): the micro-kernel alone.
Program contraction_program(const Shape& shape) {
  Program p;
  p.name = shape.name;
  p.rows = shape.rows;
  Program::Stage stage;
  Program::Contraction c;
  c.blocks = shape.blocks;
  int32_t slot = 0;
  for (int rows : shape.x) c.x.push_back({{slot++, false}, 0, rows});
  c.has_bias = true;
  c.bias = {{0, true}, 0, shape.rows * shape.blocks};
  c.weight = 0;
  stage.contractions.push_back(c);
  for (int g = 0; g < shape.blocks; ++g) {
    Program::Instruction in;
    in.kind = Program::Instruction::accumulator;
    in.contraction = 0;
    in.block = g;
    stage.body.push_back(in);
    stage.stores.push_back({g, {slot, false}, g});
  }
  p.stages.push_back(stage);
  p.call_slots = slot + 1;
  p.shared_slots = 1;
  return p;
}

// The TreeLSTM internal cell: (h1, c1, h2, c2) -> (h, c) with iou = U [h1; h2] + b and one forget
// gate per child (the sample's body as the lowering builds it, with only h and c stored).
Program treelstm_internal(int h) {
  Program p;
  p.name = "treelstm_internal";
  p.rows = h;
  Program::Stage stage;
  auto contraction = [&](int blocks, std::vector<Program::Segment> x, int bias) {
    Program::Contraction c;
    c.blocks = blocks;
    c.x = std::move(x);
    c.has_bias = true;
    c.bias = {{bias, true}, 0, blocks * h};
    c.weight = int32_t(stage.contractions.size());
    stage.contractions.push_back(c);
  };
  contraction(3, {{{0, false}, 0, h}, {{2, false}, 0, h}}, 0);
  contraction(1, {{{0, false}, 0, h}}, 1);
  contraction(1, {{{2, false}, 0, h}}, 1);
  auto value = [&](Program::Instruction in) {
    stage.body.push_back(in);
    return int32_t(stage.body.size() - 1);
  };
  auto accumulator = [&](int c, int g) {
    Program::Instruction in;
    in.kind = Program::Instruction::accumulator;
    in.contraction = c;
    in.block = g;
    return value(in);
  };
  auto load = [&](int slot) {
    Program::Instruction in;
    in.kind = Program::Instruction::load;
    in.operand = {slot, false};
    return value(in);
  };
  auto op = [&](jit::KernelOp kernel_op, int a, int b = -1) {
    Program::Instruction in;
    in.op = kernel_op;
    in.a = a;
    in.b = b;
    return value(in);
  };
  using K = jit::KernelOp;
  const int i = op(K::sigmoid, accumulator(0, 0)), o = op(K::sigmoid, accumulator(0, 1)), u = op(K::tanh, accumulator(0, 2));
  const int f1 = op(K::sigmoid, accumulator(1, 0)), f2 = op(K::sigmoid, accumulator(2, 0));
  const int c = op(K::add, op(K::add, op(K::cmult, i, u), op(K::cmult, f1, load(1))), op(K::cmult, f2, load(3)));
  const int hv = op(K::cmult, o, op(K::tanh, c));
  stage.stores.push_back({hv, {4, false}, 0});
  stage.stores.push_back({c, {5, false}, 0});
  p.stages.push_back(stage);
  p.call_slots = 6;
  p.shared_slots = 2;
  return p;
}

// Program flops per call: 2 per multiply-add of its contractions (elementwise work not counted).
double contraction_flops(const Program& p) {
  double flops = 0;
  for (const Program::Stage& stage : p.stages)
    for (const Program::Contraction& c : stage.contractions) {
      int64_t k = 0;
      for (const Program::Segment& x : c.x) k += x.rows;
      flops += 2.0 * double(c.blocks) * p.rows * double(k);
    }
  return flops;
}

// GFLOP/s of a compiled program over n calls whose slots each point at their own buffer (apart in
// memory, as the arena's gathers are), weights packed once.
double program_gflops(jit::LlvmBackend& backend, const Program& p, int n, bool print_assembly) {
  const jit::CompiledKernel kernel = backend.compile(p);
  if (print_assembly) std::cout << kernel.assembly << '\n';
  const int32_t vector = jit::cell_vector_floats();
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  // Buffers big enough for any slot (the widest operand), one per call and slot.
  int64_t widest = 0;
  for (const Program::Stage& stage : p.stages)
    for (const Program::Contraction& c : stage.contractions) {
      widest = std::max<int64_t>(widest, int64_t(c.blocks) * p.rows);
      for (const Program::Segment& x : c.x) widest = std::max<int64_t>(widest, x.row + x.rows);
    }
  const int64_t stride = widest + 37;  // apart, and not aligned
  std::vector<float> memory(size_t(stride) * size_t(n) * size_t(p.call_slots) + 64);
  for (float& v : memory) v = uniform(random);
  std::vector<float*> pointers(size_t(n) * size_t(p.call_slots));
  for (size_t i = 0; i < pointers.size(); ++i) pointers[i] = memory.data() + 1 + int64_t(i) * stride;
  std::vector<float> shared_memory(size_t(widest) * size_t(p.shared_slots));
  for (float& v : shared_memory) v = uniform(random);
  std::vector<const float*> shared;
  for (int s = 0; s < p.shared_slots; ++s) shared.push_back(shared_memory.data() + int64_t(s) * widest);
  std::vector<std::vector<float, Eigen::aligned_allocator<float>>> packed;
  std::vector<const float*> weights;
  for (const Program::Stage& stage : p.stages)
    for (const Program::Contraction& c : stage.contractions) {
      int64_t k = 0;
      for (const Program::Segment& x : c.x) k += x.rows;
      std::vector<float> w(size_t(c.blocks) * size_t(p.rows) * size_t(k));
      for (float& v : w) v = uniform(random) * 0.1f;
      packed.emplace_back(size_t(jit::packed_weight_floats(p.rows, c.blocks, k, vector)));
      jit::pack_weight(p.rows, c.blocks, {{w.data(), k}}, vector, packed.back().data());
      weights.push_back(packed.back().data());
    }
  const jit::CellArgs args{n, shared.data(), weights.data(), pointers.data()};
  const jit::CellFunction function = kernel.cell();
  const double seconds = time_per_call([&] { function(&args); }, 5, 0.01);  // ~10 ms a timing
  return contraction_flops(p) * n / seconds / 1e9;
}

// The work per trace that is not arithmetic, at the call level: recording one call of a
// TreeLSTM-shaped cell (4 arguments, two outputs), and the policy's schedule step per call-level
// node, over `chains` chains of `length` calls each (one trace, greedy, jit).
struct CallLevelCosts {
  double record_ns_per_call = 0;         // the allocation-free call (outputs into a span)
  double record_vector_ns_per_call = 0;  // the call that returns a std::vector
  double schedule_ns_per_node = 0;
  int64_t calls = 0;
};

CallLevelCosts call_level_costs(int h, int chains, int length) {
  Model model("calls", 1);
  const Parameter u = model.add_parameter("U", 3 * h, 2 * h), b = model.add_parameter("b", 3 * h, 1);
  const Parameter f = model.add_parameter("Uf", h, h), bf = model.add_parameter("bf", h, 1);
  const Cell cell("treelstm_like", {{h, 1}, {h, 1}, {h, 1}, {h, 1}}, [&](Trace& t, std::span<const Expr> in) {
    const Expr iou = affine({t.param(b), t.param(u), concat({in[0], in[2]})});
    const Expr f1 = sigmoid(affine({t.param(bf), t.param(f), in[0]})), f2 = sigmoid(affine({t.param(bf), t.param(f), in[2]}));
    const Expr c = sum({cmult(sigmoid(slice(iou, 0, h)), tanh(slice(iou, 2 * h, 3 * h))), cmult(f1, in[1]), cmult(f2, in[3])});
    return std::vector<Expr>{cmult(sigmoid(slice(iou, h, 2 * h)), tanh(c)), c};
  });
  std::vector<double> record_times, record_vector_times, schedule_times;
  CallLevelCosts costs;
  for (int round = 0; round < 7; ++round) {  // the first warms up (the cell's body, the kernels)
    Engine engine;
    Trace trace(engine);
    const std::vector<float> zeros(size_t(h), 0.1f);
    std::vector<std::pair<Expr, Expr>> state;
    for (int c = 0; c < chains; ++c) state.emplace_back(trace.input(zeros), trace.input(zeros));
    // Odd rounds record with the vector-returning call, even ones into a span.
    const bool into_span = round % 2 == 0;
    const auto t0 = Clock::now();
    Expr out[2];
    for (int step = 0; step < length; ++step)
      for (auto& [hs, cs] : state) {
        const Expr in[4] = {hs, cs, hs, cs};
        if (into_span) {
          cell(trace, in, out);
          hs = out[0];
          cs = out[1];
        } else {
          const std::vector<Expr> outputs = cell(trace, in);
          hs = outputs[0];
          cs = outputs[1];
        }
      }
    const double record = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    trace.run();
    state[0].first.value();
    costs.calls = int64_t(chains) * length;
    if (round == 0) continue;
    (into_span ? record_times : record_vector_times).push_back(record / double(costs.calls));
    // Call-level nodes the policy sees: the calls, and the 2 * chains inputs (leaves, not scheduled).
    schedule_times.push_back(engine.stats().time.schedule_ms * 1e6 / double(costs.calls));
  }
  std::sort(record_times.begin(), record_times.end());
  std::sort(record_vector_times.begin(), record_vector_times.end());
  costs.record_vector_ns_per_call = record_vector_times[record_vector_times.size() / 2];
  std::sort(schedule_times.begin(), schedule_times.end());
  costs.record_ns_per_call = record_times[record_times.size() / 2];
  costs.schedule_ns_per_node = schedule_times[schedule_times.size() / 2];
  return costs;
}

int run(int argc, char** argv) {
  tools::Flags flags("edb-bench-cells", {"hidden", "embed", "calls"}, {"json", "assembly", "help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::cout << "usage: edb-bench-cells [--hidden N] [--embed N] [--calls N] [--json] [--assembly]\n"
                 "  The FMA peak (1 and 2 threads), the compiled cell micro-kernel alone at each sample model's\n"
                 "  cell shapes and the whole TreeLSTM internal cell, against Eigen's GEMM at the same shapes,\n"
                 "  for N = 1, 4, 16, 64, 256, 1024 calls (--calls N: that N only). --assembly prints the\n"
                 "  TreeLSTM cell's code. Last, the work that is not arithmetic per call-level node: recording\n"
                 "  a cell call, and the policy's schedule step.\n";
    return 0;
  }
  const int h = int(flags.get_int("hidden", 128, 1, 4096));
  const int embed = int(flags.get_int("embed", 128, 1, 4096));
  std::vector<int> ns{1, 4, 16, 64, 256, 1024};
  if (flags.has("calls")) ns = {int(flags.get_int("calls", 64, 1, 100000))};
  const bool json = flags.has("json");

  const double peak1 = fma_peak(ir::selected_isa(), 1), peak2 = fma_peak(ir::selected_isa(), 2);
  jit::LlvmBackendOptions options;
  options.keep_assembly = flags.has("assembly");
  jit::LlvmBackend backend(options);
  const int tagger_h = 50;
  const std::vector<Shape> shapes = {
      {"treelstm internal iou (U [h1; h2])", h, 3, {h, h}},
      {"treelstm internal forget (U_f h)", h, 1, {h}},
      {"treelstm leaf iou (W x)", h, 3, {embed}},
      {"bilstm step gates (W x + U h), hidden 50", tagger_h, 4, {embed, tagger_h}},
      {"lattice lstm char gates (W x + U h)", h, 4, {embed, h}},
  };
  nlohmann::json rows = nlohmann::json::array();
  if (!json)
    std::printf("FMA peak: %.1f GFLOP/s on 1 thread, %.1f on 2 (vector width %d floats)\n\n%-44s %6s %10s %8s %10s\n", peak1,
                peak2, jit::cell_vector_floats(), "shape", "N", "kernel", "of peak", "Eigen GEMM");
  auto report = [&](const std::string& name, const Program& program, int gemm_rows, int gemm_inner) {
    for (int n : ns) {
      const double kernel = program_gflops(backend, program, n, options.keep_assembly && n == ns.front());
      const double eigen = gemm_gflops(gemm_rows, gemm_inner, n, 5);
      rows.push_back({{"shape", name}, {"calls", n}, {"kernel_gflops", kernel}, {"fraction_of_peak", kernel / peak1},
                      {"eigen_gflops", eigen}});
      if (!json) std::printf("%-44s %6d %10.1f %7.0f%% %10.1f\n", name.c_str(), n, kernel, 100 * kernel / peak1, eigen);
    }
  };
  for (const Shape& shape : shapes) {
    int k = 0;
    for (int x : shape.x) k += x;
    report(shape.name, contraction_program(shape), shape.rows * shape.blocks, k);
  }
  report("treelstm internal cell (all gates, c, h)", treelstm_internal(h), 5 * h, 2 * h);
  const CallLevelCosts costs = call_level_costs(h, 64, 200);
  if (!json)
    std::printf("\nper call-level node (%lld calls of a TreeLSTM-shaped cell in 64 chains, greedy): recording %.0f ns "
                "a call (%.0f returning a std::vector), the policy's schedule step %.0f ns a node (each target: at "
                "most 60)\n",
                static_cast<long long>(costs.calls), costs.record_ns_per_call, costs.record_vector_ns_per_call,
                costs.schedule_ns_per_node);
  if (json)
    std::cout << nlohmann::json{{"fma_peak_gflops", {{"threads_1", peak1}, {"threads_2", peak2}}},
                                {"vector_floats", jit::cell_vector_floats()}, {"rows", rows},
                                {"record_ns_per_call", costs.record_ns_per_call},
                                {"record_vector_ns_per_call", costs.record_vector_ns_per_call},
                                {"schedule_ns_per_call_level_node", costs.schedule_ns_per_node}}
                     .dump(2)
              << '\n';
  return 0;
}

}  // namespace

}  // namespace edb::bench

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-cells", edb::bench::run, argc, argv); }
