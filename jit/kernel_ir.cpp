// The kernel IR's op table, builders, checks, canonical text and scalar interpreter.
#include "jit/kernel_ir.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

#include "edbatch/errors.h"
#include "jit/text_reader.h"

namespace edb::jit {

namespace {

struct KernelOpInfo {
  std::string_view name;
  int arity;
  bool has_constant;
};

constexpr KernelOpInfo kKernelOpInfo[] = {
#define EDB_KERNEL_OP_INFO(name, arity, has_constant) {#name, arity, has_constant},
    EDB_KERNEL_OPS(EDB_KERNEL_OP_INFO)
#undef EDB_KERNEL_OP_INFO
};

const KernelOpInfo& info(KernelOp op) {
  const size_t index = static_cast<size_t>(op);
  if (index >= std::size(kKernelOpInfo)) throw InternalError("kernel op " + std::to_string(index) + " out of range");
  return kKernelOpInfo[index];
}


float apply(const Instruction& in, float a, float b) {
  switch (in.op) {
    case KernelOp::load: break;
    case KernelOp::add: return a + b;
    case KernelOp::sub: return a - b;
    case KernelOp::cmult: return a * b;
    case KernelOp::scale: return a * in.constant;
    case KernelOp::add_const: return a + in.constant;
    case KernelOp::tanh: return std::tanh(a);
    case KernelOp::sigmoid: return 1.0f / (1.0f + std::exp(-a));
    case KernelOp::relu: return a < 0 ? 0.0f : a;  // NaN stays NaN
    case KernelOp::exp: return std::exp(a);
    case KernelOp::log: return std::log(a);
    case KernelOp::div: return a / b;
    case KernelOp::max: return ir::max_of(a, b);
    case KernelOp::min: return ir::min_of(a, b);
    case KernelOp::sqrt: return std::sqrt(a);
    case KernelOp::abs: return std::fabs(a);
    case KernelOp::square: return a * a;
    case KernelOp::cube: return a * a * a;
    case KernelOp::softsign: return a / (1.0f + std::fabs(a));
    case KernelOp::silu: return a / (1.0f + std::exp(-a));
    case KernelOp::elu: return a > 0 ? a : in.constant * std::expm1(a);
    case KernelOp::selu: return ir::kSeluLambda * (a > 0 ? a : ir::kSeluAlpha * std::expm1(a));
    case KernelOp::log_sigmoid: return std::min(a, 0.0f) - std::log1p(std::exp(-std::fabs(a)));
    case KernelOp::erf: return std::erf(a);
    case KernelOp::sin: return std::sin(a);
    case KernelOp::cos: return std::cos(a);
    case KernelOp::sinh: return std::sinh(a);
    case KernelOp::cosh: return std::cosh(a);
    case KernelOp::round: return std::round(a);
    case KernelOp::ceil: return std::ceil(a);
    case KernelOp::floor: return std::floor(a);
    case KernelOp::tan: return std::tan(a);
    case KernelOp::asinh: return std::asinh(a);
    case KernelOp::acosh: return std::acosh(a);
    case KernelOp::atanh: return std::atanh(a);
    case KernelOp::asin: return std::asin(a);
    case KernelOp::acos: return std::acos(a);
    case KernelOp::atan: return std::atan(a);
    case KernelOp::pow: return std::pow(a, b);
    case KernelOp::relu_grad: return a > 0 ? b : 0.0f;  // (y, dy): a NaN y gives 0, as the executors' select
  }
  throw InternalError("interpret: no scalar rule for kernel op " + std::string(kernel_op_name(in.op)));
}

}  // namespace

std::string_view kernel_op_name(KernelOp op) { return info(op).name; }

bool kernel_op_for(ir::Op op, KernelOp& out) {
  switch (op) {
    case ir::Op::add: case ir::Op::sum: out = KernelOp::add; return true;
    case ir::Op::sub: out = KernelOp::sub; return true;
    case ir::Op::cmult: out = KernelOp::cmult; return true;
    case ir::Op::scale: out = KernelOp::scale; return true;
    case ir::Op::add_const: out = KernelOp::add_const; return true;
    case ir::Op::tanh: out = KernelOp::tanh; return true;
    case ir::Op::sigmoid: out = KernelOp::sigmoid; return true;
    case ir::Op::relu: out = KernelOp::relu; return true;
    case ir::Op::exp: out = KernelOp::exp; return true;
    case ir::Op::log: out = KernelOp::log; return true;
    case ir::Op::div: out = KernelOp::div; return true;
    case ir::Op::max: out = KernelOp::max; return true;
    case ir::Op::min: out = KernelOp::min; return true;
    case ir::Op::sqrt: out = KernelOp::sqrt; return true;
    case ir::Op::abs: out = KernelOp::abs; return true;
    case ir::Op::square: out = KernelOp::square; return true;
    case ir::Op::cube: out = KernelOp::cube; return true;
    case ir::Op::softsign: out = KernelOp::softsign; return true;
    case ir::Op::silu: out = KernelOp::silu; return true;
    case ir::Op::elu: out = KernelOp::elu; return true;
    case ir::Op::selu: out = KernelOp::selu; return true;
    case ir::Op::log_sigmoid: out = KernelOp::log_sigmoid; return true;
    case ir::Op::erf: out = KernelOp::erf; return true;
    case ir::Op::sin: out = KernelOp::sin; return true;
    case ir::Op::cos: out = KernelOp::cos; return true;
    case ir::Op::sinh: out = KernelOp::sinh; return true;
    case ir::Op::cosh: out = KernelOp::cosh; return true;
    case ir::Op::round: out = KernelOp::round; return true;
    case ir::Op::ceil: out = KernelOp::ceil; return true;
    case ir::Op::floor: out = KernelOp::floor; return true;
    case ir::Op::tan: out = KernelOp::tan; return true;
    case ir::Op::asinh: out = KernelOp::asinh; return true;
    case ir::Op::acosh: out = KernelOp::acosh; return true;
    case ir::Op::atanh: out = KernelOp::atanh; return true;
    case ir::Op::asin: out = KernelOp::asin; return true;
    case ir::Op::acos: out = KernelOp::acos; return true;
    case ir::Op::atan: out = KernelOp::atan; return true;
    case ir::Op::pow: out = KernelOp::pow; return true;
    case ir::Op::relu_grad: out = KernelOp::relu_grad; return true;
    default: return false;
  }
}
int kernel_op_arity(KernelOp op) { return info(op).arity; }
bool is_activation_gradient(ir::Op op) { return op == ir::Op::tanh_grad || op == ir::Op::sigmoid_grad; }
bool kernel_op_has_constant(KernelOp op) { return info(op).has_constant; }

std::string_view operand_access_name(OperandAccess access) {
  switch (access) {
    case OperandAccess::shared: return "shared";
    case OperandAccess::strided: return "strided";
    case OperandAccess::gathered: return "gathered";
  }
  throw InternalError("operand access " + std::to_string(int(access)) + " out of range");
}

ValueId Kernel::load(int32_t input) {
  body.push_back({.op = KernelOp::load, .input = input});
  return ValueId(body.size() - 1);
}

ValueId Kernel::unary(KernelOp op, ValueId a) {
  body.push_back({.op = op, .a = a});
  return ValueId(body.size() - 1);
}

ValueId Kernel::binary(KernelOp op, ValueId a, ValueId b) {
  body.push_back({.op = op, .a = a, .b = b});
  return ValueId(body.size() - 1);
}

ValueId Kernel::with_constant(KernelOp op, ValueId a, float constant) {
  body.push_back({.op = op, .a = a, .constant = constant});
  return ValueId(body.size() - 1);
}

void verify(const Kernel& kernel) {
  auto fail = [&](size_t at, const std::string& what) {
    throw InternalError("kernel '" + kernel.name + "' instruction %" + std::to_string(at) + ": " + what);
  };
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instruction& in = kernel.body[i];
    const int arity = kernel_op_arity(in.op);
    auto defined = [&](ValueId v) { return v >= 0 && size_t(v) < i; };
    if (arity >= 1 && !defined(in.a)) fail(i, "first operand %" + std::to_string(in.a) + " is not defined before");
    if (arity >= 2 && !defined(in.b)) fail(i, "second operand %" + std::to_string(in.b) + " is not defined before");
    if (arity < 2 && in.b != -1) fail(i, "unexpected second operand");
    if (arity < 1 && in.a != -1) fail(i, "unexpected first operand");
    if (in.op == KernelOp::load) {
      if (in.input < 0 || size_t(in.input) >= kernel.inputs.size())
        fail(i, "load of input " + std::to_string(in.input) + " of " + std::to_string(kernel.inputs.size()));
    } else if (in.input != -1) {
      fail(i, "input index on a non-load");
    }
    if (!kernel_op_has_constant(in.op) && std::bit_cast<uint32_t>(in.constant) != 0)
      fail(i, "constant on an op without one");
  }
  if (kernel.outputs.empty()) throw InternalError("kernel '" + kernel.name + "' has no outputs");
  for (size_t j = 0; j < kernel.outputs.size(); ++j)
    if (kernel.outputs[j] < 0 || size_t(kernel.outputs[j]) >= kernel.body.size())
      throw InternalError("kernel '" + kernel.name + "' output " + std::to_string(j) + " stores undefined %" +
                          std::to_string(kernel.outputs[j]));
}

