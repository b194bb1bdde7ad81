// Running batches of cell calls through the kernels compiled from their cells' programs
// (runtime/cell_lowering.h lowers them). Every value the body computes is still written to its
// arena place (the backward pass and later batches read them); what goes away is the
// batch-by-batch interpretation: operand classification, separate GEMM and elementwise passes,
// gather copies.
#include "runtime/cell_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>

#include "edbatch/errors.h"
#include "jit/cached_compiler.h"

namespace edb::runtime {

namespace {

using Program = jit::CellProgram;

constexpr int64_t kMinCallsPerTask = 16;  // calls worth a thread hand-off, split by calls
// Below that, a batch splits by hidden units (row tiles of the packed weights: each thread streams
// only its part of them) into pieces of at least this much arithmetic, about 10 us on one core:
// worth waking a sleeping thread for.
constexpr int64_t kMinFlopsPerPiece = 400'000;
// A weight repacked after an optimizer step is cut by row tiles into pieces of at least this many
// floats (about 20 us of copying).
constexpr int64_t kMinPackFloats = 32'768;


}  // namespace

struct CellKernels::PackedWeight {
  std::vector<PackedSource> sources;  // per piece
  float* data = nullptr;
  int64_t floats = 0;
  ~PackedWeight() { std::free(data); }
};

struct CellKernels::Cell {
  const CellLowering* lowering = nullptr;  // its CallCell's
  jit::CompiledKernel kernel;
  int32_t vector = 0;
  std::vector<std::unique_ptr<PackedWeight>> weights;
  std::vector<const float*> weight_pointers;
  // How a batch of its calls splits: the contractions' flops per call, the program's row tiles and
  // where a tile range may begin (jit::cell_tile_step); tile ranges for single-stage programs only.
  int64_t flops_per_call = 0;
  int64_t tiles = 1;
  int64_t tile_step = 1;
  bool splits_by_tiles = false;
};

struct CellKernels::Launch {
  std::shared_ptr<Cell> cell;
  int64_t calls = 0;
  std::vector<float*> pointers;  // the calls' tables
  std::vector<const float*> shared;
  std::vector<float> sums;  // batch calls' arguments of several terms, summed
};

CellKernels::CellKernels(std::string cache_directory) : cache_directory_(std::move(cache_directory)), cells_(1024) {}
CellKernels::~CellKernels() = default;

std::shared_ptr<CellKernels::Cell>& CellKernels::slot(const CallCell* cell) {
  if (std::shared_ptr<Cell>* found = cells_.find(cell)) return *found;
  return *cells_.insert(cell, nullptr);  // empty: the caller makes it, last used now
}

void CellKernels::set_capacity(size_t entries) { cells_.set_limits(std::max<size_t>(entries, 1)); }

void CellKernels::clear() {
  cells_.clear();
  launches_.clear();  // they hold cells too
}

CacheSize CellKernels::sizes() const {
  CacheSize size = cells_.sizes();
  for (const auto& entry : cells_)
    if (entry.value)
      for (const auto& packed : entry.value->weights)
        if (packed) size.bytes += packed->floats * int64_t(sizeof(float));
  return size;
}

void CellKernels::compile(Cell& cell, Stats& stats) {
  if (!compiler_) compiler_ = &jit::shared_compiler(cache_directory_);
  bool compiled_now = false;
  cell.kernel = compiler_->get(cell.lowering->program, compiled_now);
  if (compiled_now) {
    stats.kernels_compiled += 1;
    stats.time.compile_ms += cell.kernel.compile_ms;
  } else {
    stats.cache_hits += 1;
  }
  cell.vector = jit::cell_vector_floats();
  const Program& program = cell.lowering->program;
  cell.flops_per_call = 0;
  for (const Program::Stage& stage : program.stages)
    for (const Program::Contraction& c : stage.contractions) {
      int64_t k = 0;
      for (const Program::Segment& x : c.x) k += x.rows;
      cell.flops_per_call += 2 * int64_t(c.blocks) * program.rows * k * stage.columns;
    }
  cell.tiles = jit::cell_tiles(program);
  cell.tile_step = jit::cell_tile_step(program);
  cell.splits_by_tiles = program.stages.size() == 1 && program.stages[0].steps.empty();  // a column step reads every row
  cell.weights.resize(cell.lowering->weights.size());
  cell.weight_pointers.resize(cell.lowering->weights.size());
}

void CellKernels::refresh_weights(Cell& cell, const std::function<const ir::ParameterInfo&(size_t, size_t)>& piece,
                                  ThreadPool& pool) {
  const CellLowering& lowering = *cell.lowering;
  for (size_t w = 0; w < lowering.weights.size(); ++w) {
    const CellLowering::Weight& weight = lowering.weights[w];
    std::unique_ptr<PackedWeight>& packed = cell.weights[w];
    std::vector<PackedSource> sources;
    std::vector<jit::WeightPiece> pieces;
    int64_t k = 0;
    for (size_t p = 0; p < weight.pieces.size(); ++p) {
      const ir::ParameterInfo& info = piece(w, p);
      sources.push_back(packed_source(info));
      pieces.push_back(weight_piece(weight, info));  // read where the parameter lies
      k += pieces.back().cols;
    }
    if (packed && packed->sources == sources) continue;
    if (!packed) packed = std::make_unique<PackedWeight>();
    const int64_t floats = jit::packed_weight_floats(lowering.program.rows, weight.blocks, k, cell.vector);
    if (floats != packed->floats) {
      std::free(packed->data);
      const size_t bytes = (size_t(floats) * sizeof(float) + 63) / 64 * 64;
      packed->data = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!packed->data) throw std::bad_alloc();
      packed->floats = floats;
    }
    // A piece of tiles per thread where each holds enough floats to be worth a task.
    const int64_t tiles = (lowering.program.rows + cell.vector - 1) / cell.vector;
    const int64_t cuts = std::min<int64_t>({pool.size(), tiles, std::max<int64_t>(1, floats / kMinPackFloats)});
    if (cuts <= 1) {
      jit::pack_weight(lowering.program.rows, weight.blocks, pieces, cell.vector, packed->data);
    } else {
      const std::function<void(int)> task = [&](int i) {
        jit::pack_weight(lowering.program.rows, weight.blocks, pieces, cell.vector, packed->data, tiles * i / cuts,
                         tiles * (i + 1) / cuts);
      };
      pool.parallel_for(int(cuts), task);
    }
    packed->sources = std::move(sources);
    cell.weight_pointers[w] = packed->data;
  }
}

