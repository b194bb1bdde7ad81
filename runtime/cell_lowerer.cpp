// A cell body lowered into a cell program's stages (runtime/cell_lowerer.h): the forms of its nodes,
// the stages they run in, the block stages' loads, contractions, elementwise values and stores.
// Column steps are runtime/cell_lowerer_columns.cpp's.
#include "runtime/cell_lowerer.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::runtime::lowering {

bool lowers_elementwise(ir::Op op) {
  jit::KernelOp kernel_op;
  return jit::kernel_op_for(op, kernel_op) || jit::is_activation_gradient(op);
}

bool is_product(ir::Op op) {
  return op == ir::Op::affine || op == ir::Op::matmul || op == ir::Op::matvec || op == ir::Op::matmul_tn ||
         op == ir::Op::matmul_nt;
}

CellLowering Lowerer::lower() {
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

void Lowerer::choose_rows() {
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

int32_t Lowerer::argument_form(uint32_t o, int32_t argument) {
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

void Lowerer::classify(uint32_t o) {
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
  if (is_column_step(n)) {
    classify_column_step(o);
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

bool Lowerer::read_in_place(int32_t f) const {
  const Form& form = forms_[size_t(f)];
  if (form.kind != Form::concat || f >= int32_t(count_) || !needed_[size_t(f)]) return false;
  for (int32_t part : form.sources) {
    const Form::Kind kind = forms_[size_t(part)].kind;
    if (kind != Form::elementwise && kind != Form::contraction) return false;
  }
  return true;
}

void Lowerer::need_in_memory(int32_t f) {
  const Form& form = forms_[size_t(f)];
  if (form.kind == Form::external || read_in_place(f)) return;
  if (form.kind == Form::slice || form.kind == Form::concat || form.kind == Form::reshape) {
    for (int32_t source : form.sources) need_in_memory(source);
    return;
  }
  needed_[size_t(f)] = true;
}

void Lowerer::need_earlier_stages(const std::vector<int32_t>& operands, int32_t stage) {
  for (int32_t f : operands)
    if (forms_[size_t(f)].stage < stage) need_in_memory(f);
}

void Lowerer::need_for_backward(uint32_t o) {
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
    case ir::Op::atanh:
    case ir::Op::asin:
    case ir::Op::acos:
    case ir::Op::atan: need(args[0]); break;
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
    case ir::Op::pick_neg_log_softmax:
    case ir::Op::kmax_pooling: need(args[0]); break;
    default: break;
  }
}

int32_t Lowerer::memory_stage(int32_t f) const {
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

void Lowerer::segments(int32_t f, int32_t row, int32_t rows, std::vector<Program::Segment>& out) {
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

int32_t Lowerer::add(Program::Stage& stage, const Program::Instruction& in) {
  stage.body.push_back(in);
  return int32_t(stage.body.size() - 1);
}

int32_t Lowerer::compute(Program::Stage& stage, jit::KernelOp op, int32_t a, int32_t b, float constant) {
  Program::Instruction in;
  in.op = op;
  in.a = a;
  in.b = b;
  in.constant = constant;
  return add(stage, in);
}

int32_t Lowerer::load(int32_t p, Program::Operand operand, int32_t row) {
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

int32_t Lowerer::block(int32_t f, int32_t g, int32_t p) {
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

void Lowerer::emit(uint32_t o) {
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

}  // namespace edb::runtime::lowering
