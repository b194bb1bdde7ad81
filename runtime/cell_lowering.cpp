// Lowering a cell body into a cell program (jit/cell_program.h): the program of a body as a call
// of it lies (its leaves, then its operations contiguously), the values it stores, and the frame a
// call node keeps (CallCell). Running the program is runtime/cell_kernels.cpp's.
#include "runtime/cell_lowering.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>

#include "edbatch/errors.h"

namespace edb::runtime {

namespace {

using Program = jit::CellProgram;

// Not expressible: the reason, for the lowering's caller.
struct Unsupported {
  std::string why;
};

// An elementwise op of the body: a kernel op, or an activation gradient built from them.
bool lowers_elementwise(ir::Op op) {
  jit::KernelOp kernel_op;
  return jit::kernel_op_for(op, kernel_op) || jit::is_activation_gradient(op);
}
// A product W x: affine, matmul and matvec, or matmul_tn (W^T x, the backward pass's dx = W^T dy,
// whose weight is packed transposed), of a weight parameter W; or, but for affine, of a per-call
// W (a matvec's matrix), and matmul_nt of two vectors (the backward pass's dW = dy x^T of a
// per-call W), whose W is read in place.
bool is_product(ir::Op op) {
  return op == ir::Op::affine || op == ir::Op::matmul || op == ir::Op::matvec || op == ir::Op::matmul_tn ||
         op == ir::Op::matmul_nt;
}
// An elementwise op of 1x1 values that is a scalar column step: a kernel op, or a sum (a chain of
// adds). Not an activation gradient (several kernel ops).
bool is_scalar_step(const ir::Node& n) {
  jit::KernelOp op;
  return n.shape.size() == 1 && (n.op == ir::Op::sum || jit::kernel_op_for(n.op, op));
}
// An op over whole columns, a column step of its own stage (jit::CellProgram::ColumnStep).
bool column_step_for(ir::Op op, Program::ColumnStep::Kind& kind) {
  switch (op) {
    case ir::Op::softmax: kind = Program::ColumnStep::softmax; return true;
    case ir::Op::log_softmax: kind = Program::ColumnStep::log_softmax; return true;
    case ir::Op::softmax_grad: kind = Program::ColumnStep::softmax_grad; return true;
    case ir::Op::log_softmax_grad: kind = Program::ColumnStep::log_softmax_grad; return true;
    case ir::Op::sum_elements: kind = Program::ColumnStep::sum; return true;
    case ir::Op::mean_elements: kind = Program::ColumnStep::mean; return true;
    default: return false;
  }
}

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

  CellLowering lower() {
    choose_rows();
    forms_.resize(count_);
    for (uint32_t o = 0; o < count_; ++o) classify(o);
    if (for_backward_)
      for (uint32_t o = 0; o < count_; ++o) need_for_backward(o);
    // A view keeps nothing of its own: readers after the kernel find it in its source's place.
    for (uint32_t o = count_; o-- > 0;)
      if (needed_[o] && is_view(o) && forms_[o].sources[0] < int32_t(count_))
        needed_[size_t(forms_[o].sources[0])] = true;
    // Stages in order of level, then of columns (a value of other columns than its reader's is
    // read from memory, so from an earlier level); within one, nodes in recording order (a
    // topological order).
    // A level's column stage (key columns 0) runs first: its block stages read the steps' outputs.
    for (uint32_t o = 0; o < count_; ++o)
      if (forms_[o].stage > 0) stage_of_.try_emplace(stage_key(forms_[o]), 0);
    for (auto& [key, index] : stage_of_) {
      index = int32_t(out_.program.stages.size());
      out_.program.stages.emplace_back().columns = std::max(key.second, 1);
      level_.push_back(key.first);
    }
    loads_.assign(out_.program.stages.size(), {});
    for (uint32_t o = 0; o < count_; ++o) emit(o);
    out_.program.rows = rows_;
    out_.program.call_slots = int32_t(out_.call_slots.size());
    out_.program.shared_slots = int32_t(out_.shared_slots.size());
    // A stage that stores nothing computes only values nobody reads (a later stage reads what
    // earlier ones stored): it goes, as dead code.
    std::erase_if(out_.program.stages, [](const Program::Stage& stage) { return stage.stores.empty() && stage.steps.empty(); });
    std::vector<CellLowering::Weight> weights;  // the kept contractions' weights, renumbered
    for (Program::Stage& stage : out_.program.stages)
      for (Program::Contraction& c : stage.contractions) {
        if (c.has_matrix) continue;
        weights.push_back(std::move(out_.weights[size_t(c.weight)]));
        c.weight = int32_t(weights.size() - 1);
      }
    out_.weights = std::move(weights);
    if (out_.program.stages.empty()) throw Unsupported{"the body computes nothing that is kept"};
    jit::verify(out_.program);
    return std::move(out_);
  }

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
  void choose_rows() {
    int32_t elementwise = 0, linear = 0, scalar = 0;
    for (uint32_t o = 0; o < count_; ++o) {
      const ir::Node& n = body_node(o);
      if (is_scalar_step(n)) scalar = 1;
      else if (lowers_elementwise(n.op)) elementwise = elementwise ? std::min(elementwise, n.shape.rows) : n.shape.rows;
      if (is_product(n.op) && n.shape.size() == 1) scalar = 1;
      else if (is_product(n.op)) linear = linear ? std::min(linear, n.shape.rows) : n.shape.rows;
    }
    rows_ = elementwise ? elementwise : linear ? linear : scalar;
    if (rows_ <= 0) throw Unsupported{"no elementwise op or product to build blocks from"};
  }

