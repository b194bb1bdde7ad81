// The lowerer of a cell body into a cell program (jit/cell_program.h), private to runtime/: the
// block stages (contractions, elementwise ops, slices, concats) are runtime/cell_lowerer.cpp's, the
// column steps (softmax, sums, dot and scalar steps) runtime/cell_lowerer_columns.cpp's; laying out
// a call's frame around the program is runtime/cell_lowering.cpp's.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "jit/cell_program.h"
#include "memplan/plan.h"
#include "runtime/cell_lowering.h"

namespace edb::runtime::lowering {

using Program = jit::CellProgram;

// Not expressible: the reason, for the lowering's caller.
struct Unsupported {
  std::string why;
};

// An elementwise op of the body: a kernel op, or an activation gradient built from them.
bool lowers_elementwise(ir::Op op);
// A product W x: affine, matmul and matvec, or matmul_tn (W^T x, the backward pass's dx = W^T dy,
// whose weight is packed transposed), of a weight parameter W; or, but for affine, of a per-call
// W (a matvec's matrix), and matmul_nt of two vectors (the backward pass's dW = dy x^T of a
// per-call W), whose W is read in place.
bool is_product(ir::Op op);
// An elementwise op of 1x1 values that is a scalar column step: a kernel op, or a sum (a chain of
// adds). Not an activation gradient (several kernel ops).
bool is_scalar_step(const ir::Node& n);
// An op over whole columns, a column step of its own stage (jit::CellProgram::ColumnStep).
bool column_step_for(ir::Op op, Program::ColumnStep::Kind& kind);
// A body node that is a column step: an op over whole columns, or a scalar step.
bool is_column_step(const ir::Node& n);

class Lowerer {
 public:
  // The body is graph nodes [first, first + body_nodes); `outputs` are offsets into it. With
  // `for_backward`, the program also keeps what the backward pass's rules read.
  // A product whose rows end inside a block (dx = W^T dy of an input narrower or wider than the
  // gates) is stored in whole blocks of the call's frame, its weight padded with zero rows.
  Lowerer(const ir::Graph& graph, const memplan::Plan& plan, ir::NodeId first, uint32_t body_nodes,
          const std::string& name, std::span<const uint32_t> outputs, bool for_backward)
      : graph_(graph), plan_(plan), first_(first), count_(body_nodes), for_backward_(for_backward),
        needed_(body_nodes, false) {
    out_.program.name = name;
    for (uint32_t o : outputs)
      if (o < count_) needed_[o] = true;
  }

  CellLowering lower();

 private:
  // What the lowering knows of a body node, or of one reference to a node outside the body.
  struct Form {
    // column: a column step's output (softmax, sum_elements, ...), computed into its own place by
    // a column stage of its level, which runs before the level's block stages.
    enum Kind : uint8_t { external, contraction, elementwise, slice, concat, reshape, column };
    Kind kind = external;
    int32_t rows = 0;
    int32_t cols = 1;   // a matrix's columns (column-major, `rows` apart in memory)
    int32_t stage = 0;  // the level of the stage that computes it (0: outside the body)
    Program::Operand memory;  // where its values are: an external's slot, or its own call slot
    // contraction: its index in its stage; elementwise: its block values in its stage.
    int32_t contraction_index = -1;
    std::vector<int32_t> values;
    std::vector<int32_t> accumulators;  // contraction: accumulator values, made on first use
    // contraction: its x (form ids); slice and reshape: its source; concat and elementwise: their operands
    std::vector<int32_t> sources;
    int32_t begin = 0;  // slice: its first row
    int32_t bias = -1;  // contraction: the bias's form, or none
    int32_t matrix = -1;  // contraction of a per-call W: W's form (read in place)
  };

  const ir::Node& body_node(uint32_t o) const { return graph_.node(first_ + o); }
  bool inside(ir::NodeId id) const { return id >= first_ && id < first_ + count_; }

  // The block height: the rows of the narrowest elementwise value (else of the narrowest product)
  // but for values of 1x1, which are column steps (scalar and dot steps).
  void choose_rows();
  // The form id of argument `argument` of body node o: a body node's own, or a new external.
  int32_t argument_form(uint32_t o, int32_t argument);
  bool block_aligned(int32_t rows) const { return rows % rows_ == 0; }
  // A slice or reshape the plan places in its source's memory.
  bool is_view(uint32_t o) const {
    return (forms_[o].kind == Form::slice || forms_[o].kind == Form::reshape) && plan_.is_view(first_ + o);
  }
  // A matrix's columns lie its rows apart; a vector's one column is the same in every column.
  static int32_t column_stride(const Form& f) { return f.cols > 1 ? f.rows : 0; }