void CellKernels::launch(size_t lane, ThreadPool& pool, Stats& stats) {
  const Launch& prepared = *launches_.at(lane);
  const Cell& cell = *prepared.cell;
  const int64_t calls = prepared.calls;
  const size_t slots = cell.lowering->call_slots.size();
  const jit::CellFunction function = cell.kernel.cell();
  auto run_calls = [&](int64_t begin, int64_t end, int64_t tile_begin, int64_t tile_end) {
    const jit::CellArgs args{end - begin, prepared.shared.data(), cell.weight_pointers.data(),
                             prepared.pointers.data() + begin * int64_t(slots), tile_begin, tile_end};
    function(&args);
  };
  const int64_t threads = pool.size();
  int64_t pieces = std::min<int64_t>(threads, std::max<int64_t>(1, calls / kMinCallsPerTask));
  if (pieces < threads && cell.splits_by_tiles) {
    // Too few calls to split by calls: by hidden units, when the arithmetic is worth it.
    const int64_t steps = (cell.tiles + cell.tile_step - 1) / cell.tile_step;
    const int64_t by_tiles = std::min({threads, steps, calls * cell.flops_per_call / kMinFlopsPerPiece});
    if (by_tiles > std::max<int64_t>(pieces, 1)) {
      const std::function<void(int)> task = [&](int i) {
        const int64_t begin = steps * i / by_tiles * cell.tile_step;
        const int64_t end = i + 1 == by_tiles ? -1 : steps * (i + 1) / by_tiles * cell.tile_step;
        run_calls(0, calls, begin, end);
      };
      pool.parallel_for(int(by_tiles), task);
      stats.kernel_calls += by_tiles;
      return;
    }
  }
  if (pieces <= 1) {
    run_calls(0, calls, 0, -1);
    pieces = 1;
  } else {
    const std::function<void(int)> task = [&](int i) { run_calls(calls * i / pieces, calls * (i + 1) / pieces, 0, -1); };
    pool.parallel_for(int(pieces), task);
  }
  stats.kernel_calls += pieces;
}