  // The form id of argument `argument` of body node o: a body node's own, or a new external.
  int32_t argument_form(uint32_t o, int32_t argument) {
    const ir::NodeId arg = graph_.args(first_ + o)[size_t(argument)];
    if (inside(arg)) return int32_t(arg - first_);
    const ir::Node& n = graph_.node(arg);
    Form f;
    f.kind = Form::external;
    f.rows = n.shape.rows;
    f.cols = n.shape.cols;
    if (n.op == ir::Op::parameter) {
      // The same node in every call: one shared slot per parameter.
      auto [it, added] = shared_of_.try_emplace(arg, int32_t(out_.shared_slots.size()));
      if (added) out_.shared_slots.push_back({o, argument});
      f.memory = {it->second, true, column_stride(f)};
    } else {
      // One call slot per reference: two references may be one node in this call and two in another.
      f.memory = {int32_t(out_.call_slots.size()), false, column_stride(f)};
      out_.call_slots.push_back({o, argument});
    }
    forms_.push_back(f);
    return int32_t(forms_.size() - 1);
  }

  bool block_aligned(int32_t rows) const { return rows % rows_ == 0; }
  // A slice or reshape the plan places in its source's memory.
  bool is_view(uint32_t o) const {
    return (forms_[o].kind == Form::slice || forms_[o].kind == Form::reshape) && plan_.is_view(first_ + o);
  }
  // A matrix's columns lie its rows apart; a vector's one column is the same in every column.
  static int32_t column_stride(const Form& f) { return f.cols > 1 ? f.rows : 0; }

  void classify(uint32_t o) {
    const ir::Node& n = body_node(o);
    Form& f = forms_[o];
    f.rows = n.shape.rows;
    f.cols = n.shape.cols;
    // A matrix is cut into blocks column by column: its rows must be whole blocks.
    if (n.shape.cols != 1 && !block_aligned(n.shape.rows))
      throw Unsupported{std::string(ir::op_name(n.op)) + " of a matrix of " + std::to_string(n.shape.rows) +
                        " rows, not blocks of " + std::to_string(rows_)};
    const auto args = graph_.args(n);
    if (is_product(n.op) && (n.op == ir::Op::matmul_nt || (n.op != ir::Op::affine && (inside(args[0]) || graph_.node(args[0]).op != ir::Op::parameter)))) {
      classify_per_call_product(o);
      return;
    }
    if (is_product(n.op)) {
      if (!block_aligned(n.shape.rows) && n.op == ir::Op::affine)
        throw Unsupported{"a product of " + std::to_string(n.shape.rows) + " rows, not blocks of " + std::to_string(rows_)};
      const size_t products = n.op == ir::Op::affine ? 1 : 0;
      int32_t stage = 1;
      std::vector<int32_t> x_forms;
      for (size_t slot = products; slot + 1 < args.size(); slot += 2) {
        if (inside(args[slot]) || graph_.node(args[slot]).op != ir::Op::parameter)
          throw Unsupported{"a product whose weight is not a parameter"};
        x_forms.push_back(argument_form(o, int32_t(slot + 1)));
        stage = std::max(stage, memory_stage(x_forms.back()) + 1);
        need_in_memory(x_forms.back());
      }
      int32_t bias = -1;
      if (products) {
        bias = argument_form(o, 0);
        stage = std::max(stage, memory_stage(bias) + 1);
        need_in_memory(bias);
      }
      Form& g = forms_[o];  // forms_ may have grown
      g.kind = Form::contraction;
      g.stage = stage;
      g.sources = x_forms;
      g.bias = bias;
      return;
    }
    if (n.op == ir::Op::reshape || n.op == ir::Op::scale_gradient) {  // scale_gradient: x itself
      // The same floats seen as another shape: read in place from the source's memory, so the
      // source is stored (the backward body's gradient seeds and frame reads, vectors seen as matrices).
      const int32_t source = argument_form(o, 0);
      const Form& from = forms_[size_t(source)];
      if (from.cols != 1 && n.shape.cols != 1) throw Unsupported{"a reshape of a matrix into a matrix"};
      need_in_memory(source);
      Form& g = forms_[o];
      g.kind = Form::reshape;
      g.sources = {source};
      g.stage = memory_stage(source) + 1;
      return;
    }
    if (n.op == ir::Op::slice) {
      const int32_t source = argument_form(o, 0);
      Form& g = forms_[o];
      g.kind = Form::slice;
      g.sources = {source};
      g.begin = n.attrs.begin;
      g.stage = std::max(1, forms_[size_t(source)].stage);
      const bool view = plan_.is_view(first_ + o);
      if (view) out_.views.push_back(o);
      if (!view && !(block_aligned(n.attrs.begin) && block_aligned(g.rows)))
        throw Unsupported{"a copied slice of rows not on block boundaries"};
      return;
    }
    Program::ColumnStep::Kind step;
    if (column_step_for(n.op, step) || is_scalar_step(n)) {
      // Its arguments are read whole, from memory: a later level than theirs.
      std::vector<int32_t> operands;
      int32_t stage = 1;
      for (size_t i = 0; i < args.size(); ++i) {
        operands.push_back(argument_form(o, int32_t(i)));
        stage = std::max(stage, memory_stage(operands.back()) + 1);
        need_in_memory(operands.back());
      }
      Form& g = forms_[o];
      g.kind = Form::column;
      g.sources = operands;
      g.stage = stage;
      return;
    }
    const bool concat = n.op == ir::Op::concat;
    if (concat || lowers_elementwise(n.op)) {
      if (!concat && !block_aligned(n.shape.rows))
        throw Unsupported{std::string(ir::op_name(n.op)) + " of " + std::to_string(n.shape.rows) + " rows, not blocks of " + std::to_string(rows_)};
      std::vector<int32_t> operands;
      int32_t stage = 1;
      for (size_t i = 0; i < args.size(); ++i) {
        operands.push_back(argument_form(o, int32_t(i)));
        const int32_t rows = forms_[size_t(operands.back())].rows;
        if (concat && !block_aligned(rows))
          throw Unsupported{"a concat of a part of " + std::to_string(rows) + " rows, not blocks of " + std::to_string(rows_)};
        if (!concat && rows != n.shape.rows) throw Unsupported{"an elementwise op over operands of other shapes"};
        stage = std::max(stage, forms_[size_t(operands.back())].stage);
      }
      Form& g = forms_[o];
      g.kind = concat ? Form::concat : Form::elementwise;
      g.sources = operands;
      g.stage = stage;
      need_earlier_stages(operands, stage);
      return;
    }
    throw Unsupported{std::string("op ") + std::string(ir::op_name(n.op))};
  }

