// The cell program: a batch of calls of one cell body as one kernel, backend-neutral and free of
// LLVM types. Lowering a body into a program is runtime/'s job (runtime/cell_lowering.h); the LLVM
// backend compiles it (jit/llvm_cell.cpp), the CUDA renderer will take the same program.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jit/kernel_ir.h"

namespace edb::jit {

// Every value a program computes is cut into blocks of `rows` rows (the cell's hidden size); a
// value of G * rows rows is G blocks. A call reads and writes through its own pointer table
// (call slots: arguments, and the arena places of the values it stores) and a table shared by every
// call (shared slots: parameters read elementwise, biases).
//
// A stage is one pass over every row tile of every call: its contractions (acc = bias + W x, W a
// weight packed once per model version, x read through the calls' pointers: the gather is in the
// loads) are accumulated in registers, then its body runs on the accumulators tile by tile and
// its stores write blocks out. A stage reads only what earlier stages stored, so a contraction
// over a value computed in the same cell starts a new stage.
//
// A stage of several `columns` computes matrices (column-major): it runs once per column of every
// call, as if each column were a call of its own, each operand's pointer moved by the column
// times its `stride` (a matrix's rows; 1 to read one element of a vector per column; 0 to read
// the same rows in every column). A contraction's W may be a per-call matrix instead of a packed
// weight (MV-RNN's matvec, a product's gradient dy x^T or B^T dy of per-call factors): its columns
// `leading` floats apart, read in place and, `transposed`, as rows (each output row a dot product).
struct CellProgram {
  struct Operand {
    int32_t slot = -1;
    bool shared = false;  // a shared slot (one pointer for every call), else a call slot
    int32_t stride = 0;   // in a stage of several columns: floats from one column to the next
  };
  // Rows [row, row + rows) of an operand: one piece of a contraction's x.
  struct Segment {
    Operand operand;
    int32_t row = 0;
    int32_t rows = 0;
  };
  struct Contraction {
    int32_t blocks = 1;            // output rows = blocks * rows
    std::vector<Segment> x;        // its K = the sum of their rows, the packed weight's columns
    bool has_bias = false;
    Segment bias;                  // blocks * rows rows, added to the product
    int32_t weight = -1;           // which packed weight (CellArgs::weights), or -1: `matrix`
    // A per-call W of blocks * rows rows (transposed: of K rows and blocks * rows columns):
    // column k (transposed: output row i's) at `matrix.row` + `leading` * k floats from the
    // operand's pointer; matrix.rows is the rows of W as it lies (blocks * rows, or K).
    bool has_matrix = false;
    Segment matrix;
    int32_t leading = 0;
    bool transposed = false;
    // Floats from one element of x to the next (x of one segment when not 1): matmul_nt reads a
    // row of a per-call matrix as x.
    int32_t x_step = 1;
  };
  // One block-sized value of the stage body. `op` is a kernel op (jit/kernel_ir.h); `load` reads
  // block `block` of an operand, `accumulator` is block `block` of contraction `contraction`.
  struct Instruction {
    enum Kind : uint8_t { load, accumulator, compute };
    Kind kind = compute;
    KernelOp op = KernelOp::add;
    int32_t a = -1, b = -1;  // compute: earlier values of this stage
    float constant = 0;      // scale, add_const
    Operand operand;         // load
    int32_t block = 0;       // load, accumulator
    int32_t contraction = -1;
  };
  struct Store {
    int32_t value = -1;  // a value of the stage body
    Operand operand;     // a call slot
    int32_t block = 0;   // rows [block * rows, (block + 1) * rows) of it
  };
  // A step over whole columns, call by call, in a stage of its own (a column stage: no
  // contractions, body or stores): it reads its op's arguments `x` (and `y`) from memory, `cols`
  // columns of x.rows floats, and writes `out`: rows * cols floats (softmax and log_softmax per
  // column; their gradients per column of (x, y) = (y, dy), the forward output and its gradient) or
  // one float (sum and mean of every element; dot: the sum of x .* y, a product to 1x1 such as a
  // pick's row times a column; scalar: kernel op `op` of the one float of x (and y), an
  // elementwise op on 1x1 values). Selections, with `index`: pick_neg_log_softmax, one float
  // (log sum exp(x) - x[index], x a column) and its gradient (softmax(x) - e_index) * y[0] (y one
  // float); argmax, per column of x a one-hot column at its largest; kmax_pooling, per row of x its
  // `index` largest values in column order (rows * index floats), and its gradient, y (rows x
  // index, columns y.operand.stride apart) put back where they were taken, 0 elsewhere; transpose,
  // x's cols x rows transpose. Selections rank as runtime/selection.h does (a NaN above every
  // number, the earlier at ties). Later stages read `out` from memory.
  struct ColumnStep {
    enum Kind : uint8_t {
      softmax, log_softmax, softmax_grad, log_softmax_grad, sum, mean, dot, scalar,
      pick_neg_log_softmax, pick_neg_log_softmax_grad, argmax, kmax_pooling, kmax_pooling_grad, transpose
    };
    Kind kind = softmax;
    KernelOp op = KernelOp::add;  // scalar
    float constant = 0;           // scalar: scale, add_const, elu
    Segment x;       // x.rows: a column's rows
    Segment y;       // the gradients' second argument, as tall as x (pick_neg_log_softmax_grad: 1 row)
    int32_t cols = 1;  // x's operand.stride (and y's): floats from one column to the next
    int32_t index = 0; // pick_neg_log_softmax and its gradient: the label; kmax_pooling and its gradient: k
    Operand out;       // a call slot; its columns lie x.rows floats apart (transpose: cols apart)
  };
  struct Stage {
    int32_t columns = 1;
    std::vector<Contraction> contractions;
    std::vector<Instruction> body;
    std::vector<Store> stores;
    std::vector<ColumnStep> steps;  // a column stage's steps, in order
  };

