// The kernel IR: one fused elementwise batch kernel, backend-neutral and free of LLVM types, with
// its canonical text (the kernel cache's description) and a scalar interpreter (the test oracle).
// Choosing what to fuse and filling KernelArgs from a batch are the executor's job, not this file's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"

namespace edb::jit {

// Every kernel instruction once: name, number of value operands, whether it carries a constant.
// Names follow ir/ops.def where the op exists there (cmult, scale, add_const); `load` reads input
// operand `input` at the current element. Appending an op changes no existing kernel's text (ops
// print by name), so cached kernels stay valid.
#define EDB_KERNEL_OPS(X) \
  X(load, 0, false)       \
  X(add, 2, false)        \
  X(sub, 2, false)        \
  X(cmult, 2, false)      \
  X(scale, 1, true)       \
  X(add_const, 1, true)   \
  X(tanh, 1, false)       \
  X(sigmoid, 1, false)    \
  X(relu, 1, false)       \
  X(exp, 1, false)        \
  X(log, 1, false)        \
  X(div, 2, false)        \
  X(max, 2, false)        \
  X(min, 2, false)        \
  X(sqrt, 1, false)       \
  X(abs, 1, false)        \
  X(square, 1, false)     \
  X(cube, 1, false)       \
  X(softsign, 1, false)   \
  X(silu, 1, false)       \
  X(elu, 1, true)         \
  X(selu, 1, false)       \
  X(log_sigmoid, 1, false) \
  X(erf, 1, false)        \
  X(sin, 1, false)        \
  X(cos, 1, false)        \
  X(sinh, 1, false)       \
  X(cosh, 1, false)       \
  X(round, 1, false)      \
  X(ceil, 1, false)       \
  X(floor, 1, false)      \
  X(tan, 1, false)        \
  X(asinh, 1, false)      \
  X(acosh, 1, false)      \
  X(atanh, 1, false)      \
  X(asin, 1, false)       \
  X(acos, 1, false)       \
  X(atan, 1, false)       \
  X(pow, 2, false)        \
  X(relu_grad, 2, false)

enum class KernelOp : uint8_t {
#define EDB_KERNEL_OP_ENUM(name, arity, has_constant) name,
  EDB_KERNEL_OPS(EDB_KERNEL_OP_ENUM)
#undef EDB_KERNEL_OP_ENUM
};

std::string_view kernel_op_name(KernelOp op);
bool kernel_op_from_name(std::string_view name, KernelOp& out);  // false for an unknown name
// The kernel op an elementwise graph op runs as (sum as a chain of adds); false for other ops.
// Executors that render batches into kernels (the jit's, the GPU's) share this mapping.
bool kernel_op_for(ir::Op op, KernelOp& out);
int kernel_op_arity(KernelOp op);           // value operands: 0, 1 or 2
bool kernel_op_has_constant(KernelOp op);   // scale, add_const

// The backward pass's tanh_grad and sigmoid_grad (y, dy) have no kernel op: whatever renders a
// graph into kernel instructions (the jit's batches, the cell programs) builds them from kernel ops
// with activation_gradient.
bool is_activation_gradient(ir::Op op);
// tanh_grad: dy (1 - y y); sigmoid_grad: dy (y (1 - y)), each instruction appended by
// emit(op, a, b, constant) (b unused by unary ops, constant by the others), which returns its value.
template <typename Value, typename Emit>
Value activation_gradient(ir::Op op, Value y, Value dy, Emit&& emit) {
  auto one_minus = [&](Value v) {
    return emit(KernelOp::add_const, emit(KernelOp::scale, v, v, -1.0f), v, 1.0f);
  };
  const Value local = op == ir::Op::tanh_grad ? one_minus(emit(KernelOp::cmult, y, y, 0.0f))
                                              : emit(KernelOp::cmult, y, one_minus(y), 0.0f);
  return emit(KernelOp::cmult, dy, local, 0.0f);
}

// How one input operand's member k is found; elements of one member are always contiguous.
enum class OperandAccess : uint8_t {
  shared,    // one pointer for every member (a weight, a bias)
  strided,   // member k at base + k * stride
  gathered,  // member k at pointers[k]: the gather is fused into the load
};
std::string_view operand_access_name(OperandAccess access);

using ValueId = int32_t;  // index of the instruction that defines the value

struct Instruction {
  KernelOp op = KernelOp::load;
  ValueId a = -1, b = -1;  // value operands (defined earlier); unused ones are -1
  int32_t input = -1;      // load: the input operand read
  float constant = 0;      // scale, add_const
};

// One fused elementwise kernel: for each member k < members, for each element e < elements, run
// `body` as straight-line code and store output j's value at outputs[j] + k * elements + e.
struct Kernel {
  std::string name;                    // the batch signature it came from; first line of the text
  std::vector<OperandAccess> inputs;   // access mode per input operand
  std::vector<Instruction> body;       // in definition order
  std::vector<ValueId> outputs;        // the value stored to each output

  // Builders: append an instruction and return its value.
  ValueId load(int32_t input);
  ValueId unary(KernelOp op, ValueId a);
  ValueId binary(KernelOp op, ValueId a, ValueId b);
  ValueId with_constant(KernelOp op, ValueId a, float constant);
  void store(ValueId value) { outputs.push_back(value); }
};

// Throws InternalError unless every instruction has the arity of its op, reads only earlier
// values and existing inputs, and there is at least one output of a defined value.
void verify(const Kernel& kernel);

// Canonical text, stable across runs and builds: the name line, then one line per input,
// instruction and output. Constants print by their exact bits (with a readable decimal beside).
// Two kernels have the same text exactly when they compute the same thing the same way.
std::string describe(const Kernel& kernel);

// The kernel whose canonical text is `text` (describe's inverse: describe(parse_kernel(t)) == t
// for every t describe produced). Throws UsageError naming the line and what is wrong with it,
// or what verify found when the lines parse but the kernel is inconsistent.
Kernel parse_kernel(std::string_view text);

// Runtime arguments of a kernel; this layout is also what compiled kernels read (C ABI).
struct KernelInput {
  const float* base = nullptr;              // shared, strided
  int64_t stride = 0;                       // strided: floats from member k to member k + 1
  const float* const* pointers = nullptr;   // gathered: one per member
};

// Outputs must not overlap each other or any input; inputs may overlap freely.
struct KernelArgs {
  int64_t members = 0;
  int64_t elements = 0;                 // floats per member of every operand and output
  const KernelInput* inputs = nullptr;  // one per kernel input
  float* const* outputs = nullptr;      // one per kernel output, members contiguous
};

// The reference semantics, one element at a time in float, with libm's tanh, exp and log and
// sigmoid(x) = 1 / (1 + exp(-x)); relu(x) = x < 0 ? 0 : x (NaN stays NaN); max and min as
// ir::max_of and ir::min_of (a NaN in either gives NaN); sqrt and abs from libm, square x x,
// cube x x x, softsign x / (1 + |x|), silu x / (1 + exp(-x)); elu, selu and log_sigmoid as the
// reference executor writes them (expm1, log1p), erf, sin, cos, sinh, cosh, round (half away from
// zero), ceil and floor, tan, asinh, acosh, atanh and pow (powf) from libm. Verifies the kernel first.
void interpret(const Kernel& kernel, const KernelArgs& args);

}  // namespace edb::jit