  // W x of a per-call W (read in place, call by call): matmul and matvec (column k of W times
  // element k of x's column), matmul_tn (each row of the product a dot product of a column of W
  // with x's column) and matmul_nt of two vectors (dy x^T: column j is dy times element j of x).
  void classify_per_call_product(uint32_t o) {
    const ir::Node& n = body_node(o);
    const std::string op(ir::op_name(n.op));
    if (graph_.args(n).size() != 2) throw Unsupported{op + " of several products"};
    if (n.shape.size() == 1 && n.op != ir::Op::matmul_nt) {
      // A row times a column, or (matmul_tn) a column's transpose times one: a dot step (a pick,
      // a sum or mean over a column's rows, their gradients' sums).
      const int32_t w = argument_form(o, 0), x = argument_form(o, 1);
      need_in_memory(w);
      need_in_memory(x);
      Form& g = forms_[o];
      g.kind = Form::column;
      g.sources = {w, x};
      g.stage = std::max(memory_stage(w), memory_stage(x)) + 1;
      return;
    }
    if (!block_aligned(n.shape.rows))
      throw Unsupported{op + " of a per-call matrix, of " + std::to_string(n.shape.rows) + " rows, not blocks of " + std::to_string(rows_)};
    const int32_t matrix = argument_form(o, 0), x = argument_form(o, 1);
    need_in_memory(matrix);
    need_in_memory(x);
    Form& g = forms_[o];  // forms_ may have grown
    g.kind = Form::contraction;
    g.stage = std::max(memory_stage(matrix), memory_stage(x)) + 1;
    g.sources = {x};
    g.matrix = matrix;
  }

  // A concat that is stored anyway (an output: a backward cell's gate gradients, which the
  // weight's gradient reads) of values the body computes: a reader in a later stage reads its
  // place rather than each part's, so the parts need no stores of their own (they were written
  // twice: TreeLSTM's backward cells stored 3 of their 6 and 10 blocks twice).
  bool read_in_place(int32_t f) const {
    const Form& form = forms_[size_t(f)];
    if (form.kind != Form::concat || f >= int32_t(count_) || !needed_[size_t(f)]) return false;
    for (int32_t part : form.sources) {
      const Form::Kind kind = forms_[size_t(part)].kind;
      if (kind != Form::elementwise && kind != Form::contraction) return false;
    }
    return true;
  }

