// The cell program's checks, canonical text and weight packing (jit/cell_program.h).
#include "jit/cell_program.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <sstream>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "edbatch/errors.h"
#include "jit/text_reader.h"

namespace edb::jit {

namespace {

[[noreturn]] void invalid(const CellProgram& program, const std::string& what) {
  throw InternalError("jit::verify(CellProgram '" + program.name + "'): " + what);
}

void check_operand(const CellProgram& program, const CellProgram::Operand& operand, const char* what) {
  const int32_t slots = operand.shared ? program.shared_slots : program.call_slots;
  if (operand.slot < 0 || operand.slot >= slots)
    invalid(program, std::string(what) + " reads " + (operand.shared ? "shared" : "call") + " slot " +
                         std::to_string(operand.slot) + " of " + std::to_string(slots));
  if (operand.stride < 0) invalid(program, std::string(what) + " has a negative column stride");
}

// "c3", "s0", or "c3*64" for an operand whose columns are 64 floats apart.
std::string operand_text(const CellProgram::Operand& operand) {
  return (operand.shared ? "s" : "c") + std::to_string(operand.slot) +
         (operand.stride ? "*" + std::to_string(operand.stride) : std::string());
}

std::string segment_text(const CellProgram::Segment& segment) {
  return operand_text(segment.operand) + "[" + std::to_string(segment.row) + "+" + std::to_string(segment.rows) + "]";
}

constexpr const char* kColumnStepNames[] = {"softmax", "log_softmax", "softmax_grad", "log_softmax_grad",
                                             "sum", "mean", "dot", "scalar", "pick_neg_log_softmax",
                                             "pick_neg_log_softmax_grad", "argmax", "kmax_pooling",
                                             "kmax_pooling_grad", "transpose"};

void check_column_step(const CellProgram& program, const CellProgram::ColumnStep& step, const std::string& where) {
  if (size_t(step.kind) >= std::size(kColumnStepNames)) invalid(program, where + ": a column step of no kind");
  if (step.x.rows <= 0 || step.x.row < 0 || step.cols < 1) invalid(program, where + ": an empty column step");
  check_operand(program, step.x.operand, "a column step");
  if (step.cols > 1 && step.x.operand.stride < step.x.rows) invalid(program, where + ": a column step's columns overlap");
  if (step.kind == CellProgram::ColumnStep::scalar &&
      (step.x.rows != 1 || step.cols != 1 || step.op == KernelOp::load || kernel_op_arity(step.op) < 1))
    invalid(program, where + ": a scalar step of more than one float, or of no computing op");
  using Step = CellProgram::ColumnStep;
  if ((step.kind == Step::pick_neg_log_softmax || step.kind == Step::pick_neg_log_softmax_grad) &&
      (step.cols != 1 || step.index < 0 || step.index >= step.x.rows))
    invalid(program, where + ": a label outside its column, or a column step of labels over several columns");
  if ((step.kind == Step::kmax_pooling || step.kind == Step::kmax_pooling_grad) && (step.index < 1 || step.index > step.cols))
    invalid(program, where + ": k is " + std::to_string(step.index) + " for " + std::to_string(step.cols) + " columns");
  if (column_step_has_y(step)) {
    check_operand(program, step.y.operand, "a column step");
    // pick_neg_log_softmax_grad's y is one float; kmax_pooling_grad's has k columns.
    const int32_t rows = step.kind == Step::pick_neg_log_softmax_grad ? 1 : step.x.rows;
    const int32_t cols = step.kind == Step::kmax_pooling_grad ? step.index : step.cols;
    if (step.y.rows != rows || step.y.row < 0 || (cols > 1 && step.y.operand.stride < step.y.rows))
      invalid(program, where + ": a column step's second argument is not as tall as its first");
  }
  if (step.out.shared || step.out.stride != 0) invalid(program, where + ": a column step's output is not a call slot");
  check_operand(program, step.out, "a column step's output");
}

}  // namespace

const char* column_step_name(CellProgram::ColumnStep::Kind kind) { return kColumnStepNames[size_t(kind)]; }

bool column_step_from_name(std::string_view name, CellProgram::ColumnStep::Kind& kind) {
  for (size_t k = 0; k < std::size(kColumnStepNames); ++k)
    if (name == kColumnStepNames[k]) {
      kind = CellProgram::ColumnStep::Kind(k);
      return true;
    }
  return false;
}

bool column_step_has_y(const CellProgram::ColumnStep& step) {
  using Step = CellProgram::ColumnStep;
  return step.kind == Step::softmax_grad || step.kind == Step::log_softmax_grad || step.kind == Step::dot ||
         step.kind == Step::pick_neg_log_softmax_grad || step.kind == Step::kmax_pooling_grad ||
         (step.kind == Step::scalar && kernel_op_arity(step.op) == 2);
}
bool column_step_is_total(CellProgram::ColumnStep::Kind kind) {
  using Step = CellProgram::ColumnStep;
  return kind == Step::sum || kind == Step::mean || kind == Step::dot || kind == Step::scalar ||
         kind == Step::pick_neg_log_softmax;
}
bool column_step_has_index(CellProgram::ColumnStep::Kind kind) {
  using Step = CellProgram::ColumnStep;
  return kind == Step::pick_neg_log_softmax || kind == Step::pick_neg_log_softmax_grad || kind == Step::kmax_pooling ||
         kind == Step::kmax_pooling_grad;
}

int32_t CellProgram::weight_count() const {
  int32_t count = 0;
  for (const Stage& stage : stages)
    for (const Contraction& c : stage.contractions) count = std::max(count, c.weight + 1);
  return count;
}

void verify(const CellProgram& program) {
  if (program.rows <= 0) invalid(program, "block rows " + std::to_string(program.rows));
  if (program.stages.empty()) invalid(program, "no stages");
  std::vector<int> weight_uses(size_t(std::max(program.weight_count(), 0)), 0);
  for (size_t s = 0; s < program.stages.size(); ++s) {
    const CellProgram::Stage& stage = program.stages[s];
    const std::string where = "stage " + std::to_string(s);
    if (stage.columns < 1) invalid(program, where + ": " + std::to_string(stage.columns) + " columns");
    for (const CellProgram::Contraction& c : stage.contractions) {
      if (c.x_step < 1 || (c.x_step != 1 && c.x.size() != 1))
        invalid(program, where + ": x read with step " + std::to_string(c.x_step) + " (only x of one segment has a step)");
      if (c.blocks <= 0 || c.x.empty() || (c.weight < 0) != c.has_matrix)
        invalid(program, where + ": a contraction without blocks or x, or without one of a weight and a matrix");
      if (c.has_matrix) {
        check_operand(program, c.matrix.operand, "a contraction's matrix");
        if (c.matrix.rows <= 0 || c.matrix.row < 0) invalid(program, where + ": an empty matrix");
        if (c.leading <= 0) invalid(program, where + ": a matrix of leading dimension " + std::to_string(c.leading));
        if (c.transposed && c.x.size() != 1) invalid(program, where + ": a transposed matrix times x of several segments");
        if (c.transposed && c.x_step != 1) invalid(program, where + ": a transposed matrix times x read with a step");
      } else {
        if (c.transposed) invalid(program, where + ": a packed weight marked transposed");
        ++weight_uses[size_t(c.weight)];
      }
      for (const CellProgram::Segment& x : c.x) {
        check_operand(program, x.operand, "a contraction");
        if (x.rows <= 0 || x.row < 0) invalid(program, where + ": an empty x segment");
      }
      if (c.has_bias) check_operand(program, c.bias.operand, "a bias");
    }
    for (size_t i = 0; i < stage.body.size(); ++i) {
      const CellProgram::Instruction& in = stage.body[i];
      const std::string at = where + " value " + std::to_string(i);
      switch (in.kind) {
        case CellProgram::Instruction::load:
          check_operand(program, in.operand, "a load");
          if (in.block < 0) invalid(program, at + ": negative block");
          break;
        case CellProgram::Instruction::accumulator:
          if (in.contraction < 0 || size_t(in.contraction) >= stage.contractions.size() || in.block < 0 ||
              in.block >= stage.contractions[size_t(in.contraction)].blocks)
            invalid(program, at + ": no such accumulator");
          break;
        case CellProgram::Instruction::compute: {
          const int arity = kernel_op_arity(in.op);
          if (in.op == KernelOp::load || arity < 1) invalid(program, at + ": not a computing op");
          if (in.a < 0 || size_t(in.a) >= i || (arity == 2 && (in.b < 0 || size_t(in.b) >= i)))
            invalid(program, at + ": reads a value not defined before it");
          break;
        }
      }
    }
    if (!stage.steps.empty()) {
      if (!stage.contractions.empty() || !stage.body.empty() || !stage.stores.empty() || stage.columns != 1)
        invalid(program, where + ": a column stage with blocks of its own");
      for (const CellProgram::ColumnStep& step : stage.steps) check_column_step(program, step, where);
      continue;
    }
    if (stage.stores.empty()) invalid(program, where + " stores nothing");
    for (const CellProgram::Store& store : stage.stores) {
      if (store.value < 0 || size_t(store.value) >= stage.body.size()) invalid(program, where + ": a store of no value");
      if (store.operand.shared) invalid(program, where + ": a store into a shared slot");
      check_operand(program, store.operand, "a store");
    }
  }
  for (size_t w = 0; w < weight_uses.size(); ++w)
    if (weight_uses[w] != 1) invalid(program, "weight " + std::to_string(w) + " is used by " + std::to_string(weight_uses[w]) + " contractions");
}

std::string describe(const CellProgram& program) {
  verify(program);
  std::ostringstream out;
  out << "cell " << program.name << '\n';
  out << "rows " << program.rows << " call_slots " << program.call_slots << " shared_slots " << program.shared_slots << '\n';
  for (size_t s = 0; s < program.stages.size(); ++s) {
    const CellProgram::Stage& stage = program.stages[s];
    out << "stage " << s;
    if (stage.columns != 1) out << " columns " << stage.columns;
    out << '\n';
    for (size_t c = 0; c < stage.contractions.size(); ++c) {
      const CellProgram::Contraction& k = stage.contractions[c];
      out << "  contraction " << c << " blocks " << k.blocks;
      if (k.has_matrix)
        out << " matrix " << segment_text(k.matrix) << " leading " << k.leading << (k.transposed ? " transposed" : "");
      else
        out << " weight " << k.weight;
      out << " x";
      for (const CellProgram::Segment& x : k.x) out << ' ' << segment_text(x);
      if (k.x_step != 1) out << " step " << k.x_step;
      if (k.has_bias) out << " bias " << segment_text(k.bias);
      out << '\n';
    }
    for (size_t i = 0; i < stage.body.size(); ++i) {
      const CellProgram::Instruction& in = stage.body[i];
      out << "  %" << i << " = ";
      switch (in.kind) {
        case CellProgram::Instruction::load: out << "load " << operand_text(in.operand) << " block " << in.block; break;
        case CellProgram::Instruction::accumulator:
          out << "accumulator " << in.contraction << " block " << in.block;
          break;
        case CellProgram::Instruction::compute:
          out << kernel_op_name(in.op) << " %" << in.a;
          if (kernel_op_arity(in.op) == 2) out << " %" << in.b;
          if (kernel_op_has_constant(in.op)) out << ' ' << constant_text(in.constant);
          break;
      }
      out << '\n';
    }
    for (const CellProgram::Store& store : stage.stores)
      out << "  store %" << store.value << " " << operand_text(store.operand) << " block " << store.block << '\n';
    for (const CellProgram::ColumnStep& step : stage.steps) {
      out << "  column_step " << column_step_name(step.kind);
      if (step.kind == CellProgram::ColumnStep::scalar) {
        out << ' ' << kernel_op_name(step.op);
        if (kernel_op_has_constant(step.op)) out << ' ' << constant_text(step.constant);
      }
      out << " cols " << step.cols;
      if (column_step_has_index(step.kind)) out << " index " << step.index;
      out << " x " << segment_text(step.x);
      if (column_step_has_y(step)) out << " y " << segment_text(step.y);
      out << " out " << operand_text(step.out) << '\n';
    }
  }
  return out.str();
}

namespace {

// "c3" or "s0": a call or shared slot; "c3*64": its columns 64 floats apart.
CellProgram::Operand parse_operand(const LineReader& in, std::string_view word) {
  if (word.empty() || (word[0] != 'c' && word[0] != 's')) in.fail("expected a slot cN or sN, got '" + std::string(word) + "'");
  const size_t star = word.find('*');
  CellProgram::Operand operand{in.number(word.substr(0, star), word[0]), word[0] == 's'};
  if (star != std::string_view::npos) operand.stride = in.number("n" + std::string(word.substr(star + 1)), 'n');
  return operand;
}

// "c3[0+128]": rows [0, 0 + 128) of call slot 3.
CellProgram::Segment parse_segment(const LineReader& in, std::string_view word) {
  const size_t open = word.find('['), plus = word.find('+'), close = word.find(']');
  if (open == std::string_view::npos || plus == std::string_view::npos || close != word.size() - 1 || plus < open)
    in.fail("expected a segment like c0[0+128], got '" + std::string(word) + "'");
  CellProgram::Segment segment;
  segment.operand = parse_operand(in, word.substr(0, open));
  segment.row = in.number("r" + std::string(word.substr(open + 1, plus - open - 1)), 'r');
  segment.rows = in.number("r" + std::string(word.substr(plus + 1, close - plus - 1)), 'r');
  return segment;
}

int32_t parse_count(LineReader& in, std::string_view name) {
  in.expect(name);
  return in.number("n" + std::string(in.word()), 'n');
}

}  // namespace

CellProgram parse_cell_program(std::string_view text) {
  CellProgram program;
  size_t number = 0;
  constexpr const char* kText = "cell program text";
  bool header = false, sizes = false;
  while (!text.empty()) {
    const std::string_view line = take_line(text);
    LineReader in(line, ++number, kText);
    if (!header) {
      if (!line.starts_with("cell ")) in.fail("expected 'cell NAME'");
      program.name = std::string(line.substr(5));
      header = true;
      continue;
    }
    if (!sizes) {
      program.rows = parse_count(in, "rows");
      program.call_slots = parse_count(in, "call_slots");
      program.shared_slots = parse_count(in, "shared_slots");
      in.end();
      sizes = true;
      continue;
    }
    const std::string_view first = in.word();
    if (first == "stage") {
      if (in.number("n" + std::string(in.word()), 'n') != int32_t(program.stages.size())) in.fail("stages must be numbered 0, 1, ... in order");
      program.stages.emplace_back();
      const std::string_view columns = in.word_or_end();
      if (!columns.empty()) {
        if (columns != "columns") in.fail("expected 'columns N' or the end of the line");
        program.stages.back().columns = in.number("n" + std::string(in.word()), 'n');
      }
      in.end();
      continue;
    }
    if (program.stages.empty()) in.fail("expected 'stage 0' before the stage's lines");
    CellProgram::Stage& stage = program.stages.back();
    if (first == "contraction") {
      if (in.number("n" + std::string(in.word()), 'n') != int32_t(stage.contractions.size()))
        in.fail("contractions must be numbered 0, 1, ... in order");
      CellProgram::Contraction c;
      c.blocks = parse_count(in, "blocks");
      const std::string_view source = in.word();
      if (source == "weight") {
        c.weight = in.number("n" + std::string(in.word()), 'n');
        in.expect("x");
      } else if (source == "matrix") {
        c.has_matrix = true;
        c.matrix = parse_segment(in, in.word());
        c.leading = parse_count(in, "leading");
        std::string_view next = in.word();
        if (next == "transposed") {
          c.transposed = true;
          next = in.word();
        }
        if (next != "x") in.fail("expected 'x', got '" + std::string(next) + "'");
      } else {
        in.fail("expected 'weight N' or 'matrix cN[ROW+ROWS] leading N', got '" + std::string(source) + "'");
      }
      for (;;) {
        const std::string_view word = in.word_or_end();
        if (word.empty()) break;
        if (word == "step") {
          c.x_step = in.number("n" + std::string(in.word()), 'n');
          continue;
        }
        if (word == "bias") {
          c.has_bias = true;
          c.bias = parse_segment(in, in.word());
          break;
        }
        c.x.push_back(parse_segment(in, word));
      }
      in.end();
      stage.contractions.push_back(std::move(c));
    } else if (first == "store") {
      CellProgram::Store store;
      store.value = in.number('%');
      store.operand = parse_operand(in, in.word());
      store.block = parse_count(in, "block");
      in.end();
      stage.stores.push_back(store);
    } else if (first == "column_step") {
      CellProgram::ColumnStep step;
      const std::string_view name = in.word();
      if (!column_step_from_name(name, step.kind)) in.fail("unknown column step '" + std::string(name) + "'");
      if (step.kind == CellProgram::ColumnStep::scalar) {
        const std::string_view op = in.word();
        if (!kernel_op_from_name(op, step.op) || step.op == KernelOp::load) in.fail("unknown op '" + std::string(op) + "'");
        if (kernel_op_has_constant(step.op)) step.constant = in.constant();
      }
      step.cols = parse_count(in, "cols");
      if (column_step_has_index(step.kind)) step.index = parse_count(in, "index");
      in.expect("x");
      step.x = parse_segment(in, in.word());
      if (column_step_has_y(step)) {
        in.expect("y");
        step.y = parse_segment(in, in.word());
      }
      in.expect("out");
      step.out = parse_operand(in, in.word());
      in.end();
      stage.steps.push_back(step);
    } else if (first.starts_with("%")) {
      if (in.number(first, '%') != int32_t(stage.body.size())) in.fail("values must be numbered %0, %1, ... in order");
      in.expect("=");
      const std::string_view name = in.word();
      CellProgram::Instruction instruction;
      if (name == "load") {
        instruction.kind = CellProgram::Instruction::load;
        instruction.operand = parse_operand(in, in.word());
        instruction.block = parse_count(in, "block");
      } else if (name == "accumulator") {
        instruction.kind = CellProgram::Instruction::accumulator;
        instruction.contraction = in.number("n" + std::string(in.word()), 'n');
        instruction.block = parse_count(in, "block");
      } else {
        if (!kernel_op_from_name(name, instruction.op) || instruction.op == KernelOp::load)
          in.fail("unknown op '" + std::string(name) + "'");
        instruction.a = in.number('%');
        if (kernel_op_arity(instruction.op) == 2) instruction.b = in.number('%');
        if (kernel_op_has_constant(instruction.op)) instruction.constant = in.constant();
      }
      in.end();
      stage.body.push_back(instruction);
    } else {
      in.fail("expected 'stage', 'contraction', 'store', 'column_step' or '%N = ...'");
    }
  }
  if (!header) throw UsageError("cell program text is empty");
  try {
    verify(program);
  } catch (const InternalError& e) {
    throw UsageError(std::string("cell program text: ") + e.what());
  }
  return program;
}

int64_t packed_weight_floats(int32_t rows, int32_t blocks, int64_t k, int32_t vector) {
  const int64_t tiles = (rows + vector - 1) / vector;
  return tiles * k * blocks * vector;
}

namespace {

// out[k * k_stride + i] = rows[i * cols + k] for i < count, k < cols: W_t's row r is the
// parameter's column r, contiguous over k. In 4 x 4 blocks transposed in registers where the ISA
// has them (SSE, every x86-64), so that neither the reads nor the writes go one float at a time
// (scalar stores were most of the repacking after each optimizer step); the edges one by one.
void pack_transposed(const float* rows, int64_t cols, int64_t count, float* out, int64_t k_stride) {
  int64_t i0 = 0;
#if defined(__SSE__)
  for (; i0 + 4 <= count; i0 += 4) {
    const float* r = rows + i0 * cols;
    int64_t k = 0;
    for (; k + 4 <= cols; k += 4) {
      __m128 a = _mm_loadu_ps(r + k), b = _mm_loadu_ps(r + cols + k);
      __m128 c = _mm_loadu_ps(r + 2 * cols + k), d = _mm_loadu_ps(r + 3 * cols + k);
      _MM_TRANSPOSE4_PS(a, b, c, d);
      _mm_storeu_ps(out + k * k_stride + i0, a);
      _mm_storeu_ps(out + (k + 1) * k_stride + i0, b);
      _mm_storeu_ps(out + (k + 2) * k_stride + i0, c);
      _mm_storeu_ps(out + (k + 3) * k_stride + i0, d);
    }
    for (; k < cols; ++k)
      for (int64_t i = i0; i < i0 + 4; ++i) out[k * k_stride + i] = rows[i * cols + k];
  }
#endif
  for (int64_t i = i0; i < count; ++i)
    for (int64_t k = 0; k < cols; ++k) out[k * k_stride + i] = rows[i * cols + k];
}

}  // namespace

void pack_weight(int32_t rows, int32_t blocks, const std::vector<WeightPiece>& pieces, int32_t vector, float* packed,
                 int64_t tile_begin, int64_t tile_end) {
  int64_t k_total = 0;
  for (const WeightPiece& piece : pieces) k_total += piece.cols;
  const int64_t tiles = (rows + vector - 1) / vector;
  const int64_t k_stride = int64_t(blocks) * vector;  // from one k's floats to the next's
  for (int64_t t = tile_begin; t < (tile_end < 0 ? tiles : std::min(tiles, tile_end)); ++t) {
    const int64_t row0 = t * vector;
    const int64_t live = std::min<int64_t>(vector, rows - row0);
    float* tile = packed + t * k_total * k_stride;
    int64_t k0 = 0;
    for (const WeightPiece& piece : pieces) {
      const int64_t present = piece.present < 0 ? int64_t(rows) * blocks : piece.present;
      for (int32_t g = 0; g < blocks; ++g) {
        const int64_t first = int64_t(g) * rows + row0;  // W_t's row at the tile's first float
        const int64_t filled = std::clamp<int64_t>(present - first, 0, live);  // rows read, then zeros
        float* out = tile + k0 * k_stride + int64_t(g) * vector;
        for (int64_t col = 0; col < piece.cols; ++col) std::fill(out + col * k_stride + filled, out + col * k_stride + vector, 0.0f);
        if (!piece.transposed) {
          for (int64_t col = 0; col < piece.cols; ++col)
            std::memcpy(out + col * k_stride, piece.data + col * present + first, sizeof(float) * size_t(filled));
          continue;
        }
        pack_transposed(piece.data + first * piece.cols, piece.cols, filled, out, k_stride);
      }
      k0 += piece.cols;
    }
  }
}

}  // namespace edb::jit