std::string describe(const Kernel& kernel) {
  verify(kernel);
  std::string text = "kernel f32 elementwise " + kernel.name + "\n";
  for (size_t i = 0; i < kernel.inputs.size(); ++i)
    text += "in x" + std::to_string(i) + " " + std::string(operand_access_name(kernel.inputs[i])) + "\n";
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instruction& in = kernel.body[i];
    text += "%" + std::to_string(i) + " = " + std::string(kernel_op_name(in.op));
    if (in.op == KernelOp::load) text += " x" + std::to_string(in.input);
    if (kernel_op_arity(in.op) >= 1) text += " %" + std::to_string(in.a);
    if (kernel_op_arity(in.op) >= 2) text += " %" + std::to_string(in.b);
    if (kernel_op_has_constant(in.op)) text += " " + constant_text(in.constant);
    text += "\n";
  }
  for (size_t j = 0; j < kernel.outputs.size(); ++j)
    text += "out y" + std::to_string(j) + " = %" + std::to_string(kernel.outputs[j]) + "\n";
  return text;
}


bool kernel_op_from_name(std::string_view name, KernelOp& out) {
  const auto found = std::find_if(std::begin(kKernelOpInfo), std::end(kKernelOpInfo),
                                  [&](const KernelOpInfo& op) { return op.name == name; });
  if (found == std::end(kKernelOpInfo)) return false;
  out = KernelOp(found - std::begin(kKernelOpInfo));
  return true;
}

