// Branch-free exp, tanh and sigmoid as LLVM IR over float scalars or float vectors (no libm calls,
// so loops vectorise), and the other kernel ops. Shared by the LLVM renderers of jit/; only jit/
// includes it.
#pragma once

#include <initializer_list>
#include <string>

#include <llvm/IR/IRBuilder.h>

#include "edbatch/errors.h"
#include "jit/kernel_ir.h"

namespace edb::jit {

class MathEmitter {
 public:
  // `type` is float or a vector of floats; constants are splats of its shape.
  MathEmitter(llvm::IRBuilder<>& b, llvm::Type* type)
      : b_(b), type_(type), int_type_(type->isVectorTy()
                                          ? static_cast<llvm::Type*>(llvm::VectorType::get(
                                                b.getInt32Ty(), llvm::cast<llvm::VectorType>(type)->getElementCount()))
                                          : b.getInt32Ty()) {}

  llvm::Value* f(float value) { return llvm::ConstantFP::get(type_, value); }
  llvm::Value* fma(llvm::Value* a, llvm::Value* x, llvm::Value* c) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {type_}, {a, x, c});
  }
  // Horner: c[0] * x^(n-1) + ... + c[n-1].
  llvm::Value* polynomial(llvm::Value* x, std::initializer_list<float> c) {
    llvm::Value* p = f(*c.begin());
    for (auto it = c.begin() + 1; it != c.end(); ++it) p = fma(p, x, f(*it));
    return p;
  }
  // x clamped to [low, high]; a NaN stays NaN.
  llvm::Value* clamp(llvm::Value* x, float low, float high) {
    x = b_.CreateSelect(b_.CreateFCmpOLT(x, f(low)), f(low), x);
    return b_.CreateSelect(b_.CreateFCmpOGT(x, f(high)), f(high), x);
  }
  // 2^n for n in [-126, 127], built from the exponent bits.
  llvm::Value* power_of_two(llvm::Value* n) {
    llvm::Value* bias = llvm::ConstantInt::get(int_type_, 127);
    llvm::Value* shift = llvm::ConstantInt::get(int_type_, 23);
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(n, bias), shift), type_);
  }

  // Cephes expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact), a
  // degree-7 polynomial for e^r, then 2^n applied as 2^(n/2) 2^(n - n/2), so results from
  // gradual underflow (x ~ -104) to overflow (x > 88.72) come out right with one rounding.
  llvm::Value* exp(llvm::Value* x) {
    llvm::Value* clamped = clamp(x, -104.0f, 88.8f);
    llvm::Value* n = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, fma(clamped, f(1.44269504088896341f), f(0.5f)));
    llvm::Value* r = fma(n, f(-0.693359375f), clamped);
    r = fma(n, f(2.12194440e-4f), r);
    llvm::Value* p = polynomial(r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                                    1.6666665459e-1f, 5.0000001201e-1f});
    llvm::Value* e = b_.CreateFAdd(fma(p, b_.CreateFMul(r, r), r), f(1.0f));
    llvm::Value* whole = b_.CreateFPToSI(n, int_type_);  // poison for NaN: that lane is replaced below
    llvm::Value* half = b_.CreateAShr(whole, llvm::ConstantInt::get(int_type_, 1));
    llvm::Value* scaled = b_.CreateFMul(b_.CreateFMul(e, power_of_two(half)), power_of_two(b_.CreateSub(whole, half)));
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, scaled);
  }

  // Cephes tanhf: an odd polynomial below |x| = 0.625 (relative accuracy near 0), above it
  // 1 - 2 / (e^2|x| + 1) with the sign of x (saturates to exactly 1 from |x| ~ 9 on).
  llvm::Value* tanh(llvm::Value* x) {
    llvm::Value* z = b_.CreateFMul(x, x);
    llvm::Value* p = polynomial(z, {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f,
                                    -3.33332819422e-1f});
    llvm::Value* small = fma(b_.CreateFMul(p, z), x, x);
    llvm::Value* magnitude = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
    llvm::Value* e = exp(b_.CreateFMul(clamp(magnitude, 0.0f, 10.0f), f(2.0f)));
    llvm::Value* large = b_.CreateFSub(f(1.0f), divide(f(2.0f), b_.CreateFAdd(e, f(1.0f))));
    large = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, large, x);
    return b_.CreateSelect(b_.CreateFCmpOLT(magnitude, f(0.625f)), small, large);
  }

  llvm::Value* sigmoid(llvm::Value* x) { return divide(f(1.0f), b_.CreateFAdd(f(1.0f), exp(b_.CreateFNeg(x)))); }

  // a / b allowed to go through a reciprocal estimate refined by Newton steps (see
  // allow_reciprocal_estimates): a full-precision division is the costliest step of sigmoid and tanh.
  llvm::Value* divide(llvm::Value* a, llvm::Value* b) {
    llvm::Value* quotient = b_.CreateFDiv(a, b);
    if (auto* instruction = llvm::dyn_cast<llvm::Instruction>(quotient)) {
      llvm::FastMathFlags flags;
      flags.setAllowReciprocal();
      instruction->setFastMathFlags(flags);
    }
    return quotient;
  }
  // Lets the code generator replace divisions marked by divide() with the target's reciprocal
  // estimate and one Newton step (about 1 ulp).
  static void allow_reciprocal_estimates(llvm::Function& function) {
    function.addFnAttr("reciprocal-estimates", "divf:1,vec-divf:1");
  }

  // A computing kernel op (not load) on its operands (c unused by unary ops).
  llvm::Value* op(KernelOp op, llvm::Value* a, llvm::Value* c, float constant) {
    switch (op) {
      case KernelOp::load: break;
      case KernelOp::add: return b_.CreateFAdd(a, c);
      case KernelOp::sub: return b_.CreateFSub(a, c);
      case KernelOp::cmult: return b_.CreateFMul(a, c);
      case KernelOp::scale: return b_.CreateFMul(a, f(constant));
      case KernelOp::add_const: return b_.CreateFAdd(a, f(constant));
      case KernelOp::tanh: return tanh(a);
      case KernelOp::sigmoid: return sigmoid(a);
      // a < 0 ? 0 : a, so NaN stays NaN (as Eigen's max in the other executors)
      case KernelOp::relu: return b_.CreateSelect(b_.CreateFCmpOLT(a, f(0.0f)), f(0.0f), a);
      case KernelOp::exp: return exp(a);
    }
    throw InternalError("LlvmBackend::compile: no rule for kernel op " + std::string(kernel_op_name(op)));
  }

 private:
  llvm::IRBuilder<>& b_;
  llvm::Type* type_;
  llvm::Type* int_type_;
};

}  // namespace edb::jit
