// The kernel IR's op table, builders, checks, canonical text and scalar interpreter.
#include "jit/kernel_ir.h"

#include <bit>
#include <cmath>
#include <cstdio>

#include "edbatch/errors.h"

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

// "0x3f000000 (0.5)": the bits decide, the decimal is for people.
std::string constant_text(float value) {
  char text[64];
  std::snprintf(text, sizeof text, "0x%08x (%.9g)", std::bit_cast<uint32_t>(value), double(value));
  return text;
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
    case KernelOp::relu: return a > 0 ? a : 0.0f;
    case KernelOp::exp: return std::exp(a);
  }
  throw InternalError("interpret: no scalar rule for kernel op " + std::string(kernel_op_name(in.op)));
}

}  // namespace

std::string_view kernel_op_name(KernelOp op) { return info(op).name; }
int kernel_op_arity(KernelOp op) { return info(op).arity; }
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