  // Form f's values are read from memory: every body value they come from must be stored.
  void need_in_memory(int32_t f) {
    const Form& form = forms_[size_t(f)];
    if (form.kind == Form::external || read_in_place(f)) return;
    if (form.kind == Form::slice || form.kind == Form::concat || form.kind == Form::reshape) {
      for (int32_t source : form.sources) need_in_memory(source);
      return;
    }
    needed_[size_t(f)] = true;
  }
  // Operands computed in an earlier stage than their reader are loaded from memory.
  void need_earlier_stages(const std::vector<int32_t>& operands, int32_t stage) {
    for (int32_t f : operands)
      if (forms_[size_t(f)].stage < stage) need_in_memory(f);
  }
  // What the backward pass's rule for body node o reads of the forward values (trace/backward.cpp):
  // a product's factors (a parameter's are outside the body), both factors of cmult, max and min,
  // the arguments of log, abs, square, cube, softsign, silu, elu, selu, log_sigmoid, erf and the
  // trigonometric and hyperbolic ops and their inverses, div's divisor and output, pow's arguments
  // and output, the outputs of activations, exp, sqrt, tan, silu, elu and selu (round, ceil and
  // floor read nothing).
  void need_for_backward(uint32_t o) {
    const ir::Node& n = body_node(o);
    const auto args = graph_.args(n);
    auto need = [&](ir::NodeId id) {
      if (inside(id)) needed_[id - first_] = true;
    };
    switch (n.op) {
      case ir::Op::matmul:
      case ir::Op::matvec: need(args[0]); need(args[1]); break;
      case ir::Op::affine:
        for (size_t i = 1; i + 1 < args.size(); i += 2) need(args[i + 1]);
        break;
      case ir::Op::cmult:
      case ir::Op::max:
      case ir::Op::min: need(args[0]); need(args[1]); break;
      case ir::Op::log:
      case ir::Op::abs:
      case ir::Op::square:
      case ir::Op::cube:
      case ir::Op::softsign: need(args[0]); break;
      case ir::Op::log_sigmoid:
      case ir::Op::erf:
      case ir::Op::sin:
      case ir::Op::cos:
      case ir::Op::sinh:
      case ir::Op::cosh:
      case ir::Op::asinh:
      case ir::Op::acosh:
      case ir::Op::atanh: need(args[0]); break;
      case ir::Op::pow: need(args[0]); need(args[1]); needed_[o] = true; break;
      case ir::Op::silu:
      case ir::Op::elu:
      case ir::Op::selu: need(args[0]); needed_[o] = true; break;
      case ir::Op::div: need(args[1]); needed_[o] = true; break;
      case ir::Op::sqrt:
      case ir::Op::tan:
      case ir::Op::tanh:
      case ir::Op::sigmoid:
      case ir::Op::relu:
      case ir::Op::exp:
      case ir::Op::softmax:
      case ir::Op::log_softmax: needed_[o] = true; break;
      default: break;
    }
  }

  // After which stage form f's values are all in memory (0: before the kernel starts).
  int32_t memory_stage(int32_t f) const {
    const Form& form = forms_[size_t(f)];
    switch (form.kind) {
      case Form::external: return 0;
      case Form::slice:
      case Form::reshape: return memory_stage(form.sources[0]);
      case Form::concat: {
        int32_t stage = 0;  // read_in_place: its own stage, which is its parts' last
        for (int32_t part : form.sources) stage = std::max(stage, memory_stage(part));
        return stage;
      }
      default: return form.stage;
    }
  }

  // Rows [row, row + rows) of form f as memory segments.
  void segments(int32_t f, int32_t row, int32_t rows, std::vector<Program::Segment>& out) {
    const Form& form = forms_[size_t(f)];
    if (form.kind == Form::slice) return segments(form.sources[0], form.begin + row, rows, out);
    if (form.kind == Form::reshape) {
      // Rows of every column of a vector seen as a matrix, or of a contiguous matrix seen as a vector.
      const Form& source = forms_[size_t(form.sources[0])];
      std::vector<Program::Segment> whole;
      segments(form.sources[0], 0, source.rows, whole);
      if (whole.size() != 1 || (source.cols > 1 && whole[0].operand.stride != source.rows))
        throw Unsupported{"a reshape of a value that is not one value in memory"};
      Program::Operand operand = whole[0].operand;
      operand.stride = column_stride(form);
      out.push_back({operand, whole[0].row + row, rows});
      return;
    }
    if (form.kind == Form::concat && !read_in_place(f)) {
      int32_t at = 0;
      for (int32_t part : form.sources) {
        const int32_t part_rows = forms_[size_t(part)].rows;
        const int32_t from = std::max(row, at), to = std::min(row + rows, at + part_rows);
        if (from < to) segments(part, from - at, to - from, out);
        at += part_rows;
      }
      return;
    }
    out.push_back({form.memory, row, rows});
  }

  int32_t add(Program::Stage& stage, const Program::Instruction& in) {
    stage.body.push_back(in);
    return int32_t(stage.body.size() - 1);
  }
  // A computing instruction (b: -1 for a unary op).
  int32_t compute(Program::Stage& stage, jit::KernelOp op, int32_t a, int32_t b = -1, float constant = 0) {
    Program::Instruction in;
    in.op = op;
    in.a = a;
    in.b = b;
    in.constant = constant;
    return add(stage, in);
  }

  // A load of rows [row, row + rows_) of memory operand `operand` into program stage p (once per
  // stage).
  int32_t load(int32_t p, Program::Operand operand, int32_t row) {
    if (row % rows_ != 0) throw Unsupported{"a block read at a row off the block boundaries"};
    const auto key = std::make_tuple(operand.slot, operand.shared, operand.stride, row);
    auto [it, added] = loads_[size_t(p)].try_emplace(key, -1);
    if (added) {
      Program::Instruction in;
      in.kind = Program::Instruction::load;
      in.operand = operand;
      in.block = row / rows_;
      it->second = add(out_.program.stages[size_t(p)], in);
    }
    return it->second;
  }

  // The program stage that computes form f: its level's column stage, or its block stage of its columns.
  static std::pair<int32_t, int32_t> stage_key(const Form& f) { return {f.stage, f.kind == Form::column ? 0 : f.cols}; }
  int32_t stage_index(const Form& f) const { return stage_of_.at(stage_key(f)); }

