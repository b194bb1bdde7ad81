// Random cell programs as text and smaller: to_cpp prints a program as C++ against the public API,
// shrink_candidates lists its one-step-smaller variants. Generating and recording them is
// random_cells.cpp's job; deciding which variant still fails is the fuzzer's.
#include <algorithm>
#include <cstdio>

#include "tests/support/random_cells.h"

namespace edb::testing {

namespace {

// A float as a C++ literal: 2.0f, -0.25f, 1e-05f.
std::string float_literal(float x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", double(x));
  std::string s = text;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

// The C++ of op `op` on operands named by `a`.
std::string cpp_of(const CellOp& op, const std::vector<std::string>& a) {
  const std::string constant = float_literal(op.constant);
  auto list = [&] {
    std::string s;
    for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + a[i];
    return s;
  };
  switch (op.kind) {
    case CellOp::matmul: return "matmul(" + a[0] + ", " + a[1] + ")";
    case CellOp::affine: return "affine({" + list() + "})";
    case CellOp::add: return a[0] + " + " + a[1];
    case CellOp::sub: return a[0] + " - " + a[1];
    case CellOp::cmult: return "cmult(" + a[0] + ", " + a[1] + ")";
    case CellOp::max: return "max(" + a[0] + ", " + a[1] + ")";
    case CellOp::div: return "div(" + a[0] + ", cmult(" + a[1] + ", " + a[1] + ") + 1.0f)";
    case CellOp::scale: return a[0] + " * " + constant;
    case CellOp::add_const: return a[0] + " + " + constant;
    case CellOp::tanh: return "tanh(" + a[0] + ")";
    case CellOp::sigmoid: return "sigmoid(" + a[0] + ")";
    case CellOp::relu: return "relu(" + a[0] + ")";
    case CellOp::exp_tanh: return "exp(tanh(" + a[0] + "))";
    case CellOp::sqrt_square: return "sqrt(cmult(" + a[0] + ", " + a[0] + ") + 0.5f)";
    case CellOp::abs: return "abs(" + a[0] + ")";
    case CellOp::square: return "square(" + a[0] + ")";
    case CellOp::cube_tanh: return "cube(tanh(" + a[0] + "))";
    case CellOp::softsign: return "softsign(" + a[0] + ")";
    case CellOp::silu: return "silu(" + a[0] + ")";
    case CellOp::elu: return "elu(" + a[0] + ", " + constant + ")";
    case CellOp::selu: return "selu(" + a[0] + ")";
    case CellOp::log_sigmoid: return "log_sigmoid(" + a[0] + ")";
    case CellOp::erf: return "erf(" + a[0] + ")";
    case CellOp::sin_tanh: return "sin(tanh(" + a[0] + ") * 4.0f)";
    case CellOp::cos_tanh: return "cos(tanh(" + a[0] + ") * 4.0f)";
    case CellOp::sinh_tanh: return "sinh(tanh(" + a[0] + "))";
    case CellOp::cosh_tanh: return "cosh(tanh(" + a[0] + "))";
    case CellOp::tan_tanh: return "tan(tanh(" + a[0] + "))";
    case CellOp::asinh: return "asinh(" + a[0] + ")";
    case CellOp::acosh_square: return "acosh(square(" + a[0] + ") + 1.5f)";
    case CellOp::atanh_tanh: return "atanh(tanh(" + a[0] + ") * 0.5f)";
    case CellOp::asin_tanh: return "asin(tanh(" + a[0] + ") * 0.9f)";
    case CellOp::acos_tanh: return "acos(tanh(" + a[0] + ") * 0.9f)";
    case CellOp::atan: return "atan(" + a[0] + ")";
    case CellOp::pow: return "pow(sigmoid(" + a[0] + ") + 0.5f, tanh(" + a[1] + ") * 2.0f)";
    case CellOp::constant_minus: return constant + " - " + a[0];
    case CellOp::minus_constant: return a[0] + " - " + constant;
    case CellOp::negate: return "-" + a[0];
    case CellOp::divide_by_constant: return a[0] + " / " + constant;
    case CellOp::constant_times: return constant + " * " + a[0];
    case CellOp::constant_plus: return constant + " + " + a[0];
    case CellOp::slice: return "slice(" + a[0] + ", " + std::to_string(op.begin) + ", " + std::to_string(op.end) + ")";
    case CellOp::concat: return "concat({" + list() + "})";
    case CellOp::sum: return "sum({" + list() + "})";
    case CellOp::softmax: return "softmax(" + a[0] + ")";
    case CellOp::sum_elements: return "sum_elements(" + a[0] + ")";
    case CellOp::logsumexp: return "logsumexp({" + a[0] + ", " + a[1] + "})";
    case CellOp::average: return "average({" + a[0] + ", " + a[1] + "})";
    case CellOp::scale_gradient: return "scale_gradient(" + a[0] + ", " + constant + ")";
    case CellOp::broadcast_scalar: {
      const std::string scalar = "sum_elements(tanh(" + a[1] + "))";
      if (op.begin == 0) return a[0] + " + " + scalar;
      if (op.begin == 1) return scalar + " - " + a[0];
      if (op.begin == 2) return "cmult(" + scalar + ", " + a[0] + ")";
      return "div(" + a[0] + ", square(" + scalar + ") + 1.0f)";
    }
    case CellOp::pairwise_rank_loss: return "pairwise_rank_loss(" + a[0] + ", " + a[1] + ")";
    case CellOp::dot_product: return "dot_product(" + a[0] + ", " + a[1] + ")";
    case CellOp::squared_distance: return "squared_distance(" + a[0] + ", " + a[1] + ")";
    case CellOp::l1_distance: return "l1_distance(" + a[0] + ", " + a[1] + ")";
    case CellOp::huber_distance: return "huber_distance(" + a[0] + ", " + a[1] + ")";
    case CellOp::squared_norm: return "squared_norm(" + a[0] + ")";
    case CellOp::sum_dim_rows: return "sum_dim(" + a[0] + ", 0)";
    case CellOp::mean_dim_rows: return "mean_dim(" + a[0] + ", 0)";
    case CellOp::logsumexp_dim_rows: return "logsumexp_dim(" + a[0] + ", 0)";
    case CellOp::hinge: return "hinge(" + a[0] + ", 0)";
    case CellOp::binary_log_loss: return "binary_log_loss(sigmoid(" + a[0] + "), sigmoid(" + a[1] + "))";
    case CellOp::poisson_loss: return "poisson_loss(sum_elements(tanh(" + a[0] + ")), 2)";
    case CellOp::pick: return "pick(" + a[0] + ", 0)";
    case CellOp::pick_neg_log_softmax: return "pick_neg_log_softmax(" + a[0] + ", " + a[0] + ".rows() - 1)";
    case CellOp::transpose: return "transpose(" + a[0] + ")";
    case CellOp::select_rows_ends: return "select_rows(" + a[0] + ", {" + a[0] + ".rows() - 1, 0})";
    case CellOp::std_dim_plus: return "std_dim(" + a[0] + " + " + a[1] + ", 0)";
    case CellOp::l2_norm_plus: return "l2_norm(" + a[0] + " + " + a[1] + ")";
    case CellOp::layer_norm_plus: return "layer_norm(" + a[0] + " + " + a[1] + ", " + a[2] + ", " + a[3] + ")";
    case CellOp::weight_norm_plus: return "weight_norm(" + a[0] + " + " + a[1] + ", sum_elements(" + a[2] + "))";
    case CellOp::argmax_times:
      return "cmult(argmax(" + a[1] + (op.constant != 0 ? ", ArgmaxGradient::straight_through" : "") + "), " + a[0] + ")";
    case CellOp::kmax_rows:
      return "transpose(kmax_pooling(transpose(" + a[0] + " + " + a[1] + " * 4.0f), " + std::to_string(op.begin) + "))";
    case CellOp::conv1d_narrow_rows: return "transpose(conv1d_narrow(transpose(" + a[0] + "), transpose(" + a[1] + ")))";
    case CellOp::conv1d_wide_rows: return "transpose(conv1d_wide(transpose(" + a[0] + "), transpose(" + a[1] + ")))";
    case CellOp::maxpool_rows:
      return "transpose(maxpool1d(transpose(" + a[0] + "), " + std::to_string(op.begin) + ", " + std::to_string(op.end) + "))";
    default: break;
  }
  return "?";
}

// Drops program leaves (inputs, parameters, lookups) and ops nothing reads any more, when they
// are not compared anyway (leaves) — ops stay: they are compared.
void drop_unread_leaves(CellProgramSpec& spec) {
  std::vector<int> readers(spec.values.size(), 0);
  for (const CellOp& v : spec.values)
    if (!v.removed)
      for (int a : v.args) ++readers[size_t(a)];
  for (size_t i = 0; i < spec.values.size(); ++i) {
    CellOp& v = spec.values[i];
    if (!v.removed && readers[i] == 0 && !is_computed(v.kind) && v.kind != CellOp::call) v.removed = true;
  }
}

// Replaces value i by a constant input of its shape (its readers see a leaf instead).
void make_input(CellOp& v) {
  v.kind = CellOp::input;
  v.args.clear();
}

// Whether each cell is called, and each parameter and table read, by what is left of the program.
struct Used {
  std::vector<bool> cells, parameters, tables;
  explicit Used(const CellProgramSpec& spec)
      : cells(spec.cells.size(), false), parameters(spec.parameters.size(), false), tables(spec.table_dims.size(), false) {
    for (const CellOp& v : spec.values)
      if (!v.removed && v.kind == CellOp::call) cells[size_t(v.index)] = true;
      else if (!v.removed && v.kind == CellOp::param) parameters[size_t(v.index)] = true;
      else if (!v.removed && v.kind == CellOp::lookup) tables[size_t(v.index)] = true;
    for (size_t c = 0; c < spec.cells.size(); ++c)
      if (cells[c])
        for (const CellOp& op : spec.cells[c].body)
          if (!op.removed && op.kind == CellOp::param) parameters[size_t(op.index)] = true;
  }
};

// How many ops (and, for a body, outputs) read each value.
std::vector<int> readers_of(const std::vector<CellOp>& list, const std::vector<int>& outputs = {}) {
  std::vector<int> readers(list.size(), 0);
  for (const CellOp& op : list)
    if (!op.removed)
      for (int a : op.args) ++readers[size_t(a)];
  for (int o : outputs) ++readers[size_t(o)];
  return readers;
}

// The model: every parameter and table in the order the spec adds them (their initial values
// follow the order), those nothing reads as comments.
std::string cpp_of_model(const CellProgramSpec& spec, const Used& used) {
  std::string s = "// random cell program, seed " + std::to_string(spec.seed) + "\nModel model(\"random_cells\", " +
                  std::to_string(spec.seed + 1) + ");  // parameters added in this order\n";
  for (size_t i = 0; i < spec.parameters.size(); ++i)
    s += std::string(used.parameters[i] ? "" : "// unused: ") + "Parameter " + parameter_name(spec, int(i)) +
         " = model.add_parameter(\"" + parameter_name(spec, int(i)) + "\", " + std::to_string(spec.parameters[i].rows) +
         ", " + std::to_string(spec.parameters[i].cols) + ");\n";
  for (size_t i = 0; i < spec.table_dims.size(); ++i)
    s += std::string(used.tables[i] ? "" : "// unused: ") + "LookupTable E" + std::to_string(spec.table_dims[i]) +
         " = model.add_lookup(\"E" + std::to_string(spec.table_dims[i]) + "\", " + std::to_string(CellProgramSpec::kEntries) +
         ", " + std::to_string(spec.table_dims[i]) + ");\n";
  return s;
}

std::string cpp_of_cell(const CellProgramSpec& spec, size_t c) {
  const CellSpec& cell = spec.cells[c];
  std::string s = "Cell cell" + std::to_string(c) + "(\"cell" + std::to_string(c) + "\", {";
  for (size_t i = 0; i < cell.inputs.size(); ++i)
    s += (i ? ", {" : "{") + std::to_string(cell.inputs[i].first) + ", " + std::to_string(cell.inputs[i].second) + "}";
  s += "}, [&](Trace& t, std::span<const Expr> in) {\n";
  std::vector<std::string> names(cell.body.size());
  const std::vector<int> readers = readers_of(cell.body, cell.outputs);
  for (size_t i = 0; i < cell.body.size(); ++i) {
    const CellOp& op = cell.body[i];
    if (op.removed) continue;
    if (op.kind == CellOp::argument) names[i] = "in[" + std::to_string(op.index) + "]";
    else if (op.kind == CellOp::param) names[i] = "t.param(" + parameter_name(spec, op.index) + ")";
    else if (op.kind == CellOp::input) names[i] = "t.input(...)";
    else {
      std::vector<std::string> a;
      for (int x : op.args) a.push_back(names[size_t(x)]);
      names[i] = "h" + std::to_string(i);
      s += "  const Expr " + names[i] + " = " + cpp_of(op, a) + ";" + (readers[i] ? "" : "  // not returned") + "\n";
    }
  }
  s += "  return std::vector<Expr>{";
  for (size_t k = 0; k < cell.outputs.size(); ++k) s += (k ? ", " : "") + names[size_t(cell.outputs[k])];
  return s + "};\n});\n";
}

// The program's values in recording order; leaves read once are written in place.
std::string cpp_of_values(const CellProgramSpec& spec) {
  std::string s;
  std::vector<std::string> names(spec.values.size());
  for (size_t i = 0; i < spec.values.size(); ++i) {
    const CellOp& v = spec.values[i];
    if (v.removed) continue;
    std::vector<std::string> a;
    for (int x : v.args) a.push_back(names[size_t(x)]);
    const std::string name = "v" + std::to_string(i);
    switch (v.kind) {
      case CellOp::input: {
        names[i] = name;
        const std::vector<float> data = input_values(spec.seed, i, v.rows, v.cols);
        s += "const Expr " + name + " = t.input(" + std::to_string(v.rows) + ", " + std::to_string(v.cols) + ", {";
        for (size_t k = 0; k < data.size(); ++k) s += (k ? ", " : "") + float_literal(data[k]);
        s += "});\n";
        break;
      }
      case CellOp::param: names[i] = "t.param(" + parameter_name(spec, v.index) + ")"; break;
      case CellOp::lookup:
        names[i] = "t.lookup(E" + std::to_string(spec.table_dims[size_t(v.index)]) + ", " + std::to_string(v.entry) + ")";
        break;
      case CellOp::call: {
        names[i] = name;
        s += "const std::vector<Expr> " + name + " = cell" + std::to_string(v.index) + "(t, {";
        for (size_t k = 0; k < a.size(); ++k) s += (k ? ", " : "") + a[k];
        s += "});\n";
        break;
      }
      case CellOp::call_output: names[i] = a[0] + "[" + std::to_string(v.index) + "]"; break;
      default:
        names[i] = name;
        s += "const Expr " + name + " = " + cpp_of(v, a) + ";\n";
        break;
    }
    if (int(i) == spec.run_after) s += "t.run();\n";
  }
  return s;
}

// ---- shrinking steps: each appends the variants one step smaller ----

// A call fewer (latest first): its outputs become inputs for whatever read them. One call stays.
void fewer_calls(const CellProgramSpec& spec, std::vector<CellProgramSpec>& out) {
  int calls = 0;
  for (const CellOp& v : spec.values) calls += !v.removed && v.kind == CellOp::call;
  for (size_t i = spec.values.size(); calls > 1 && i-- > 0;) {
    if (spec.values[i].removed || spec.values[i].kind != CellOp::call) continue;
    CellProgramSpec s = spec;
    s.values[i].removed = true;
    for (CellOp& v : s.values)
      if (!v.removed && v.kind == CellOp::call_output && v.args[0] == int(i)) make_input(v);
    drop_unread_leaves(s);
    out.push_back(std::move(s));
  }
}

// A program op fewer when nothing reads it.
void fewer_program_ops(const CellProgramSpec& spec, std::vector<CellProgramSpec>& out) {
  const std::vector<int> readers = readers_of(spec.values);
  for (size_t i = spec.values.size(); i-- > 0;) {
    const CellOp& v = spec.values[i];
    if (v.removed || readers[i] || !is_computed(v.kind) || v.kind == CellOp::call_output) continue;
    CellProgramSpec s = spec;
    s.values[i].removed = true;
    drop_unread_leaves(s);
    out.push_back(std::move(s));
  }
}

// An output fewer: what read it reads an input instead.
void fewer_outputs(const CellProgramSpec& spec, std::vector<CellProgramSpec>& out) {
  for (size_t c = 0; c < spec.cells.size(); ++c)
    for (size_t k = 0; spec.cells[c].outputs.size() > 1 && k < spec.cells[c].outputs.size(); ++k) {
      CellProgramSpec s = spec;
      s.cells[c].outputs.erase(s.cells[c].outputs.begin() + ptrdiff_t(k));
      for (CellOp& v : s.values) {
        if (v.removed || v.kind != CellOp::call_output || s.values[size_t(v.args[0])].index != int(c)) continue;
        if (v.index == int(k)) make_input(v);
        else if (v.index > int(k)) --v.index;
      }
      drop_unread_leaves(s);
      out.push_back(std::move(s));
    }
}

// A body op fewer when the body neither reads nor returns it; an argument fewer when unread (every
// call of the cell passes one argument fewer).
void fewer_body_values(const CellProgramSpec& spec, size_t c, std::vector<CellProgramSpec>& out) {
  const CellSpec& cell = spec.cells[c];
  const std::vector<int> readers = readers_of(cell.body, cell.outputs);
  for (size_t i = cell.body.size(); i-- > 0;) {
    const CellOp& op = cell.body[i];
    if (op.removed || readers[i]) continue;
    CellProgramSpec s = spec;
    CellSpec& changed = s.cells[c];
    changed.body[i].removed = true;
    if (op.kind == CellOp::argument) {
      const int slot = op.index;
      changed.inputs.erase(changed.inputs.begin() + slot);
      for (CellOp& other : changed.body)
        if (!other.removed && other.kind == CellOp::argument && other.index > slot) --other.index;
      for (CellOp& v : s.values)
        if (!v.removed && v.kind == CellOp::call && v.index == int(c)) v.args.erase(v.args.begin() + slot);
      drop_unread_leaves(s);
    }
    out.push_back(std::move(s));
  }
}

// A body op replaced by one of its operands of the same shape (a shorter chain).
void shorter_chains(const CellProgramSpec& spec, size_t c, std::vector<CellProgramSpec>& out) {
  const CellSpec& cell = spec.cells[c];
  for (size_t i = 0; i < cell.body.size(); ++i) {
    const CellOp& op = cell.body[i];
    if (op.removed || !is_computed(op.kind)) continue;
    for (int a : op.args) {
      const CellOp& arg = cell.body[size_t(a)];
      if (arg.rows != op.rows || arg.cols != op.cols || !is_computed(arg.kind)) continue;
      CellProgramSpec s = spec;
      CellSpec& changed = s.cells[c];
      for (CellOp& other : changed.body)
        if (!other.removed)
          for (int& x : other.args)
            if (x == int(i)) x = a;
      for (int& o : changed.outputs)
        if (o == int(i)) o = a;
      // Outputs must stay distinct values for the calls' outputs to keep their meaning.
      std::vector<int> sorted = changed.outputs;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) continue;
      changed.body[i].removed = true;
      out.push_back(std::move(s));
      break;
    }
  }
}

// A program value that is not a call's output replaced by an input of its shape.
void inputs_for_values(const CellProgramSpec& spec, std::vector<CellProgramSpec>& out) {
  for (size_t i = 0; i < spec.values.size(); ++i) {
    const CellOp& v = spec.values[i];
    if (v.removed || v.kind == CellOp::input || v.kind == CellOp::call || v.kind == CellOp::call_output) continue;
    CellProgramSpec s = spec;
    make_input(s.values[i]);
    drop_unread_leaves(s);
    out.push_back(std::move(s));
  }
}

}  // namespace

std::string to_cpp(const CellProgramSpec& spec) {
  const Used used(spec);
  std::string s = cpp_of_model(spec, used);
  for (size_t c = 0; c < spec.cells.size(); ++c)
    if (used.cells[c]) s += cpp_of_cell(spec, c);
  s += "// in a trace t:\n" + cpp_of_values(spec);
  return s + "// compared: every call output and op above; the loss weighs each of them (differential_cells_test.cpp)\n";
}

// Bigger steps first: whole calls, then program ops and outputs, then each body's values.
std::vector<CellProgramSpec> shrink_candidates(const CellProgramSpec& spec) {
  std::vector<CellProgramSpec> out;
  if (spec.run_after >= 0) {  // no evaluation in the middle
    out.push_back(spec);
    out.back().run_after = -1;
  }
  fewer_calls(spec, out);
  fewer_program_ops(spec, out);
  fewer_outputs(spec, out);
  for (size_t c = 0; c < spec.cells.size(); ++c) {
    fewer_body_values(spec, c, out);
    shorter_chains(spec, c, out);
  }
  inputs_for_values(spec, out);
  return out;
}

}  // namespace edb::testing