Kernel parse_kernel(std::string_view text) {
  Kernel kernel;
  size_t number = 0;  // of the current line, from 1
  constexpr std::string_view kHeader = "kernel f32 elementwise ";
  bool header = false;
  while (!text.empty()) {
    const std::string_view line = take_line(text);
    LineReader in(line, ++number);
    if (!header) {
      if (!line.starts_with(kHeader) || line.size() == kHeader.size())
        in.fail("expected 'kernel f32 elementwise NAME'");
      kernel.name = std::string(line.substr(kHeader.size()));
      header = true;
      continue;
    }
    const std::string_view first = in.word();
    if (first == "in") {
      if (in.number('x') != int32_t(kernel.inputs.size())) in.fail("inputs must be numbered x0, x1, ... in order");
      const std::string_view access = in.word();
      if (access == "shared") kernel.inputs.push_back(OperandAccess::shared);
      else if (access == "strided") kernel.inputs.push_back(OperandAccess::strided);
      else if (access == "gathered") kernel.inputs.push_back(OperandAccess::gathered);
      else in.fail("unknown access '" + std::string(access) + "' (shared, strided or gathered)");
    } else if (first == "out") {
      if (in.number('y') != int32_t(kernel.outputs.size())) in.fail("outputs must be numbered y0, y1, ... in order");
      in.expect("=");
      kernel.outputs.push_back(in.number('%'));
    } else if (first.starts_with("%")) {
      if (in.number(first, '%') != int32_t(kernel.body.size())) in.fail("values must be numbered %0, %1, ... in order");
      in.expect("=");
      const std::string_view name = in.word();
      Instruction instruction;
      if (!kernel_op_from_name(name, instruction.op)) in.fail("unknown kernel op '" + std::string(name) + "'");
      const KernelOpInfo* found = &kKernelOpInfo[size_t(instruction.op)];
      if (instruction.op == KernelOp::load) instruction.input = in.number('x');
      if (found->arity >= 1) instruction.a = in.number('%');
      if (found->arity >= 2) instruction.b = in.number('%');
      if (found->has_constant) instruction.constant = in.constant();
      kernel.body.push_back(instruction);
    } else {
      in.fail("expected 'in', 'out' or '%N = ...'");
    }
    in.end();
  }
  if (!header) throw UsageError("kernel text is empty");
  try {
    verify(kernel);
  } catch (const InternalError& e) {
    throw UsageError(std::string("kernel text: ") + e.what());
  }
  return kernel;
}

void interpret(const Kernel& kernel, const KernelArgs& args) {
  verify(kernel);
  std::vector<float> values(kernel.body.size());
  for (int64_t k = 0; k < args.members; ++k) {
    std::vector<const float*> member_inputs(kernel.inputs.size());
    for (size_t i = 0; i < kernel.inputs.size(); ++i) {
      const KernelInput& input = args.inputs[i];
      switch (kernel.inputs[i]) {
        case OperandAccess::shared: member_inputs[i] = input.base; break;
        case OperandAccess::strided: member_inputs[i] = input.base + k * input.stride; break;
        case OperandAccess::gathered: member_inputs[i] = input.pointers[k]; break;
      }
    }
    for (int64_t e = 0; e < args.elements; ++e) {
      for (size_t i = 0; i < kernel.body.size(); ++i) {
        const Instruction& in = kernel.body[i];
        values[i] = in.op == KernelOp::load ? member_inputs[size_t(in.input)][e]
                                            : apply(in, in.a >= 0 ? values[size_t(in.a)] : 0.0f,
                                                    in.b >= 0 ? values[size_t(in.b)] : 0.0f);
      }
      for (size_t j = 0; j < kernel.outputs.size(); ++j)
        args.outputs[j][k * args.elements + e] = values[size_t(kernel.outputs[j])];
    }
  }
}

}  // namespace edb::jit
