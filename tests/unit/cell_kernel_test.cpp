// Compiled cell programs (jit/cell_program.h, jit/llvm_cell.cpp): the register-blocked
// contraction against a plain product for awkward shapes (rows not a multiple of the vector, K not
// a multiple of it, N = 1..1000, unaligned pointers), the elementwise stage body against libm,
// column steps against their formulas (selections against runtime/selection.h), packing, and the
// program's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "jit/cell_program.h"
#include "jit/llvm_backend.h"
#include "jit/llvm_cell.h"
#include "runtime/selection.h"

namespace edb::jit {
namespace {

using Program = CellProgram;

// acc = bias + W [x_0; x_1; ...] (pieces of `ks` rows, call slots 0..), optionally through
// `activation`, every block stored into the call slot after the pieces.
Program contraction(int rows, int blocks, const std::vector<int>& ks, bool bias, KernelOp activation = KernelOp::load) {
  Program p;
  p.name = "test contraction";
  p.rows = rows;
  Program::Stage stage;
  Program::Contraction c;
  c.blocks = blocks;
  int32_t slot = 0;
  for (int k : ks) c.x.push_back({{slot++, false}, 0, k});
  c.has_bias = bias;
  if (bias) c.bias = {{0, true}, 0, rows * blocks};
  c.weight = 0;
  stage.contractions.push_back(c);
  for (int g = 0; g < blocks; ++g) {
    Program::Instruction in;
    in.kind = Program::Instruction::accumulator;
    in.contraction = 0;
    in.block = g;
    stage.body.push_back(in);
    int32_t value = int32_t(stage.body.size() - 1);
    if (activation != KernelOp::load) {
      Program::Instruction act;
      act.op = activation;
      act.a = value;
      stage.body.push_back(act);
      value = int32_t(stage.body.size() - 1);
    }
    stage.stores.push_back({value, {slot, false}, g});
  }
  p.stages.push_back(stage);
  p.call_slots = slot + 1;
  p.shared_slots = 1;
  return p;
}

struct Case {
  int rows, blocks;
  std::vector<int> ks;
  int calls;
  bool bias;
};

float apply(KernelOp op, float x) {
  switch (op) {
    case KernelOp::tanh: return std::tanh(x);
    case KernelOp::sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case KernelOp::relu: return x < 0 ? 0 : x;
    default: return x;
  }
}

// Runs `program` (from contraction()) on random data and compares every stored value with a
// double-precision product.
void check(LlvmBackend& backend, const Case& c, KernelOp activation = KernelOp::load) {
  const Program program = contraction(c.rows, c.blocks, c.ks, c.bias, activation);
  const CompiledKernel kernel = backend.compile(program);
  const int vector = cell_vector_floats();
  std::mt19937 random(uint32_t(c.rows * 131 + c.calls));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int out_rows = c.rows * c.blocks;
  int k_total = 0;
  for (int k : c.ks) k_total += k;
  // Weight pieces, column-major out_rows x k.
  std::vector<std::vector<float>> pieces;
  std::vector<WeightPiece> views;
  for (int k : c.ks) {
    pieces.emplace_back(size_t(out_rows) * size_t(k));
    for (float& v : pieces.back()) v = uniform(random);
    views.push_back({pieces.back().data(), k});
  }
  std::vector<float> packed(size_t(packed_weight_floats(c.rows, c.blocks, k_total, vector)) + size_t(vector));
  // 64-byte aligned start inside the buffer, as the executor allocates it.
  float* packed_data = packed.data();
  while (reinterpret_cast<uintptr_t>(packed_data) % (size_t(vector) * 4) != 0) ++packed_data;
  pack_weight(c.rows, c.blocks, views, vector, packed_data);
  std::vector<float> bias(static_cast<size_t>(out_rows));
  for (float& v : bias) v = uniform(random);
  // Every call's operands in one buffer at odd offsets (unaligned, apart), outputs guarded.
  const int64_t stride = std::max(out_rows, *std::max_element(c.ks.begin(), c.ks.end())) + 3;
  const size_t slots = c.ks.size() + 1;
  std::vector<float> memory(size_t(stride) * slots * size_t(c.calls) + 8, 0.0f);
  for (float& v : memory) v = uniform(random);
  const std::vector<float> before = memory;
  std::vector<float*> pointers(slots * size_t(c.calls));
  for (size_t i = 0; i < pointers.size(); ++i) pointers[i] = memory.data() + 1 + int64_t(i) * stride;
  const float* shared[] = {bias.data()};
  const float* weights[] = {packed_data};
  const CellArgs args{c.calls, shared, weights, pointers.data()};
  kernel.cell()(&args);

  for (int j = 0; j < c.calls; ++j) {
    const float* out = pointers[size_t(j) * slots + c.ks.size()];
    for (int r = 0; r < out_rows; ++r) {
      double expected = c.bias ? bias[size_t(r)] : 0.0;
      for (size_t piece = 0; piece < c.ks.size(); ++piece) {
        const float* x = pointers[size_t(j) * slots + piece];
        for (int k = 0; k < c.ks[piece]; ++k) expected += double(pieces[piece][size_t(k) * out_rows + size_t(r)]) * x[k];
      }
      const float want = apply(activation, float(expected));
      ASSERT_NEAR(out[r], want, 2e-5 * (1 + std::abs(want)) + 1e-5 * std::sqrt(double(k_total)))
          << "rows " << c.rows << " blocks " << c.blocks << " K " << k_total << " calls " << c.calls << ": call " << j
          << " row " << r;
    }
    // Nothing written past the stored rows (the next buffer's guard floats stay as they were).
    const int64_t after = (out - memory.data()) + out_rows;
    for (int64_t i = after; i < after + 2; ++i) ASSERT_EQ(memory[size_t(i)], before[size_t(i)]) << "write past a store";
  }
}

TEST(CellKernel, ContractionEqualsPlainProductForAwkwardShapes) {
  LlvmBackend backend;
  const std::vector<Case> cases = {
      {1, 1, {1}, 1, false},      {5, 1, {7}, 3, true},        {16, 3, {16}, 4, true},
      {17, 2, {33, 5}, 9, true},  {37, 4, {13}, 33, true},     {50, 4, {128, 50}, 64, true},
      {128, 3, {128, 128}, 7, true}, {31, 5, {3}, 1000, false}, {64, 1, {1}, 2, true},
      // one or two gate blocks: several row tiles per register block, single tiles for the rest
      {100, 1, {5}, 13, true},    {50, 2, {9}, 11, true},      {33, 1, {17, 2}, 70, true},
  };
  for (const Case& c : cases) check(backend, c);
}

TEST(CellKernel, EveryCallCountUpTo64) {
  LlvmBackend backend;
  for (int calls = 1; calls <= 64; ++calls) check(backend, {20, 3, {9, 4}, calls, true});
  for (int calls = 1; calls <= 24; ++calls) check(backend, {70, 1, {6}, calls, true});
}

TEST(CellKernel, ActivationsOnTheAccumulatorsMatchLibm) {
  LlvmBackend backend;
  for (KernelOp op : {KernelOp::tanh, KernelOp::sigmoid, KernelOp::relu}) check(backend, {23, 2, {11}, 6, true}, op);
}

// out = W X per call, W a per-call matrix read in place (blocks * rows rows, or transposed K rows)
// and X a per-call matrix of `columns` columns (a stage of that many columns, each column a unit of
// its own) or, with `step`, the rows of X as matmul_nt reads them (X^T's column j is X's row j).
struct MatrixCase {
  int rows, blocks, k, columns, calls;
  bool transposed, step;
};

void check_matrix(LlvmBackend& backend, const MatrixCase& c) {
  const int out_rows = c.rows * c.blocks;
  const int w_rows = c.transposed ? c.k : out_rows, w_cols = c.transposed ? out_rows : c.k;
  const int w_leading = w_rows + 3;                     // columns apart by more than their rows
  const int x_leading = c.step ? c.columns : c.k + 2;   // X: k x columns, or columns x k (step)
  Program p;
  p.name = "test matrix";
  p.rows = c.rows;
  p.call_slots = 3;
  Program::Stage stage;
  stage.columns = c.columns;
  Program::Contraction m;
  m.blocks = c.blocks;
  m.has_matrix = true;
  m.matrix = {{0, false}, 1, w_rows};  // from the second float of slot 0
  m.leading = w_leading;
  m.transposed = c.transposed;
  if (c.step) {
    m.x.push_back({{1, false, 1}, 0, c.k});
    m.x_step = x_leading;
  } else {
    m.x.push_back({{1, false, x_leading}, 0, c.k});
  }
  stage.contractions.push_back(m);
  for (int g = 0; g < c.blocks; ++g) {
    Program::Instruction in;
    in.kind = Program::Instruction::accumulator;
    in.contraction = 0;
    in.block = g;
    stage.body.push_back(in);
    stage.stores.push_back({int32_t(stage.body.size() - 1), {2, false, out_rows}, g});
  }
  p.stages.push_back(stage);
  const CompiledKernel kernel = backend.compile(p);
  std::mt19937 random(uint32_t(c.rows * 7 + c.k * 131 + c.calls));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const size_t w_floats = 1 + size_t(w_leading) * size_t(w_cols), x_floats = size_t(x_leading) * size_t(c.step ? c.k : c.columns);
  const size_t out_floats = size_t(out_rows) * size_t(c.columns);
  std::vector<std::vector<float>> ws, xs, outs;
  std::vector<float*> pointers;
  for (int j = 0; j < c.calls; ++j) {
    ws.emplace_back(w_floats);
    xs.emplace_back(x_floats);
    outs.emplace_back(out_floats + 2, 7.0f);
    for (float& v : ws.back()) v = uniform(random);
    for (float& v : xs.back()) v = uniform(random);
    pointers.insert(pointers.end(), {ws.back().data(), xs.back().data(), outs.back().data()});
  }
  const CellArgs args{c.calls, nullptr, nullptr, pointers.data()};
  kernel.cell()(&args);
  for (int j = 0; j < c.calls; ++j)
    for (int col = 0; col < c.columns; ++col)
      for (int r = 0; r < out_rows; ++r) {
        double want = 0;
        for (int k = 0; k < c.k; ++k) {
          const float* w = ws[size_t(j)].data() + 1;
          const double w_rk = c.transposed ? w[r * w_leading + k] : w[k * w_leading + r];
          const double x_kc = c.step ? xs[size_t(j)][size_t(k * x_leading + col)] : xs[size_t(j)][size_t(col * x_leading + k)];
          want += w_rk * x_kc;
        }
        ASSERT_NEAR(outs[size_t(j)][size_t(col * out_rows + r)], want, 2e-5 * (1 + std::abs(want)) + 1e-5 * std::sqrt(double(c.k)))
            << "rows " << c.rows << " blocks " << c.blocks << " K " << c.k << " columns " << c.columns
            << (c.transposed ? " transposed" : "") << (c.step ? " step" : "") << ": call " << j << " column " << col << " row " << r;
      }
  for (int j = 0; j < c.calls; ++j)
    for (size_t e = out_floats; e < out_floats + 2; ++e) ASSERT_EQ(outs[size_t(j)][e], 7.0f) << "write past a store";
}

TEST(CellKernel, PerCallMatrixContractionsEqualPlainProducts) {
  LlvmBackend backend;
  for (bool transposed : {false, true})
    for (bool step : {false, true}) {
      if (transposed && step) continue;  // matmul_tn reads x's columns
      for (const MatrixCase& c : std::vector<MatrixCase>{{1, 1, 1, 1, 1, false, false},  {5, 1, 7, 1, 3, false, false},
                                                         {16, 2, 16, 1, 9, false, false}, {19, 1, 19, 19, 5, false, false},
                                                         {8, 3, 33, 4, 17, false, false}, {37, 1, 5, 2, 2, false, false},
                                                         {64, 1, 64, 3, 6, false, false}})
        check_matrix(backend, {c.rows, c.blocks, c.k, c.columns, c.calls, transposed, step});
    }
}

TEST(CellKernel, PackingLaysTilesOutBlockByBlockWithZeroPadding) {
  // rows 3, blocks 2, K 2, vector 4: tile 0 holds, per k, block 0's rows 0-2 then block 1's.
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, /* column 1 */ 7, 8, 9, 10, 11, 12};
  std::vector<float> packed(size_t(packed_weight_floats(3, 2, 2, 4)), -1.0f);
  ASSERT_EQ(packed.size(), 16u);
  pack_weight(3, 2, {{w.data(), 2}}, 4, packed.data());
  const std::vector<float> expected = {1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 10, 11, 12, 0};
  EXPECT_EQ(packed, expected);
}

TEST(CellKernel, PackingReadsTransposedAndShortPiecesWhereTheyLie) {
  // A piece given transposed, or with fewer rows than blocks * rows, packs as the column-major
  // padded copy of it would (the copy the executor made before): shapes around the 16-column
  // chunks and the vector's tiles, the pieces of one weight of every kind side by side.
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  struct Shape {
    int32_t rows, blocks, vector;
    std::vector<int64_t> ks;
  };
  for (const Shape& shape : {Shape{3, 2, 4, {2, 5}}, Shape{50, 4, 16, {17, 33}}, Shape{150, 3, 8, {16, 1, 40}},
                             Shape{7, 1, 16, {31}}}) {
    const int64_t padded = int64_t(shape.rows) * shape.blocks;
    std::vector<std::vector<float>> sources, copies;
    std::vector<WeightPiece> direct, from_copies;
    int64_t k_total = 0;
    for (size_t p = 0; p < shape.ks.size(); ++p) {
      const int64_t k = shape.ks[p];
      k_total += k;
      // Pieces in turn: transposed, short (rows past `present` pack as zeros), whole.
      const int kind = int(p % 3);
      const int64_t present = kind == 2 ? padded : std::max<int64_t>(1, padded - 1 - int64_t(p) * 3);
      sources.emplace_back(size_t(present * k));
      for (float& v : sources.back()) v = uniform(random);
      std::vector<float>& copy = copies.emplace_back(size_t(padded * k), 0.0f);
      for (int64_t r = 0; r < present; ++r)
        for (int64_t c = 0; c < k; ++c)
          copy[size_t(r + c * padded)] = kind == 0 ? sources.back()[size_t(c + r * k)] : sources.back()[size_t(r + c * present)];
      direct.push_back({sources.back().data(), k, present, kind == 0});
      from_copies.push_back({copy.data(), k});
    }
    const size_t floats = size_t(packed_weight_floats(shape.rows, shape.blocks, k_total, shape.vector));
    std::vector<float> packed(floats, -1.0f), expected(floats, -2.0f);
    pack_weight(shape.rows, shape.blocks, direct, shape.vector, packed.data());
    pack_weight(shape.rows, shape.blocks, from_copies, shape.vector, expected.data());
    EXPECT_EQ(packed, expected) << "rows " << shape.rows << ", blocks " << shape.blocks << ", vector " << shape.vector;
    // Row tiles packed in ranges, as threads pack them, lay out the same floats.
    const int64_t tiles = (shape.rows + shape.vector - 1) / shape.vector;
    std::vector<float> by_ranges(floats, -3.0f);
    for (int64_t t = 0; t < tiles; t += 2) pack_weight(shape.rows, shape.blocks, direct, shape.vector, by_ranges.data(), t, t + 2);
    EXPECT_EQ(by_ranges, expected) << "rows " << shape.rows << " in ranges of two tiles";
  }
}

TEST(CellKernel, VerifyRefusesBrokenPrograms) {
  Program p = contraction(8, 1, {4}, true);
  EXPECT_NO_THROW(verify(p));
  Program bad_slot = p;
  bad_slot.stages[0].contractions[0].x[0].operand.slot = 9;
  EXPECT_THROW(verify(bad_slot), InternalError);
  Program bad_value = p;
  bad_value.stages[0].stores[0].value = 5;
  EXPECT_THROW(verify(bad_value), InternalError);
  Program shared_store = p;
  shared_store.stages[0].stores[0].operand.shared = true;
  EXPECT_THROW(verify(shared_store), InternalError);
  Program no_rows = p;
  no_rows.rows = 0;
  EXPECT_THROW(verify(no_rows), InternalError);
}

TEST(CellKernel, DescriptionNamesEveryPartAndDiffersWithTheShape) {
  const std::string a = describe(contraction(8, 2, {4, 3}, true));
  EXPECT_NE(a.find("contraction 0 blocks 2 weight 0 x c0[0+4] c1[0+3] bias s0[0+16]"), std::string::npos) << a;
  EXPECT_NE(a, describe(contraction(8, 2, {4, 4}, true)));
  EXPECT_NE(a, describe(contraction(8, 2, {4, 3}, false)));
}

TEST(CellKernel, TextReadsBackToTheSameProgram) {
  Program p = contraction(8, 2, {4, 3}, true, KernelOp::tanh);
  Program::Instruction scale;
  scale.op = KernelOp::scale;
  scale.a = 1;
  scale.constant = 0.3f;
  p.stages[0].body.push_back(scale);
  p.stages[0].stores.push_back({int32_t(p.stages[0].body.size() - 1), {2, false}, 1});
  Program::Stage second;
  Program::Instruction load;
  load.kind = Program::Instruction::load;
  load.operand = {2, false};
  second.body.push_back(load);
  second.stores.push_back({0, {1, false}, 0});
  p.stages.push_back(second);
  Program::Stage columns;  // per-call matrices: a stage of columns, strides, a matrix and a step
  columns.columns = 3;
  Program::Contraction m;
  m.has_matrix = true;
  m.matrix = {{0, false}, 8, 16};
  m.leading = 16;
  m.transposed = true;
  m.x.push_back({{1, false, 4}, 0, 4});
  columns.contractions.push_back(m);
  m.transposed = false;
  m.x_step = 3;
  m.x = {{{1, false, 1}, 0, 4}};
  columns.contractions.push_back(m);
  Program::Instruction accumulator;
  accumulator.kind = Program::Instruction::accumulator;
  accumulator.contraction = 1;
  columns.body.push_back(accumulator);
  columns.stores.push_back({0, {1, false, 8}, 0});
  p.stages.push_back(columns);
  const std::string text = describe(p);
  EXPECT_NE(text.find("stage 2 columns 3\n  contraction 0 blocks 1 matrix c0[8+16] leading 16 transposed x c1*4[0+4]\n"
                      "  contraction 1 blocks 1 matrix c0[8+16] leading 16 x c1*1[0+4] step 3\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(describe(parse_cell_program(text)), text);
  EXPECT_THROW(parse_cell_program("cell x\nrows 8 call_slots 3 shared_slots 1\n  %0 = load c0 block 0\n"), UsageError);
  EXPECT_THROW(parse_cell_program("kernel f32 elementwise add\n"), UsageError);
  std::string broken = text;
  broken.replace(broken.find("c1[0+3]"), 7, "c9[0+3]");
  EXPECT_THROW(parse_cell_program(broken), UsageError);
}

// A column stage of every step kind over x and y (5 to 40 rows x 2 columns, their columns 3
// floats apart beyond their rows, their segments from row 1 of their slots) for 1..9 calls, against
// the steps' formulas in double; the text reads back, and verify refuses overlapping columns and
// a y of other rows.
Program column_steps(int rows) {
  Program p;
  p.name = "test column steps";
  p.rows = 8;
  p.call_slots = 2 + 9;
  Program::Stage stage;
  for (int k = 0; k < 7; ++k) {
    Program::ColumnStep step;
    step.kind = Program::ColumnStep::Kind(k);
    step.x = {{0, false, rows + 3}, 1, rows};
    step.y = {{1, false, rows + 3}, 1, rows};
    step.cols = 2;
    step.out = {2 + k, false};
    stage.steps.push_back(step);
  }
  // Scalar steps: x's row 2 scaled by 0.5, then that over y's row 3 (a step reading another's output).
  Program::ColumnStep scalar;
  scalar.kind = Program::ColumnStep::scalar;
  scalar.op = KernelOp::scale;
  scalar.constant = 0.5f;
  scalar.x = {{0, false}, 2, 1};
  scalar.out = {9, false};
  stage.steps.push_back(scalar);
  scalar.op = KernelOp::div;
  scalar.x = {{9, false}, 0, 1};
  scalar.y = {{1, false}, 3, 1};
  scalar.out = {10, false};
  stage.steps.push_back(scalar);
  p.stages.push_back(stage);
  return p;
}

TEST(CellKernel, ColumnStepsEqualTheirFormulas) {
  LlvmBackend backend;
  for (int rows : {5, 16, 21, 40}) {  // within one vector, whole vectors, and whole vectors and a part
    const Program program = column_steps(rows);
    const std::string text = describe(program);
    EXPECT_NE(text.find("  column_step softmax_grad cols 2 x c0*" + std::to_string(rows + 3) + "[1+" + std::to_string(rows) +
                        "] y c1*" + std::to_string(rows + 3) + "[1+" + std::to_string(rows) + "] out c4\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(describe(parse_cell_program(text)), text);
    const CompiledKernel kernel = backend.compile(program);
    std::mt19937 random{uint32_t(rows)};
    std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
    const int64_t in_floats = 2 * (rows + 3), out_floats = 2 * rows;
    for (int calls = 1; calls <= 9; ++calls) {
      std::vector<std::vector<float>> memory;  // per call: x, y, the nine outputs
      std::vector<float*> pointers;
      for (int j = 0; j < calls; ++j)
        for (int slot = 0; slot < 11; ++slot) {
          memory.emplace_back(size_t(slot < 2 ? in_floats : out_floats));
          for (float& v : memory.back()) v = uniform(random);
        }
      for (std::vector<float>& m : memory) pointers.push_back(m.data());
      const CellArgs args{calls, nullptr, nullptr, pointers.data()};
      kernel.cell()(&args);
      for (int j = 0; j < calls; ++j) {
        const std::vector<float>* slots = &memory[size_t(j) * 11];
        double total = 0, products = 0, abs_products = 0;
        for (int c = 0; c < 2; ++c) {
          const float* x = slots[0].data() + 1 + c * (rows + 3);
          const float* y = slots[1].data() + 1 + c * (rows + 3);
          double top = x[0], sum_exp = 0, dot = 0, sum_y = 0, abs_dot = 0, abs_y = 0;
          for (int r = 0; r < rows; ++r) top = std::max(top, double(x[r]));
          for (int r = 0; r < rows; ++r) {
            sum_exp += std::exp(double(x[r]) - top);
            dot += double(x[r]) * y[r];
            sum_y += y[r];
            abs_dot += std::abs(double(x[r]) * y[r]);
            abs_y += std::abs(y[r]);
            products += double(x[r]) * y[r];
            abs_products += std::abs(double(x[r]) * y[r]);
            total += x[r];
          }
          const double log_sum = top + std::log(sum_exp);
          for (int r = 0; r < rows; ++r) {
            const int64_t at = c * rows + r;
            const double want[] = {std::exp(x[r] - log_sum), x[r] - log_sum, x[r] * (y[r] - dot),
                                   y[r] - std::exp(double(x[r])) * sum_y};
            // The size of the terms each result sums (float rounding is relative to them).
            const double terms[] = {0, std::abs(log_sum), std::abs(x[r]) * (std::abs(y[r]) + abs_dot),
                                    std::abs(y[r]) + std::exp(double(x[r])) * abs_y};
            for (int k = 0; k < 4; ++k)
              ASSERT_NEAR(slots[2 + k][size_t(at)], want[k], 2e-6 * (1 + std::abs(want[k]) + terms[k]))
                  << column_step_name(Program::ColumnStep::Kind(k)) << " rows " << rows << " calls " << calls << " call " << j;
          }
        }
        EXPECT_NEAR(slots[6][0], total, 1e-5 * (1 + std::abs(total))) << "sum, call " << j;
        EXPECT_NEAR(slots[7][0], total / (2 * rows), 1e-5 * (1 + std::abs(total))) << "mean, call " << j;
        EXPECT_NEAR(slots[8][0], products, 1e-6 * (1 + abs_products)) << "dot, call " << j;
        EXPECT_EQ(slots[9][0], slots[0][2] * 0.5f) << "scalar scale, call " << j;
        EXPECT_EQ(slots[10][0], slots[9][0] / slots[1][3]) << "scalar div, call " << j;
      }
    }
  }
  Program overlapping = column_steps(5);
  overlapping.stages[0].steps[0].x.operand.stride = 4;
  EXPECT_THROW(verify(overlapping), InternalError);
  Program other_rows = column_steps(5);
  other_rows.stages[0].steps[2].y.rows = 4;
  EXPECT_THROW(verify(other_rows), InternalError);
  Program mixed = column_steps(5);
  mixed.stages[0].stores.push_back({0, {2, false}, 0});
  EXPECT_THROW(verify(mixed), InternalError);
}

// The selection steps (pick_neg_log_softmax and its gradient, argmax, kmax_pooling for k = 1, 3
// and every column, its gradient, transpose) over x of 7 columns (5 to 40 rows, columns 3 floats
// apart beyond their rows, from row 1 of their slot) with ties and NaNs, for 1..5 calls: the
// selections equal runtime/selection.h's rule exactly, the losses their formulas in double.
Program selection_steps(int rows) {
  Program p;
  p.name = "test selection steps";
  p.rows = 8;
  p.call_slots = 3 + 8;
  Program::Stage stage;
  const Program::Segment x{{0, false, rows + 3}, 1, rows}, dy{{1, false, rows + 3}, 1, rows};
  const Program::Segment column{{2, false}, 1, rows}, dl{{1, false}, 0, 1};
  auto add = [&](Program::ColumnStep::Kind kind, Program::Segment on, int32_t cols, int32_t index, Program::Segment y = {}) {
    Program::ColumnStep step;
    step.kind = kind;
    step.x = on;
    step.y = y;
    step.cols = cols;
    step.index = index;
    step.out = {int32_t(3 + stage.steps.size()), false};
    stage.steps.push_back(step);
  };
  add(Program::ColumnStep::pick_neg_log_softmax, column, 1, rows - 1);
  add(Program::ColumnStep::pick_neg_log_softmax_grad, column, 1, rows - 1, dl);
  add(Program::ColumnStep::argmax, x, 7, 0);
  add(Program::ColumnStep::kmax_pooling, x, 7, 1);
  add(Program::ColumnStep::kmax_pooling, x, 7, 3);
  add(Program::ColumnStep::kmax_pooling, x, 7, 7);
  add(Program::ColumnStep::kmax_pooling_grad, x, 7, 3, dy);
  add(Program::ColumnStep::transpose, x, 7, 0);
  p.stages.push_back(stage);
  return p;
}

bool same_float(float a, float b) { return (a != a && b != b) || a == b; }

TEST(CellKernel, SelectionStepsEqualTheirRules) {
  LlvmBackend backend;
  for (int rows : {5, 16, 21, 40}) {
    const Program program = selection_steps(rows);
    const std::string text = describe(program);
    const std::string x = "x c0*" + std::to_string(rows + 3) + "[1+" + std::to_string(rows) + "]";
    EXPECT_NE(text.find("  column_step kmax_pooling_grad cols 7 index 3 " + x + " y c1*" + std::to_string(rows + 3) + "[1+" +
                        std::to_string(rows) + "] out c9\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("  column_step pick_neg_log_softmax cols 1 index " + std::to_string(rows - 1) + " x c2[1+"), std::string::npos)
        << text;
    EXPECT_EQ(describe(parse_cell_program(text)), text);
    const CompiledKernel kernel = backend.compile(program);
    std::mt19937 random{uint32_t(rows)};
    std::uniform_int_distribution<int> steps(-4, 4);  // few values: ties in every row and column
    std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
    const int64_t x_floats = 7 * (rows + 3);
    const int64_t out_floats[] = {1, rows, 7 * rows, rows, 3 * rows, 7 * rows, 7 * rows, 7 * rows};
    for (int calls = 1; calls <= 5; ++calls) {
      std::vector<std::vector<float>> memory;  // per call: x, dy, the column, the eight outputs
      std::vector<float*> pointers;
      for (int j = 0; j < calls; ++j)
        for (int slot = 0; slot < 11; ++slot) {
          memory.emplace_back(size_t(slot < 3 ? x_floats : out_floats[slot - 3]));
          for (float& v : memory.back()) v = slot == 0 ? 0.5f * float(steps(random)) : uniform(random);
          if (slot == 0 && (j + rows) % 2 == 0)  // NaNs rank above every number
            for (int64_t at : {int64_t(2), int64_t(rows + 3 + 1), 3 * int64_t(rows + 3) + rows})
              memory.back()[size_t(at)] = std::numeric_limits<float>::quiet_NaN();
        }
      for (std::vector<float>& m : memory) pointers.push_back(m.data());
      const CellArgs args{calls, nullptr, nullptr, pointers.data()};
      kernel.cell()(&args);
      for (int j = 0; j < calls; ++j) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " calls " + std::to_string(calls) + " call " + std::to_string(j));
        const std::vector<float>* slots = &memory[size_t(j) * 11];
        const float* xs = slots[0].data() + 1;
        const float* dys = slots[1].data() + 1;
        const float* c = slots[2].data() + 1;
        double top = c[0], sum_exp = 0;
        for (int r = 0; r < rows; ++r) top = std::max(top, double(c[r]));
        for (int r = 0; r < rows; ++r) sum_exp += std::exp(double(c[r]) - top);
        const double lse = top + std::log(sum_exp), dl = slots[1][0];
        EXPECT_NEAR(slots[3][0], lse - c[rows - 1], 2e-6 * (1 + std::abs(lse)));
        for (int r = 0; r < rows; ++r) {
          const double want = (std::exp(double(c[r]) - lse) - (r == rows - 1 ? 1.0 : 0.0)) * dl;
          ASSERT_NEAR(slots[4][size_t(r)], want, 2e-6 * (1 + std::abs(dl))) << "pick_neg_log_softmax_grad row " << r;
        }
        for (int col = 0; col < 7; ++col) {
          const int64_t best = runtime::argmax_position(xs + col * (rows + 3), rows, 1);
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(slots[5][size_t(col * rows + r)], r == best ? 1.0f : 0.0f) << "argmax column " << col << " row " << r;
        }
        std::vector<int64_t> kept;
        for (int r = 0; r < rows; ++r) {
          for (int k : {1, 3, 7}) {
            runtime::kmax_positions(xs + r, 7, rows + 3, k, kept);
            const std::vector<float>& out = slots[k == 1 ? 6 : k == 3 ? 7 : 8];
            for (int s = 0; s < k; ++s)
              ASSERT_TRUE(same_float(out[size_t(s * rows + r)], xs[kept[size_t(s)] * (rows + 3) + r]))
                  << "kmax_pooling k " << k << " row " << r << " place " << s << ": " << out[size_t(s * rows + r)];
          }
          runtime::kmax_positions(xs + r, 7, rows + 3, 3, kept);
          for (int col = 0; col < 7; ++col) {
            const auto place = std::find(kept.begin(), kept.end(), col);
            const float want = place == kept.end() ? 0.0f : dys[(place - kept.begin()) * (rows + 3) + r];
            ASSERT_EQ(slots[9][size_t(col * rows + r)], want) << "kmax_pooling_grad row " << r << " column " << col;
            ASSERT_TRUE(same_float(slots[10][size_t(r * 7 + col)], xs[col * (rows + 3) + r])) << "transpose row " << r << " column " << col;
          }
        }
      }
    }
  }
  Program label_outside = selection_steps(5);
  label_outside.stages[0].steps[0].index = 5;
  EXPECT_THROW(verify(label_outside), InternalError);
  Program too_many = selection_steps(5);
  too_many.stages[0].steps[4].index = 8;
  EXPECT_THROW(verify(too_many), InternalError);
  Program tall_dl = selection_steps(5);
  tall_dl.stages[0].steps[1].y.rows = 5;
  EXPECT_THROW(verify(tall_dl), InternalError);
}

// LlvmBackendOptions::perf_map: each linked kernel's entry gets a line "START SIZE NAME" in
// /tmp/perf-PID.map, named by its symbol and its cell, at the address the kernel runs from.
// The selection rule itself against its definition, a stable sort by rank: for every k, the first
// k positions, in increasing order, over rows with ties, NaNs, -0 and +0 and infinities, strided.
TEST(Selection, KmaxPositionsAreTheFirstKOfAStableSortByRank) {
  std::mt19937 random(7);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> pool = {1.0f, 1.0f, -2.0f, 0.0f, -0.0f, 3.5f, 3.5f, nan, inf, -inf, 0.25f};
  std::vector<int64_t> kept;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t count = 1 + int64_t(random() % 17), stride = 1 + int64_t(random() % 3);
    std::vector<float> values(static_cast<size_t>(count * stride), 99.0f);
    for (int64_t j = 0; j < count; ++j) values[size_t(j * stride)] = pool[random() % pool.size()];
    std::vector<int64_t> order(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) order[size_t(j)] = j;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return runtime::ranks_above(values[size_t(a * stride)], values[size_t(b * stride)]);
    });
    for (int64_t k = 1; k <= count; ++k) {
      std::vector<int64_t> want(order.begin(), order.begin() + k);
      std::sort(want.begin(), want.end());
      runtime::kmax_positions(values.data(), count, stride, k, kept);
      ASSERT_EQ(kept, want) << "trial " << trial << ", " << count << " values, k " << k;
    }
  }
}

TEST(CellKernel, PerfMapNamesTheLinkedKernelByItsCell) {
  LlvmBackendOptions options;
  options.perf_map = true;
  LlvmBackend backend(options);
  Program program = contraction(24, 3, {20}, true, KernelOp::sigmoid);
  program.name = "perf map test cell";
  const CompiledKernel kernel = backend.compile(program);
  std::ifstream map(perf_map_path());
  ASSERT_TRUE(map) << perf_map_path();
  const std::string name = kernel.symbol() + " cell perf map test cell";
  bool entry = false, epilogue = false;
  for (std::string line; std::getline(map, line);) {
    std::istringstream fields(line);
    std::string start, size, rest;
    fields >> start >> size;
    std::getline(fields >> std::ws, rest);
    const uint64_t address = std::stoull(start, nullptr, 16), bytes = std::stoull(size, nullptr, 16);
    if (rest == name) {
      entry = true;
      EXPECT_EQ(address, reinterpret_cast<uint64_t>(kernel.function)) << line;
      EXPECT_GT(bytes, 0u) << line;
    }
    // stage0_epilogue_tN: N, the row tiles of a register block, follows the ISA's registers.
    const std::string epilogue_prefix = kernel.symbol() + ".stage0_epilogue_t", cell = " cell perf map test cell";
    if (rest.rfind(epilogue_prefix, 0) == 0 && rest.size() > cell.size() &&
        rest.compare(rest.size() - cell.size(), cell.size(), cell) == 0)
      epilogue = true;
  }
  EXPECT_TRUE(entry) << "no line for " << name << " in " << perf_map_path();
  EXPECT_TRUE(epilogue) << "no line for the stage's epilogue in " << perf_map_path();
  map.close();
  std::remove(perf_map_path().c_str());
}

// Contractions that read the same x segment share one k loop (jit::cell_passes), each keeping the
// order of its own segments; the values equal a plain product. A: [x0; x1] (2 blocks), B: x0,
// C: [x1; x0] (x0 after x1: a pass of its own), D: [x0; x0].
TEST(CellKernel, ContractionsSharingASegmentShareItsLoopAndKeepTheirValues) {
  const int rows = 20, k0 = 12, k1 = 7, calls = 11;
  Program p;
  p.name = "shared segments";
  p.rows = rows;
  Program::Stage stage;
  const Program::Segment x0{{0, false}, 0, k0}, x1{{1, false}, 0, k1};
  const std::vector<std::vector<Program::Segment>> xs = {{x0, x1}, {x0}, {x1, x0}, {x0, x0}};
  const std::vector<int> blocks = {2, 1, 1, 1};
  int32_t slot = 2;
  for (size_t c = 0; c < xs.size(); ++c) {
    Program::Contraction contraction;
    contraction.blocks = blocks[c];
    contraction.x = xs[c];
    contraction.weight = int32_t(c);
    stage.contractions.push_back(contraction);
    for (int g = 0; g < blocks[c]; ++g) {
      Program::Instruction in;
      in.kind = Program::Instruction::accumulator;
      in.contraction = int32_t(c);
      in.block = g;
      stage.body.push_back(in);
      stage.stores.push_back({int32_t(stage.body.size() - 1), {slot++, false}, 0});
    }
  }
  p.stages.push_back(stage);
  p.call_slots = slot;

  const std::vector<CellPass> passes = cell_passes(p.stages[0]);
  ASSERT_EQ(passes.size(), 3u);
  EXPECT_EQ(passes[0].x.operand.slot, 0);  // x0: A at 0, B at 0, C's x0 waits, D's first x0 at 0
  ASSERT_EQ(passes[0].members.size(), 3u);
  EXPECT_EQ(passes[0].members[2].contraction, 3);
  EXPECT_EQ(passes[1].x.operand.slot, 1);  // x1: A at k0, C at 0
  ASSERT_EQ(passes[1].members.size(), 2u);
  EXPECT_EQ(passes[1].members[0].k_begin, k0);
  EXPECT_EQ(passes[2].x.operand.slot, 0);  // x0 again: C at k1, D's second x0 at k0
  ASSERT_EQ(passes[2].members.size(), 2u);
  EXPECT_EQ(passes[2].members[0].k_begin, k1);
  EXPECT_EQ(passes[2].members[1].k_begin, k0);

  LlvmBackend backend;
  const CompiledKernel kernel = backend.compile(p);
  const int vector = cell_vector_floats();
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> weights, packed;  // per contraction: column-major, packed
  for (size_t c = 0; c < xs.size(); ++c) {
    int64_t k = 0;
    for (const Program::Segment& x : xs[c]) k += x.rows;
    weights.emplace_back(size_t(blocks[c] * rows * k));
    for (float& v : weights.back()) v = uniform(random);
    packed.emplace_back(size_t(packed_weight_floats(rows, blocks[c], k, vector)) + size_t(vector));
    float* at = packed.back().data();
    while (reinterpret_cast<uintptr_t>(at) % (size_t(vector) * 4) != 0) ++at;
    pack_weight(rows, blocks[c], {{weights.back().data(), k}}, vector, at);
  }
  std::vector<const float*> weight_pointers;
  for (std::vector<float>& w : packed) {
    float* at = w.data();
    while (reinterpret_cast<uintptr_t>(at) % (size_t(vector) * 4) != 0) ++at;
    weight_pointers.push_back(at);
  }
  const int64_t stride = 2 * rows + 5;
  std::vector<float> memory(size_t(stride * slot * calls), 0.0f);
  for (float& v : memory) v = uniform(random);
  std::vector<float*> pointers(size_t(slot * calls));
  for (size_t i = 0; i < pointers.size(); ++i) pointers[i] = memory.data() + 1 + int64_t(i) * stride;
  const CellArgs args{calls, nullptr, weight_pointers.data(), pointers.data()};
  kernel.cell()(&args);

  for (int j = 0; j < calls; ++j) {
    int32_t out_slot = 2;
    for (size_t c = 0; c < xs.size(); ++c) {
      int64_t k_total = 0;
      for (const Program::Segment& x : xs[c]) k_total += x.rows;
      for (int g = 0; g < blocks[c]; ++g, ++out_slot)
        for (int r = 0; r < rows; ++r) {
          double expected = 0;
          int64_t k = 0;
          for (const Program::Segment& x : xs[c])
            for (int i = 0; i < x.rows; ++i, ++k)
              expected += double(weights[c][size_t(k * blocks[c] * rows + g * rows + r)]) *
                          pointers[size_t(j * slot + x.operand.slot)][i];
          ASSERT_NEAR(pointers[size_t(j * slot + out_slot)][r], expected, 1e-4 * (1 + std::abs(expected)))
              << "contraction " << c << " block " << g << " call " << j << " row " << r;
        }
    }
  }
}

}  // namespace
}  // namespace edb::jit