  void classify(uint32_t o);
  // W x of a per-call W (read in place, call by call): matmul and matvec (column k of W times
  // element k of x's column), matmul_tn (each row of the product a dot product of a column of W
  // with x's column) and matmul_nt of two vectors (dy x^T: column j is dy times element j of x).
  void classify_per_call_product(uint32_t o);
  // Body node o as a column step: its arguments are read whole, from memory, so it runs at a later
  // level than theirs.
  void classify_column_step(uint32_t o);
  // A concat that is stored anyway (an output: a backward cell's gate gradients, which the
  // weight's gradient reads) of values the body computes: a reader in a later stage reads its
  // place rather than each part's, so the parts need no stores of their own (they were written
  // twice: TreeLSTM's backward cells stored 3 of their 6 and 10 blocks twice).
  bool read_in_place(int32_t f) const;
  // Form f's values are read from memory: every body value they come from must be stored.
  void need_in_memory(int32_t f);
  // Operands computed in an earlier stage than their reader are loaded from memory.
  void need_earlier_stages(const std::vector<int32_t>& operands, int32_t stage);
  // What the backward pass's rule for body node o reads of the forward values (trace/backward.cpp):
  // a product's factors (a parameter's are outside the body), both factors of cmult, max and min,
  // the arguments of log, abs, square, cube, softsign, silu, elu, selu, log_sigmoid, erf and the
  // trigonometric and hyperbolic ops and their inverses, div's divisor and output, pow's arguments
  // and output, the outputs of activations, exp, sqrt, tan, silu, elu and selu, the arguments of
  // pick_neg_log_softmax and kmax_pooling (round, ceil, floor, argmax and transpose read nothing).
  void need_for_backward(uint32_t o);
  // After which stage form f's values are all in memory (0: before the kernel starts).
  int32_t memory_stage(int32_t f) const;
  // Rows [row, row + rows) of form f as memory segments.
  void segments(int32_t f, int32_t row, int32_t rows, std::vector<Program::Segment>& out);
  int32_t add(Program::Stage& stage, const Program::Instruction& in);
  // A computing instruction (b: -1 for a unary op).
  int32_t compute(Program::Stage& stage, jit::KernelOp op, int32_t a, int32_t b = -1, float constant = 0);
  // A load of rows [row, row + rows_) of memory operand `operand` into program stage p (once per
  // stage).
  int32_t load(int32_t p, Program::Operand operand, int32_t row);

  // The program stage that computes form f: its level's column stage, or its block stage of its columns.
  static std::pair<int32_t, int32_t> stage_key(const Form& f) { return {f.stage, f.kind == Form::column ? 0 : f.cols}; }
  int32_t stage_index(const Form& f) const { return stage_of_.at(stage_key(f)); }

  // Block g of form f as a value of program stage p (whose level is at least f's): f's own value
  // where p computes it, else a load (a value of other columns is always of an earlier level).
  int32_t block(int32_t f, int32_t g, int32_t p);

  void emit(uint32_t o);
  // Body node o's column step: its arguments where they lie (one value in memory each), its
  // output into a call slot of its own, always stored (later stages read it from there).
  void emit_column_step(uint32_t o, Program::Stage& stage);

  const ir::Graph& graph_;
  const memplan::Plan& plan_;
  ir::NodeId first_;
  uint32_t count_;
  bool for_backward_;
  int32_t rows_ = 0;
  std::vector<Form> forms_;  // body nodes by offset, then external references
  std::vector<uint8_t> needed_;  // per body node: its value must be in the arena after the kernel
  std::map<ir::NodeId, int32_t> shared_of_;
  std::vector<std::map<std::tuple<int32_t, bool, int32_t, int32_t>, int32_t>> loads_;  // per program stage
  std::map<std::pair<int32_t, int32_t>, int32_t> stage_of_;  // (level, columns) -> program stage
  std::vector<int32_t> level_;  // per program stage
  CellLowering out_;
};

}  // namespace edb::runtime::lowering