  // Block g of form f as a value of program stage p (whose level is at least f's): f's own value
  // where p computes it, else a load (a value of other columns is always of an earlier level).
  int32_t block(int32_t f, int32_t g, int32_t p) {
    Form& form = forms_[size_t(f)];
    const int32_t s = level_[size_t(p)];
    if (form.kind != Form::external && form.kind != Form::column && form.stage == s &&
        form.cols != out_.program.stages[size_t(p)].columns)
      throw InternalError("lower_cell: a value of " + std::to_string(form.cols) + " columns read in a stage of its level of other columns");
    switch (form.kind) {
      case Form::external: return load(p, form.memory, g * rows_);
      case Form::reshape: {
        std::vector<Program::Segment> rows;
        segments(f, g * rows_, rows_, rows);
        return load(p, rows[0].operand, rows[0].row);
      }
      case Form::slice:
        // Blocks of a slice are blocks of its source only where it starts on a block boundary.
        if (form.begin % rows_ != 0)
          throw Unsupported{"a slice from row " + std::to_string(form.begin) + " read in blocks of " + std::to_string(rows_) + " rows"};
        return block(form.sources[0], form.begin / rows_ + g, p);
      case Form::concat: {
        if (form.stage != s && read_in_place(f)) return load(p, form.memory, g * rows_);
        for (int32_t part : form.sources) {
          const int32_t blocks = forms_[size_t(part)].rows / rows_;
          if (g < blocks) return block(part, g, p);
          g -= blocks;
        }
        throw InternalError("lower_cell: a concat block out of range");
      }
      case Form::contraction:
        if (form.stage != s) return load(p, form.memory, g * rows_);
        if (form.accumulators[size_t(g)] < 0) {
          Program::Instruction in;
          in.kind = Program::Instruction::accumulator;
          in.contraction = form.contraction_index;
          in.block = g;
          form.accumulators[size_t(g)] = add(out_.program.stages[size_t(p)], in);
        }
        return form.accumulators[size_t(g)];
      case Form::elementwise:
        if (form.stage != s) return load(p, form.memory, g * rows_);
        return form.values[size_t(g)];
      case Form::column: return load(p, form.memory, g * rows_);
    }
    throw InternalError("lower_cell: a form of no kind");
  }

  void emit(uint32_t o) {
    Form& form = forms_[o];
    const ir::Node& n = body_node(o);
    if (form.stage == 0) return;
    const int32_t s = stage_index(form);  // a program stage, not a level, from here on
    Program::Stage& stage = out_.program.stages[size_t(s)];
    const int32_t blocks = (form.rows + rows_ - 1) / rows_;  // a padded product's last block is partly past its rows
    if (form.kind == Form::column) {
      emit_column_step(o, stage);
      return;
    }
    if (form.kind == Form::contraction && form.matrix >= 0) {
      Program::Contraction c;
      c.blocks = blocks;
      c.has_matrix = true;
      c.transposed = n.op == ir::Op::matmul_tn;
      std::vector<Program::Segment> matrix;
      const Form& m = forms_[size_t(form.matrix)];
      segments(form.matrix, 0, m.rows, matrix);
      if (matrix.size() != 1) throw Unsupported{std::string(ir::op_name(n.op)) + " whose matrix is not one value in memory"};
      c.matrix = matrix[0];
      c.leading = m.cols > 1 ? c.matrix.operand.stride : m.rows;
      c.matrix.operand.stride = 0;  // the same W for every column of the product
      const int32_t x = form.sources[0];
      segments(x, 0, forms_[size_t(x)].rows, c.x);
      if (n.op == ir::Op::matmul_nt) {
        // Column j of Y X^T (Y R x K, X C x K) is Y times row j of X: K elements, C floats apart.
        const Form& xf = forms_[size_t(x)];
        if (c.x.size() != 1 || (xf.cols > 1 && c.x[0].operand.stride != xf.rows))
          throw Unsupported{"matmul_nt whose x is not one value in memory"};
        c.x[0].operand.stride = 1;
        c.x[0].rows = xf.cols;
        c.x_step = xf.cols > 1 ? xf.rows : 1;
      }
      if (c.transposed && c.x.size() != 1) throw Unsupported{"matmul_tn of a per-call matrix whose x is not one value in memory"};
      form.contraction_index = int32_t(stage.contractions.size());
      stage.contractions.push_back(std::move(c));
      form.accumulators.assign(size_t(blocks), -1);
    } else if (form.kind == Form::contraction) {
      Program::Contraction c;
      c.blocks = blocks;
      CellLowering::Weight weight;
      weight.blocks = blocks;
      weight.transposed = n.op == ir::Op::matmul_tn;
      weight.rows = form.rows;
      const auto args = graph_.args(n);
      const size_t products = n.op == ir::Op::affine ? 1 : 0;
      size_t term = 0;
      for (size_t slot = products; slot + 1 < args.size(); slot += 2, ++term) {
        weight.pieces.push_back({o, int32_t(slot)});
        const int32_t x = form.sources[term];
        segments(x, 0, forms_[size_t(x)].rows, c.x);
      }
      if (form.bias >= 0) {
        std::vector<Program::Segment> bias;
        segments(form.bias, 0, form.rows, bias);
        if (bias.size() != 1) throw Unsupported{"a bias that is not one value in memory"};
        c.has_bias = true;
        c.bias = bias[0];
      }
      c.weight = int32_t(out_.weights.size());
      out_.weights.push_back(std::move(weight));
      form.contraction_index = int32_t(stage.contractions.size());
      stage.contractions.push_back(std::move(c));
      form.accumulators.assign(size_t(blocks), -1);
    } else if (form.kind == Form::elementwise) {
      jit::KernelOp op = jit::KernelOp::add;
      jit::kernel_op_for(n.op, op);
      for (int32_t g = 0; g < blocks; ++g) {
        int32_t value = block(form.sources[0], g, s);
        if (jit::is_activation_gradient(n.op)) {
          value = jit::activation_gradient(n.op, value, block(form.sources[1], g, s),
                                           [&](jit::KernelOp k, int32_t a, int32_t b, float constant) {
                                             return compute(stage, k, a, jit::kernel_op_arity(k) == 2 ? b : -1, constant);
                                           });
        } else if (n.op == ir::Op::sum) {
          for (size_t i = 1; i < form.sources.size(); ++i)
            value = compute(stage, jit::KernelOp::add, value, block(form.sources[i], g, s));
          // A sum of one value is that value, kept as its own.
          if (form.sources.size() == 1) value = compute(stage, jit::KernelOp::add_const, value);
        } else {
          const int32_t b = jit::kernel_op_arity(op) == 2 ? block(form.sources[1], g, s) : -1;
          value = compute(stage, op, value, b, jit::kernel_op_has_constant(op) ? n.attrs.constant : 0.0f);
        }
        form.values.push_back(value);
      }
    }
    // What is read after the kernel (the call's outputs, the backward pass's operands) or by a
    // later stage is written to its arena place, unless it is a view of another value.
    if (is_view(o)) return;
    if (!needed_[o]) return;
    form.memory = {int32_t(out_.call_slots.size()), false, column_stride(form)};
    out_.call_slots.push_back({o, -1, block_aligned(form.rows) ? 0 : int64_t(blocks) * rows_});
    for (int32_t g = 0; g < blocks; ++g) stage.stores.push_back({block(int32_t(o), g, s), form.memory, g});
  }