void CellKernels::run_calls(std::span<const ir::NodeId> calls, const Values& values, ThreadPool& pool, Stats& stats) {
  prepare(calls, values, pool, stats, 0);
  launch(0, pool, stats);
}

void CellKernels::prepare(std::span<const ir::NodeId> calls, const Values& values, ThreadPool& pool, Stats& stats,
                          size_t lane) {
  const ir::Graph& graph = values.graph;
  const auto& call_cell = static_cast<const CallCell&>(graph.cell(graph.node(calls[0]).attrs.index));
  std::shared_ptr<Cell>& slot = this->slot(&call_cell);
  if (!slot) {
    slot = std::make_shared<Cell>();
    slot->lowering = &call_cell.lowering;
    compile(*slot, stats);
  }
  Cell& cell = *slot;
  if (launches_.size() <= lane) launches_.resize(lane + 1);
  if (!launches_[lane]) launches_[lane] = std::make_unique<Launch>();
  Launch& l = *launches_[lane];
  l.cell = slot;
  refresh_weights(
      cell, [&](size_t w, size_t p) -> const ir::ParameterInfo& { return weight_parameter(call_cell, w, p); }, pool);
  const size_t slots = call_cell.slots.size();
  // A batch call (ir::CallBatch) is its members' calls: their frames one after another, their
  // arguments read at rows of nodes, an argument of several terms summed here first.
  size_t members = 0, summed = 0;
  for (ir::NodeId c : calls) {
    const ir::Node& n = graph.node(c);
    if (!ir::is_call_batch(n)) {
      ++members;
      continue;
    }
    members += size_t(n.attrs.end);
    const ir::CallBatch batch = ir::call_batch(graph, c);
    for (size_t j = 0; j < batch.terms.size(); ++j)
      if (batch.terms[j] > 1) summed += size_t(batch.members) * size_t(call_cell.arguments[j].size());
  }
  l.calls = int64_t(members);
  l.pointers.resize(members * slots);
  l.sums.resize(summed);
  float* sum = l.sums.data();
  std::vector<float*>& argument = arguments_;  // one member's arguments
  argument.resize(call_cell.arguments.size());
  // Call j's table: rows of its frame, its arguments (argument_at(i): where argument i lies),
  // the cell's constants.
  const auto fill = [&](size_t j, float* frame, const auto& argument_at) {
    float** table = l.pointers.data() + j * slots;
    for (size_t s = 0; s < slots; ++s) {
      const CallCell::Slot& at = call_cell.slots[s];
      table[s] = at.kind == CallCell::Slot::frame      ? frame + at.at
                 : at.kind == CallCell::Slot::argument ? argument_at(size_t(at.at))
                                                       : const_cast<float*>(at.constant);
    }
  };
  size_t j = 0;  // the member's table
  for (ir::NodeId c : calls) {
    const ir::Node& n = graph.node(c);
    const auto args = graph.args(c);
    if (!ir::is_call_batch(n)) {  // a call: its slots read its arguments where they lie
      fill(j++, values.out(c), [&](size_t i) { return const_cast<float*>(values.in(args[i])); });
      continue;
    }
    const ir::CallBatch batch = ir::call_batch(graph, c);
    size_t term = 0;
    for (int32_t m = 0; m < batch.members; ++m, ++j) {
      float* const frame = values.out(c) + int64_t(m) * call_cell.frame_floats;
      for (size_t a = 0; a < argument.size(); ++a) {
        const auto at = [&](size_t t) { return values.in(args[t]) + batch.rows[t]; };
        const int32_t terms = batch.terms[a];
        if (terms == 1) {
          argument[a] = const_cast<float*>(at(term++));
          continue;
        }
        const int64_t size = call_cell.arguments[a].size();
        std::copy_n(at(term++), size, sum);
        for (int32_t t = 1; t < terms; ++t) {
          const float* x = at(term++);
          for (int64_t r = 0; r < size; ++r) sum[r] += x[r];
        }
        argument[a] = sum;
        sum += size;
      }
      fill(j, frame, [&](size_t i) { return argument[i]; });
    }
  }
  l.shared.assign(call_cell.shared.begin(), call_cell.shared.end());
}

}  // namespace edb::runtime