  std::string name;         // the cell's call signature; the first line of the text
  int32_t rows = 0;         // block height
  int32_t call_slots = 0;
  int32_t shared_slots = 0;
  std::vector<Stage> stages;

  int32_t weight_count() const;
};

// The column steps' names (column_step_name(softmax_grad) == "softmax_grad"), and back.
const char* column_step_name(CellProgram::ColumnStep::Kind kind);
bool column_step_from_name(std::string_view name, CellProgram::ColumnStep::Kind& kind);
// Whether a column step reads a second argument (the gradients, dot, a scalar op of two), writes
// one float per call, and has an `index` (a label, or k).
bool column_step_has_y(const CellProgram::ColumnStep& step);
bool column_step_is_total(CellProgram::ColumnStep::Kind kind);
bool column_step_has_index(CellProgram::ColumnStep::Kind kind);

// Throws InternalError unless slots, values, blocks and segments are in range and every stage has
// work (a store, or column steps and nothing else).
void verify(const CellProgram& program);

// Canonical text, stable across runs and builds (the kernel cache's description of the program).
std::string describe(const CellProgram& program);

// The program whose canonical text is `text` (describe's inverse), for edb-cache show. Throws
// UsageError naming the line and what is wrong with it, or what verify found.
CellProgram parse_cell_program(std::string_view text);

// Runtime arguments of a compiled program (C ABI, read by the compiled code by byte offset).
struct CellArgs {
  int64_t calls = 0;
  const float* const* shared = nullptr;   // shared_slots pointers
  const float* const* weights = nullptr;  // per packed weight (pack_weight's layout)
  float* const* pointers = nullptr;       // calls * call_slots, call after call
  // Row tiles [tile_begin, tile_end) of each block, in every stage (tile_end < 0: to the last):
  // a batch split by hidden units runs one call per range (jit::cell_tile_step says where a
  // range may begin). Only for single-stage programs: a later stage reads every row.
  int64_t tile_begin = 0;
  int64_t tile_end = -1;
};

// The packed layout of contraction weight W (blocks * rows x K, given as column pieces W_t of K_t
// columns each, side by side): for row tile t (vector rows of each block), for k < K, for block g,
// `vector` floats (rows past the block's end are zero). Returns the floats.
int64_t packed_weight_floats(int32_t rows, int32_t blocks, int64_t k, int32_t vector);
// A piece read where the parameter lies: column-major with `present` rows (fewer than blocks * rows
// when the product pads: the rows past them pack as zeros; -1: all of them), or, transposed, the
// parameter being W_t's transpose (`cols` x present, column-major: W_t(r, c) at data[c + r * cols]).
struct WeightPiece {
  const float* data = nullptr;
  int64_t cols = 0;
  int64_t present = -1;
  bool transposed = false;
};
// Packs row tiles [tile_begin, tile_end) (tile_end < 0: to the last), so that tiles may be packed
// by several threads.
void pack_weight(int32_t rows, int32_t blocks, const std::vector<WeightPiece>& pieces, int32_t vector, float* packed,
                 int64_t tile_begin = 0, int64_t tile_end = -1);

}  // namespace edb::jit
