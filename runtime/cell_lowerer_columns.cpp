// The column steps of a cell program (runtime/cell_lowerer.h): ops over whole columns (softmax,
// log_softmax, their gradients, sums and means of elements, pick_neg_log_softmax, argmax,
// kmax_pooling, transpose and their gradients), products to 1x1 (dot steps) and elementwise ops on
// 1x1 values (scalar steps), each read from memory and stored whole.
#include "runtime/cell_lowerer.h"

#include <algorithm>

#include "edbatch/errors.h"

namespace edb::runtime::lowering {

bool is_scalar_step(const ir::Node& n) {
  jit::KernelOp op;
  return n.shape.size() == 1 && (n.op == ir::Op::sum || jit::kernel_op_for(n.op, op));
}

bool column_step_for(ir::Op op, Program::ColumnStep::Kind& kind) {
  switch (op) {
    case ir::Op::softmax: kind = Program::ColumnStep::softmax; return true;
    case ir::Op::log_softmax: kind = Program::ColumnStep::log_softmax; return true;
    case ir::Op::softmax_grad: kind = Program::ColumnStep::softmax_grad; return true;
    case ir::Op::log_softmax_grad: kind = Program::ColumnStep::log_softmax_grad; return true;
    case ir::Op::sum_elements: kind = Program::ColumnStep::sum; return true;
    case ir::Op::mean_elements: kind = Program::ColumnStep::mean; return true;
    case ir::Op::pick_neg_log_softmax: kind = Program::ColumnStep::pick_neg_log_softmax; return true;
    case ir::Op::pick_neg_log_softmax_grad: kind = Program::ColumnStep::pick_neg_log_softmax_grad; return true;
    case ir::Op::argmax: kind = Program::ColumnStep::argmax; return true;
    case ir::Op::kmax_pooling: kind = Program::ColumnStep::kmax_pooling; return true;
    case ir::Op::kmax_pooling_grad: kind = Program::ColumnStep::kmax_pooling_grad; return true;
    case ir::Op::transpose: kind = Program::ColumnStep::transpose; return true;
    default: return false;
  }
}

bool is_column_step(const ir::Node& n) {
  Program::ColumnStep::Kind kind;
  return column_step_for(n.op, kind) || is_scalar_step(n);
}

void Lowerer::classify_per_call_product(uint32_t o) {
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

void Lowerer::classify_column_step(uint32_t o) {
  const auto args = graph_.args(body_node(o));
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
}

void Lowerer::emit_column_step(uint32_t o, Program::Stage& stage) {
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
    // The label; kmax_pooling's k, its output's columns (its gradient's: dy's).
    if (n.op == ir::Op::pick_neg_log_softmax || n.op == ir::Op::pick_neg_log_softmax_grad) step.index = n.attrs.index;
    if (n.op == ir::Op::kmax_pooling) step.index = form.cols;
    if (n.op == ir::Op::kmax_pooling_grad) step.index = forms_[size_t(form.sources[1])].cols;
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

}  // namespace edb::runtime::lowering