  // Body node o's column step: its arguments where they lie (one value in memory each), its
  // output into a call slot of its own, always stored (later stages read it from there).
  void emit_column_step(uint32_t o, Program::Stage& stage) {
    Form& form = forms_[o];
    const ir::Node& n = body_node(o);
    Program::ColumnStep step;
    auto whole = [&](int32_t f) {
      const Form& source = forms_[size_t(f)];
      std::vector<Program::Segment> pieces;
      segments(f, 0, source.rows, pieces);
      if (pieces.size() != 1 || (source.cols > 1 && pieces[0].operand.stride < source.rows))
        throw Unsupported{std::string(ir::op_name(n.op)) + " of a value that is not one value in memory"};
      return pieces[0];
    };
    if (is_scalar_step(n)) {
      // One float of each operand; a sum is a chain of adds into the output's own float.
      form.memory = {int32_t(out_.call_slots.size()), false, 0};
      out_.call_slots.push_back({o, -1, rows_ > 1 ? rows_ : 0});
      step.kind = Program::ColumnStep::scalar;
      step.out = form.memory;
      std::vector<Program::Segment> operands;
      for (int32_t f : form.sources) operands.push_back(whole(f));
      if (n.op == ir::Op::sum) {
        step.op = operands.size() == 1 ? jit::KernelOp::add_const : jit::KernelOp::add;
        step.x = operands[0];
        if (operands.size() > 1) step.y = operands[1];
        stage.steps.push_back(step);
        for (size_t i = 2; i < operands.size(); ++i) {
          step.x = {form.memory, 0, 1};
          step.y = operands[i];
          stage.steps.push_back(step);
        }
        return;
      }
      jit::kernel_op_for(n.op, step.op);
      if (jit::kernel_op_has_constant(step.op)) step.constant = n.attrs.constant;
      step.x = operands[0];
      if (jit::kernel_op_arity(step.op) == 2) step.y = operands[1];
      stage.steps.push_back(step);
      return;
    }
    if (column_step_for(n.op, step.kind)) {
      step.x = whole(form.sources[0]);
      step.cols = forms_[size_t(form.sources[0])].cols;
      if (jit::column_step_has_y(step)) step.y = whole(form.sources[1]);
    } else {
      // A product to 1x1 (classify_per_call_product): W's K values (a 1 x K row lies as K
      // consecutive floats) dotted with x's.
      step.kind = Program::ColumnStep::dot;
      const Form& w = forms_[size_t(form.sources[0])];
      step.x = whole(form.sources[0]);
      if (w.cols > 1) {
        if (step.x.operand.stride != 1) throw Unsupported{std::string(ir::op_name(n.op)) + " of a row that is not one value in memory"};
        step.x.operand.stride = 0;
        step.x.rows = w.cols;
      }
      step.y = whole(form.sources[1]);
      if (step.x.rows != step.y.rows) throw InternalError("lower_cell: a dot step of " + std::to_string(step.x.rows) + " and " + std::to_string(step.y.rows) + " rows");
    }
    // Whole blocks of the frame, so that what follows starts on a block (a backward body reads
    // the forward frame's values in blocks): a 1x1 output takes a block.
    const int64_t floats = int64_t(form.rows) * form.cols;
    form.memory = {int32_t(out_.call_slots.size()), false, column_stride(form)};
    out_.call_slots.push_back({o, -1, floats % rows_ ? (floats / rows_ + 1) * rows_ : 0});
    step.out = {form.memory.slot, false, 0};
    stage.steps.push_back(step);
  }

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

}  // namespace

namespace {

// Lays out `cell` (its copy of the body already made) for the jit: the program of its body and
// a frame of what the program stores; false, with the reason in cell.why_not, when the body does
// not lower or an output is not a value of its own (a view or a concat of others).
bool lower_into(CallCell& cell, std::span<const ir::NodeId> to, std::span<const int64_t> argument_of,
                std::span<const uint32_t> output_offsets, bool for_backward) {
  const ir::Graph& copy = cell.body;
  const uint32_t count = uint32_t(copy.size() - cell.first);
  // Every slice of a column is a view: the frame keeps no copy of rows it can read in place.
  memplan::Plan plan;
  plan.offset.assign(copy.size(), -1);
  plan.view.assign(copy.size(), 0);
  for (ir::NodeId id = cell.first; id < copy.size(); ++id)
    plan.view[id] = copy.node(id).op == ir::Op::slice && copy.node(id).shape.cols == 1;
  try {
    cell.lowering = Lowerer(copy, plan, cell.first, count, cell.name, output_offsets, for_backward).lower();
  } catch (const Unsupported& unsupported) {
    cell.why_not = unsupported.why;
    return false;
  }
  // Each call slot: an argument of the call, a constant of the body, or a place in the frame.
  std::vector<int64_t> frame_of(count, -1);
  int64_t frame = 0;
  for (const CellLowering::Reference& ref : cell.lowering.call_slots) {
    CallCell::Slot slot;
    if (ref.argument < 0) {
      slot.kind = CallCell::Slot::frame;
      slot.at = frame;
      frame_of[ref.offset] = slot.at;
      frame += ref.padded_floats ? ref.padded_floats : copy.node(cell.first + ref.offset).shape.size();
    } else {
      const ir::NodeId arg = copy.args(cell.first + ref.offset)[size_t(ref.argument)];
      // Leaves come first in the copy, in the body's order.
      ir::NodeId original = 0;
      while (to[original] != arg) ++original;
      if (argument_of[original] >= 0) {
        slot.kind = CallCell::Slot::argument;
        slot.at = argument_of[original];
      } else {
        slot.kind = CallCell::Slot::fixed;
        slot.constant = copy.leaf_data(arg);
      }
    }
    cell.slots.push_back(slot);
  }
  // A view lies in its source's place (the program stores the source when the view is read).
  for (uint32_t o = 0; o < count; ++o) {
    const ir::Node& n = copy.node(cell.first + o);
    if (!plan.view[cell.first + o] || frame_of[o] >= 0) continue;
    const ir::NodeId source = copy.args(n)[0];
    if (source >= cell.first && frame_of[source - cell.first] >= 0) frame_of[o] = frame_of[source - cell.first] + n.attrs.begin;
  }
  for (uint32_t o : output_offsets)
    if (o != UINT32_MAX && frame_of[o] < 0) {
      cell.why_not = "output %" + std::to_string(o) + " is not a value of its own (a view or a concat of others)";
      cell.slots.clear();
      return false;
    }
  for (const CellLowering::Reference& ref : cell.lowering.shared_slots)
    cell.shared.push_back(copy.leaf_data(copy.args(cell.first + ref.offset)[size_t(ref.argument)]));
  cell.frame_at = std::move(frame_of);
  cell.frame_floats = frame;
  return true;
}

}  // namespace

namespace {

// The frame of a cell that runs by expansion (runtime/call_expansion.h), laid out as the
// expansion's plan lays out one call (memplan::plan_batch_order): the body's batches in order,
// each one block of its members' values, but for a batch of views (slices of a column, reshapes,
// of values the frame holds), which takes no room and lies inside its sources. Every value is
// kept, so a batch of n calls runs in place: the expansion's plan for n calls is the batch's
// frames, block j holding each call's rows of it (ir::CellBody::frame_blocks).
void lay_out_by_batch(CallCell& cell, std::span<const uint32_t> output_offsets) {
  const ir::Graph& body = cell.body;
  cell.frame_at.assign(size_t(body.size() - cell.first), -1);
  // A backward body's rows of its forward frame: a slice of argument 0, or a reshape of one; read
  // in place by the expansion, unless the body returns one. Per body node: its first row, or -1.
  std::vector<int64_t> frame_read(size_t(body.size() - cell.first), -1);
  if (cell.is_backward && !cell.placeholders.empty())
    for (uint32_t o = 0; o < frame_read.size(); ++o) {
      const ir::Node& n = body.node(cell.first + o);
      if (n.op != ir::Op::slice && n.op != ir::Op::reshape) continue;
      if (std::find(output_offsets.begin(), output_offsets.end(), o) != output_offsets.end()) continue;
      const ir::NodeId source = body.args(n)[0];
      if (n.op == ir::Op::slice && source == cell.placeholders[0]) frame_read[o] = n.attrs.begin;
      else if (n.op == ir::Op::reshape && source >= cell.first && frame_read[source - cell.first] >= 0 &&
               body.node(source).op == ir::Op::slice)
        frame_read[o] = frame_read[source - cell.first];
      if (frame_read[o] >= 0) cell.frame_reads.push_back({o, frame_read[o]});
    }
  cell.frame_blocks = {0};
  int64_t end = 0;
  auto viewed = [&](uint32_t o) {  // memplan's rule for a view, on the expansion's graph
    const ir::Node& n = body.node(cell.first + o);
    const ir::NodeId source = body.args(n)[0];
    return memplan::viewable(n) && source >= cell.first && cell.frame_at[source - cell.first] >= 0;
  };
  for (const std::vector<uint32_t>& batch : cell.body_batches) {
    bool stored = false;  // a member takes room
    for (uint32_t o : batch) stored |= frame_read[o] < 0;
    if (!stored) continue;
    if (std::all_of(batch.begin(), batch.end(), [&](uint32_t o) { return frame_read[o] >= 0 || viewed(o); })) {
      for (uint32_t o : batch) {
        if (frame_read[o] >= 0) continue;
        const ir::Node& n = body.node(cell.first + o);
        cell.frame_at[o] = cell.frame_at[body.args(n)[0] - cell.first] + memplan::view_offset(n);
      }
      continue;
    }
    for (uint32_t o : batch) {
      if (frame_read[o] >= 0) continue;
      cell.frame_at[o] = end;
      end += body.node(cell.first + o).shape.size();
    }
    cell.frame_blocks.push_back(end);
  }
  cell.frame_floats = end;
}

}  // namespace

std::unique_ptr<CallCell> make_call_cell(const ir::Graph& body, std::span<const ir::TypeId> types,
                                         std::span<const ir::NodeId> placeholders, std::span<const ir::NodeId> outputs,
                                         const scheduler::Schedule& batches, const std::string& name, bool lower,
                                         bool for_backward, const CallCell* forward,
                                         std::span<const uint8_t> read_in_place) {
  auto cell = std::make_unique<CallCell>();
  cell->in_place.assign(read_in_place.begin(), read_in_place.end());
  cell->name = name;
  cell->is_backward = forward != nullptr;
  lower = lower && (!forward || forward->lowered);
  // The body as a call's copy lies in a trace: its leaves, then its operations contiguously.
  std::vector<ir::NodeId> to(body.size(), ir::kNoNode);
  std::vector<int64_t> argument_of(body.size(), -1);
  for (size_t i = 0; i < placeholders.size(); ++i) argument_of[placeholders[i]] = int64_t(i);
  ir::Graph& copy = cell->body;
  for (const ir::ParameterInfo& info : body.parameters()) copy.add_parameter(info);
  for (int leaves = 1; leaves >= 0; --leaves) {
    if (!leaves) cell->first = ir::NodeId(copy.size());
    for (ir::NodeId id = 0; id < body.size(); ++id) {
      const ir::Node& n = body.node(id);
      if (ir::has_flag(n.op, ir::kLeaf) != (leaves == 1)) continue;
      std::vector<ir::NodeId> args;
      for (ir::NodeId arg : body.args(n)) args.push_back(to[arg]);
      ir::Attributes attrs = n.attrs;
      if (n.op == ir::Op::input)
        attrs.index = copy.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
      to[id] = copy.add(n.op, args, n.shape, attrs);
    }
  }
  cell->types.assign(copy.size(), ir::kNoType);
  for (ir::NodeId id = 0; id < body.size(); ++id) cell->types[to[id]] = types[id];
  for (ir::NodeId p : placeholders) cell->placeholders.push_back(to[p]);
  for (size_t b = 0; b < batches.batch_count(); ++b)
    cell->body_batches.emplace_back(batches.batch(b).begin(), batches.batch(b).end());
  const uint32_t count = uint32_t(copy.size() - cell->first);
  std::vector<uint32_t> output_offsets;  // UINT32_MAX: a leaf
  for (ir::NodeId o : outputs) {
    cell->outputs.push_back(to[o]);
    output_offsets.push_back(to[o] < cell->first ? UINT32_MAX : to[o] - cell->first);
  }
  cell->lowered = lower && count > 0 && lower_into(*cell, to, argument_of, output_offsets, for_backward);
  if (!lower) cell->why_not = "not lowered (every value is kept)";
  if (!cell->lowered) lay_out_by_batch(*cell, output_offsets);
  // A view per output in the frame that the trace does not read in place, shared by outputs alike.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const uint32_t o = output_offsets[k];
    cell->output_offsets.push_back(o == UINT32_MAX ? -1 : cell->frame_at[o]);
    const bool viewed = o != UINT32_MAX && !cell->read_in_place(k);
    uint32_t alike = 0;
    while (alike < k && !(output_offsets[alike] != UINT32_MAX && !cell->read_in_place(alike) &&
                          cell->output_offsets[alike] == cell->output_offsets[k] &&
                          body.node(outputs[alike]).shape == body.node(outputs[k]).shape))
      ++alike;
    cell->first_alike.push_back(viewed ? alike : uint32_t(k));
    if (viewed && alike == k) cell->output_views += body.node(outputs[k]).shape.cols == 1 ? 1 : 2;
  }
  for (ir::NodeId p : placeholders) cell->arguments.push_back(body.node(p).shape);
  for (ir::NodeId id = cell->first; id < copy.size(); ++id) cell->flops += ir::node_flops(copy, id);
  cell->operations = count;
  return cell;
}

}  // namespace edb::runtime
