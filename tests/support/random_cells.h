// Seeded random programs of cells, for the differential fuzzer's cell space (issue 28): a few
// random cells and random calls of them, kept as plain data so a failure prints as C++ against the
// public API and shrinks (random_cells_text.cpp). It leaves running and comparing them to
// tests/correctness.
//
// Cells' arguments mix parameters (the same for every call of an argument, or a different one per
// call), lookups, inputs, slices, concats and outputs of earlier calls, and the same value twice.
// Bodies read their inputs and parameters (t.param, from the same pool as the arguments, so cells
// share parameters), with matmul and affine whose weight or bias may be an argument, slices at any
// row offset, concats, elementwise ops, several outputs and values computed but not returned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <edbatch/edbatch.h>

namespace edb::testing {

struct RandomCellOptions {
  int max_cells = 4;          // 1..max_cells cells per program
  int max_calls = 10;         // 1..max_calls calls
  int max_body_ops = 7;       // 1..max_body_ops ops per body (parameter reads and inputs not counted)
  bool outputs_may_be_inputs = true;  // a body may return one of its inputs or parameters unchanged
};

// One value of a body or of the program. `args` name earlier values of the same list.
struct CellOp {
  enum Kind {
    argument,     // body: the cell's input `index`
    input,        // a constant of rows x cols (values from the program's seed and `index`)
    param,        // t.param(parameter `index`)
    lookup,       // program: t.lookup(table `index`, entry `entry`)
    call,         // program: a call of cell `index` on `args` (no value of its own)
    call_output,  // program: output `index` of the call args[0]
    matmul, affine, add, sub, cmult, max, div, scale, add_const, tanh, sigmoid, relu, exp_tanh,
    constant_minus, minus_constant, negate, divide_by_constant, constant_times, constant_plus,  // c - x, x - c, -x, x / c, c * x, c + x
    sqrt_square,  // sqrt(x * x + 0.5): sqrt away from 0
    abs, square, cube_tanh, softsign, silu,  // cube of tanh, as exp_tanh: magnitudes stay small
    elu, selu, log_sigmoid, erf, sin_tanh, cos_tanh, sinh_tanh, cosh_tanh,  // sin(4 tanh x), cos(4 tanh x), sinh(tanh x), cosh(tanh x)
    tan_tanh, asinh, acosh_square, atanh_tanh,  // tan(tanh x), acosh(x^2 + 1.5), atanh(tanh(x) / 2)
    asin_tanh, acos_tanh, atan,                 // asin(0.9 tanh x), acos(0.9 tanh x), atan(x)
    pow,          // pow(sigmoid(args[0]) + 0.5, 2 tanh(args[1])): a base in [0.5, 1.5], an exponent in [-2, 2]
    slice,        // rows [begin, end) of args[0]
    concat, sum, softmax, sum_elements, transpose,
    logsumexp, average, pairwise_rank_loss,  // of args[0] and args[1] (the loss with margin 1)
    // To 1x1, of a column args[0] (and args[1] of its shape): sum_dim, mean_dim and logsumexp_dim over
    // the rows, hinge at row 0, binary_log_loss of their sigmoids, poisson_loss of sum_elements(tanh x), 2.
    dot_product, squared_distance, l1_distance, huber_distance, squared_norm, sum_dim_rows, mean_dim_rows,
    logsumexp_dim_rows, hinge, binary_log_loss, poisson_loss, pick,  // pick: row 0
    pick_neg_log_softmax,  // at the last row
    // Issue 46's, of a column args[0] (args[1], args[2]: an input or values of its shape; a filter
    // column of at most as many rows for the narrow conv1d). select_rows_ends: rows {last, 0};
    // std_dim_plus, l2_norm_plus: of args[0] + args[1], to 1x1; layer_norm_plus: of args[0] + args[1]
    // with g args[2], b args[3]; weight_norm_plus: of args[0] + args[1], g sum_elements(args[2]);
    // argmax_times: cmult(argmax(args[1], constant 1: straight-through), args[0]); kmax_rows:
    // kmax_pooling over the row (args[0] + 4 args[1])^T, k = begin; conv1d_narrow_rows,
    // conv1d_wide_rows: of the rows args[0]^T and args[1]^T; maxpool_rows: maxpool1d of args[0]^T,
    // window begin, stride end. Each row result transposed back to a column.
    select_rows_ends, std_dim_plus, l2_norm_plus, layer_norm_plus, weight_norm_plus, argmax_times, kmax_rows,
    conv1d_narrow_rows, conv1d_wide_rows, maxpool_rows,
    // Broadcasting: the column args[0] with the 1x1 sum_elements(tanh(args[1])), by op.begin: 0
    // x + s, 1 s - x, 2 cmult(s, x), 3 div(x, s^2 + 1).
    broadcast_scalar,
    scale_gradient,  // of args[0] by constant: its value, its gradient scaled on the way back
  };
  Kind kind = input;
  std::vector<int> args;
  int index = 0;
  int entry = 0, begin = 0, end = 0;
  float constant = 0;
  int rows = 0, cols = 0;
  bool removed = false;  // dropped by shrinking: not recorded, never an argument
};

struct CellSpec {
  std::vector<std::pair<int, int>> inputs;
  std::vector<CellOp> body;
  std::vector<int> outputs;  // body values
};

struct ParameterSpec {
  int rows = 0, cols = 0, variant = 0;
};

// A program: parameters, tables, cells and the values it records. Shrink-friendly: removing a
// value keeps every index (ops are marked removed).
struct CellProgramSpec {
  uint64_t seed = 0;
  std::vector<ParameterSpec> parameters;
  std::vector<int> table_dims;  // each table has kEntries entries
  std::vector<CellSpec> cells;
  std::vector<CellOp> values;
  int run_after = -1;  // the trace runs (Trace::run) once value run_after is recorded, then records on
  static constexpr int kEntries = 5;
};

CellProgramSpec random_cell_program(uint64_t seed, const RandomCellOptions& options = {});

// Shared by the generator, the printer and the shrinker: whether a value is an op's (not an input,
// a parameter, a lookup, a body's argument or a call), a parameter's name, an input's values.
bool is_computed(CellOp::Kind kind);
std::string parameter_name(const CellProgramSpec& spec, int index);
std::vector<float> input_values(uint64_t seed, uint64_t index, int rows, int cols);

// The program as C++ against the public API (a reproducer to paste into a test).
std::string to_cpp(const CellProgramSpec& spec);

// Smaller variants of `spec` (one call, op or output fewer, an argument replaced by an input...),
// each still well formed; the fuzzer keeps the first that still fails.
std::vector<CellProgramSpec> shrink_candidates(const CellProgramSpec& spec);

// A spec made real: its Model (parameters, tables) and Cells. Record it on any number of traces.
class CellProgram {
 public:
  explicit CellProgram(CellProgramSpec spec);
  CellProgram(const CellProgram&) = delete;  // the cells' bodies point at this object
  CellProgram& operator=(const CellProgram&) = delete;
  // Records every value; returns those compared (call outputs and program ops), in order.
  std::vector<Expr> record(Trace& trace) const;
  const std::vector<std::string>& compared_names() const { return compared_names_; }
  Model& model() { return *model_; }
  const CellProgramSpec& spec() const { return spec_; }
  int call_count() const;

 private:
  CellProgramSpec spec_;
  std::unique_ptr<Model> model_;
  std::vector<Parameter> parameters_;
  std::vector<LookupTable> tables_;
  std::vector<Cell> cells_;
  std::vector<std::string> compared_names_;
};

}  // namespace edb::testing
