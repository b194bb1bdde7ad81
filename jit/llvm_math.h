// Branch-free exp, log, tanh, sigmoid, silu, expm1, log1p, erf, sin, cos, tan, sinh, cosh, their inverses, pow and rounding as LLVM IR over float scalars or float vectors (no libm
// calls, so loops vectorise), and the other kernel ops. Shared by the LLVM renderers of jit/; only jit/
// includes it.
#pragma once

#include <initializer_list>
#include <limits>
#include <string>

#include <llvm/IR/IRBuilder.h>

#include "edbatch/errors.h"
#include "ir/isa.h"
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
  llvm::Value* i(int32_t value) { return llvm::ConstantInt::get(int_type_, uint64_t(uint32_t(value))); }
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

  // floor(t) for |t| < 2^31. Under EDB_ISA=generic from a truncation and a compare, which SSE2
  // has as vector instructions, while floor itself needs SSE4.1 (without it LLVM calls floorf
  // lane by lane); one rounding instruction elsewhere. The two agree exactly.
  llvm::Value* floor_of_small(llvm::Value* t) {
    if (ir::selected_isa() != ir::Isa::generic) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, t);
    llvm::Value* truncated = b_.CreateSIToFP(b_.CreateFPToSI(t, int_type_), type_);
    return b_.CreateSelect(b_.CreateFCmpOGT(truncated, t), b_.CreateFSub(truncated, f(1.0f)), truncated);
  }

  // Cephes expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact), a
  // degree-7 polynomial for e^r, then 2^n applied as 2^(n/2) 2^(n - n/2), so results from
  // gradual underflow (x ~ -104) to overflow (x > 88.72) come out right with one rounding.
  llvm::Value* exp(llvm::Value* x) {
    llvm::Value* clamped = clamp(x, -104.0f, 88.8f);
    llvm::Value* n = floor_of_small(fma(clamped, f(1.44269504088896341f), f(0.5f)));
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

  // tanh as Eigen computes it for floats (generic_fast_tanh_float, which the batched executor runs):
  // an odd polynomial of degree 13 over an even one of degree 6, x clamped where it reaches 1, one
  // division; x itself below |x| = 4e-4. Relative and absolute error under 3e-7 (about 4 ulp of 1
  // near saturation), under 4e-7 under EDB_ISA=generic. A third of the instructions of exp's
  // 1 - 2 / (e^2x + 1) beside an odd polynomial for small |x|, which a vector computed both of:
  // a TreeLSTM cell's kernel (two tanh a call) ran 2-4% faster, 4-5% under AVX2.
  llvm::Value* tanh(llvm::Value* x) {
    // Where the rational reaches 1 exactly: with fused multiply-adds, and under EDB_ISA=generic
    // (SSE2: a product and a sum, rounded apart) a little earlier, as Eigen clamps without FMA.
    const float edge = ir::selected_isa() == ir::Isa::generic ? 7.90531110763549805f : 7.99881172180175781f;
    llvm::Value* clamped = clamp(x, -edge, edge);
    llvm::Value* z = b_.CreateFMul(clamped, clamped);
    llvm::Value* p = b_.CreateFMul(clamped, polynomial(z, {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                                                         5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                                                         4.89352455891786e-03f}));
    llvm::Value* q = polynomial(z, {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f});
    llvm::Value* tiny = b_.CreateFCmpOLT(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), f(0.0004f));
    return b_.CreateSelect(tiny, x, divide(p, q));
  }

  // Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first),
  // log(m) by a degree-9 polynomial in m - 1, plus e ln2 (ln2 split in two so e ln2 is exact).
  // As libm: NaN for x < 0 or NaN, -inf at 0, +inf at +inf.
  llvm::Value* log(llvm::Value* x) {
    llvm::Value* subnormal = b_.CreateFCmpOLT(x, f(1.17549435e-38f));  // and x <= 0, replaced below
    llvm::Value* normal = b_.CreateSelect(subnormal, b_.CreateFMul(x, f(8388608.0f)), x);
    llvm::Value* bits = b_.CreateBitCast(normal, int_type_);
    llvm::Value* mantissa = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(bits, i(0x007fffff)), i(0x3f000000)), type_);
    llvm::Value* exponent = b_.CreateSub(b_.CreateLShr(bits, i(23)), b_.CreateSelect(subnormal, i(126 + 23), i(126)));
    // m in [0.5, 1) from the bits: below sqrt(1/2) it is doubled and the exponent lowered by one.
    llvm::Value* low = b_.CreateFCmpOLT(mantissa, f(0.707106781186547524f));
    llvm::Value* e = b_.CreateSIToFP(b_.CreateSub(exponent, b_.CreateSelect(low, i(1), i(0))), type_);
    llvm::Value* r = b_.CreateFSub(b_.CreateSelect(low, b_.CreateFAdd(mantissa, mantissa), mantissa), f(1.0f));
    llvm::Value* z = b_.CreateFMul(r, r);
    llvm::Value* p = polynomial(r, {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                                    1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f,
                                    3.3333331174e-1f});
    llvm::Value* y = b_.CreateFMul(b_.CreateFMul(p, r), z);
    y = fma(e, f(-2.12194440e-4f), y);
    y = fma(z, f(-0.5f), y);
    llvm::Value* result = fma(e, f(0.693359375f), b_.CreateFAdd(r, y));
    const float infinity = std::numeric_limits<float>::infinity();
    result = b_.CreateSelect(b_.CreateFCmpOEQ(x, f(infinity)), x, result);
    result = b_.CreateSelect(b_.CreateFCmpOEQ(x, f(0.0f)), f(-infinity), result);
    return b_.CreateSelect(b_.CreateFCmpULT(x, f(0.0f)), f(std::numeric_limits<float>::quiet_NaN()), result);
  }

  // ir::max_of and ir::min_of: a when a is NaN or wins the comparison, else b (so a NaN in either
  // argument gives NaN).
  llvm::Value* max(llvm::Value* a, llvm::Value* c) {
    return b_.CreateSelect(b_.CreateOr(b_.CreateFCmpUNO(a, a), b_.CreateFCmpOGE(a, c)), a, c);
  }
  llvm::Value* min(llvm::Value* a, llvm::Value* c) {
    return b_.CreateSelect(b_.CreateOr(b_.CreateFCmpUNO(a, a), b_.CreateFCmpOLE(a, c)), a, c);
  }

  llvm::Value* fabs(llvm::Value* x) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }

  // e^x - 1 with relative accuracy near 0: below |x| = 0.35 its Taylor polynomial to x^7 (the
  // truncation under 2e-8 relative), above it exp(x) - 1 (no cancellation left to lose digits to).
  llvm::Value* expm1(llvm::Value* x) {
    llvm::Value* small = b_.CreateFMul(polynomial(x, {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f}), x);
    return b_.CreateSelect(b_.CreateFCmpOLT(fabs(x), f(0.35f)), small, b_.CreateFSub(exp(x), f(1.0f)));
  }
  // x above 0, else alpha (e^x - 1); a NaN stays NaN.
  llvm::Value* elu(llvm::Value* x, float alpha) {
    return b_.CreateSelect(b_.CreateFCmpOGT(x, f(0.0f)), x, b_.CreateFMul(f(alpha), expm1(x)));
  }
  // log(1 + u) by Goldberg's correction: with w = 1 + u rounded, log(w) u / (w - 1) (u itself
  // where w rounds to 1), accurate to a few ulps; inf at u = inf, NaN below -1 (log's).
  llvm::Value* log1p(llvm::Value* u) {
    llvm::Value* w = b_.CreateFAdd(f(1.0f), u);
    llvm::Value* corrected = b_.CreateFDiv(b_.CreateFMul(log(w), u), b_.CreateFSub(w, f(1.0f)));
    corrected = b_.CreateSelect(b_.CreateFCmpOEQ(u, f(std::numeric_limits<float>::infinity())), u, corrected);
    return b_.CreateSelect(b_.CreateFCmpOEQ(w, f(1.0f)), u, corrected);
  }
  // log(sigmoid(x)) = min(x, 0) - log(1 + e^-|x|).
  llvm::Value* log_sigmoid(llvm::Value* x) {
    llvm::Value* negative_part = b_.CreateSelect(b_.CreateFCmpOLT(x, f(0.0f)), x, f(0.0f));
    return b_.CreateFSub(negative_part, log1p(exp(b_.CreateFNeg(fabs(x)))));
  }
  // erf: below |x| = 1 its Taylor series to x^21 (truncation under 1.5e-8); above, Abramowitz and
  // Stegun 7.1.26, 1 - t (a1 + t (a2 + ...)) e^(-x^2) with t = 1 / (1 + p |x|) and the sign of x
  // (absolute error under 1.5e-7 where erf is above 0.84, so relative under 2e-7).
  llvm::Value* erf(llvm::Value* x) {
    llvm::Value* z = b_.CreateFMul(x, x);
    llvm::Value* small = b_.CreateFMul(
        x, polynomial(z, {1.4807192815879218e-08f, -1.6365844691234924e-07f, 1.6462114365889246e-06f,
                          -1.492565035840625e-05f, 0.00012055332981789664f, -0.0008548327023450852f,
                          0.005223977625442188f, -0.026866170645131252f, 0.11283791670955126f,
                          -0.37612638903183754f, 1.1283791670955126f}));
    llvm::Value* a = fabs(x);
    llvm::Value* t = b_.CreateFDiv(f(1.0f), fma(a, f(0.3275911f), f(1.0f)));
    llvm::Value* p = b_.CreateFMul(t, polynomial(t, {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}));
    llvm::Value* large = b_.CreateFSub(f(1.0f), b_.CreateFMul(p, exp(b_.CreateFNeg(z))));
    large = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, large, x);
    return b_.CreateSelect(b_.CreateFCmpOLT(a, f(1.0f)), small, large);
  }
  // Cephes sinf and cosf: |x| = j pi/4 + r with j even (pi/4 in three parts, so j pi/4 is exact
  // for |x| < 8192, where they are accurate), |r| <= pi/4, then sin's or cos's polynomial in r and
  // the sign by j's octant. NaN for NaN and the infinities.
  llvm::Value* sine(llvm::Value* x, bool cosine) {
    llvm::Value* a = fabs(x);
    llvm::Value* j = b_.CreateFPToSI(b_.CreateFMul(clamp(a, 0.0f, 1.0e7f), f(1.27323954473516f)), int_type_);
    j = b_.CreateAnd(b_.CreateAdd(j, i(1)), i(~1));  // poison for NaN: that lane is replaced below
    llvm::Value* y = b_.CreateSIToFP(j, type_);
    llvm::Value* r = fma(y, f(-0.78515625f), a);
    r = fma(y, f(-2.4187564849853515625e-4f), r);
    r = fma(y, f(-3.77489497744594108e-8f), r);
    llvm::Value* z = b_.CreateFMul(r, r);
    llvm::Value* sin_r = fma(b_.CreateFMul(polynomial(z, {-1.9515295891e-4f, 8.3321608736e-3f, -1.6666654611e-1f}), z), r, r);
    llvm::Value* cos_r = fma(b_.CreateFMul(polynomial(z, {2.443315711809948e-5f, -1.388731625493765e-3f, 4.166664568298827e-2f}),
                                           b_.CreateFMul(z, z)),
                             f(1.0f), fma(z, f(-0.5f), f(1.0f)));
    llvm::Value* odd_quadrant = b_.CreateICmpNE(b_.CreateAnd(j, i(2)), i(0));
    llvm::Value* upper_half = b_.CreateICmpNE(b_.CreateAnd(j, i(4)), i(0));
    llvm::Value* value = b_.CreateSelect(odd_quadrant, cosine ? sin_r : cos_r, cosine ? cos_r : sin_r);
    llvm::Value* negate = cosine ? b_.CreateXor(upper_half, odd_quadrant)
                                 : b_.CreateXor(upper_half, b_.CreateFCmpOLT(x, f(0.0f)));
    value = b_.CreateSelect(negate, b_.CreateFNeg(value), value);
    llvm::Value* undefined = b_.CreateOr(b_.CreateFCmpUNO(x, x), b_.CreateFCmpOEQ(a, f(std::numeric_limits<float>::infinity())));
    return b_.CreateSelect(undefined, f(std::numeric_limits<float>::quiet_NaN()), value);
  }
  // sinh: below |x| = 1 its odd Taylor polynomial to x^9 (relative accuracy near 0, truncation
  // under 3e-8); above, e - 1 / (4 e) with e = e^|x| / 2 and the sign of x. cosh: e + 1 / (4 e)
  // everywhere (no cancellation). From |x| = 88.5 on, e = e^(|x| - ln 2), so they overflow only
  // where sinh and cosh do (the subtraction's rounding costs up to 2e-6 relative there).
  llvm::Value* half_exp(llvm::Value* a) {
    return b_.CreateSelect(b_.CreateFCmpOLT(a, f(88.5f)), b_.CreateFMul(exp(a), f(0.5f)),
                           exp(b_.CreateFSub(a, f(0.693147180559945f))));
  }
  llvm::Value* sinh(llvm::Value* x) {
    llvm::Value* z = b_.CreateFMul(x, x);
    llvm::Value* small = b_.CreateFMul(x, polynomial(z, {1.0f / 362880, 1.0f / 5040, 1.0f / 120, 1.0f / 6, 1.0f}));
    llvm::Value* e = half_exp(fabs(x));
    llvm::Value* large = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign,
                                                  b_.CreateFSub(e, b_.CreateFDiv(f(0.25f), e)), x);
    return b_.CreateSelect(b_.CreateFCmpOLT(fabs(x), f(1.0f)), small, large);
  }
  llvm::Value* cosh(llvm::Value* x) {
    llvm::Value* e = half_exp(fabs(x));
    return b_.CreateFAdd(e, b_.CreateFDiv(f(0.25f), e));
  }
  // round (half away from zero, as std::round), ceil and floor for any float: below 2^23 from a
  // truncation (|x| - trunc|x| is exact, so round never sees the 0.49999997 + 0.5 = 1 trap), above
  // it x itself (already whole, or NaN or infinite). The sign of x is kept (ceil(-0.5) is -0).
  enum class Rounding { nearest, up, down };
  llvm::Value* rounded(llvm::Value* x, Rounding mode) {
    llvm::Value* a = fabs(x);
    llvm::Value* t = b_.CreateSIToFP(b_.CreateFPToSI(x, int_type_), type_);  // poison above 2^31: replaced below
    llvm::Value* whole;
    if (mode == Rounding::nearest) {
      llvm::Value* ta = fabs(t);
      whole = b_.CreateSelect(b_.CreateFCmpOGE(b_.CreateFSub(a, ta), f(0.5f)), b_.CreateFAdd(ta, f(1.0f)), ta);
    } else if (mode == Rounding::up) {
      whole = b_.CreateSelect(b_.CreateFCmpOLT(t, x), b_.CreateFAdd(t, f(1.0f)), t);
    } else {
      whole = b_.CreateSelect(b_.CreateFCmpOGT(t, x), b_.CreateFSub(t, f(1.0f)), t);
    }
    whole = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, whole, x);
    return b_.CreateSelect(b_.CreateFCmpOLT(a, f(8388608.0f)), whole, x);
  }

  // The inverse hyperbolic functions through log1p, so they keep relative accuracy near 0 (and
  // acosh near 1): asinh |x| = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), with the sign of x;
  // acosh x = log1p(t + sqrt(t (t + 2))), t = x - 1 (exact near 1), NaN below 1; above 4096 both
  // are log(2 |x|) = log |x| + ln 2 (the next term, 1 / (4 x^2), under 2e-9 relative), so x^2 never
  // overflows. atanh |x| = log1p(2 |x| / (1 - |x|)) / 2 with the sign of x: inf at 1, NaN above.
  llvm::Value* asinh(llvm::Value* x) {
    llvm::Value* a = fabs(x);
    llvm::Value* z = b_.CreateFMul(a, a);
    llvm::Value* root = b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFAdd(f(1.0f), z));
    llvm::Value* middle = log1p(b_.CreateFAdd(a, b_.CreateFDiv(z, b_.CreateFAdd(f(1.0f), root))));
    llvm::Value* large = b_.CreateFAdd(log(a), f(0.693147180559945f));
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign,
                                    b_.CreateSelect(b_.CreateFCmpOGT(a, f(4096.0f)), large, middle), x);
  }
  llvm::Value* acosh(llvm::Value* x) {
    llvm::Value* t = b_.CreateFSub(x, f(1.0f));
    llvm::Value* root = b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFMul(t, b_.CreateFAdd(t, f(2.0f))));
    llvm::Value* middle = log1p(b_.CreateFAdd(t, root));
    llvm::Value* large = b_.CreateFAdd(log(x), f(0.693147180559945f));
    llvm::Value* value = b_.CreateSelect(b_.CreateFCmpOGT(x, f(4096.0f)), large, middle);
    return b_.CreateSelect(b_.CreateFCmpULT(x, f(1.0f)), f(std::numeric_limits<float>::quiet_NaN()), value);
  }
  llvm::Value* atanh(llvm::Value* x) {
    llvm::Value* a = fabs(x);
    llvm::Value* ratio = b_.CreateFDiv(b_.CreateFAdd(a, a), b_.CreateFSub(f(1.0f), a));
    llvm::Value* value = b_.CreateFMul(log1p(ratio), f(0.5f));
    // Above 1 the ratio is below -2, where log1p is NaN; at 1 it is inf and so is log1p.
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, value, x);
  }
  // The inverse trigonometric functions, after Cephes' asinf and atanf. asin s for |s| <= 1/2 is
  // s + s z p(z), z = s^2; above 1/2, asin a = pi/2 - 2 asin sqrt((1 - a) / 2), whose root is at
  // most 1/2 again. asin takes the sign of x; acos x is 2 asin sqrt((1 - x) / 2) above 1/2 (so
  // it keeps relative accuracy next to 1, where acos goes to 0), pi minus that of -x below -1/2,
  // and pi/2 - asin x between. Outside [-1, 1] the root is NaN, and so is the value.
  llvm::Value* small_asin(llvm::Value* s) {
    llvm::Value* z = b_.CreateFMul(s, s);
    llvm::Value* p = polynomial(z, {4.2163199048e-2f, 2.4181311049e-2f, 4.5470025998e-2f, 7.4953002686e-2f, 1.6666752422e-1f});
    return fma(b_.CreateFMul(p, z), s, s);
  }
  llvm::Value* half_root_of_one_minus(llvm::Value* a) {  // sqrt((1 - a) / 2)
    return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFMul(b_.CreateFSub(f(1.0f), a), f(0.5f)));
  }
  llvm::Value* asin(llvm::Value* x) {
    llvm::Value* a = fabs(x);
    llvm::Value* high = b_.CreateFCmpOGT(a, f(0.5f));
    llvm::Value* s = small_asin(b_.CreateSelect(high, half_root_of_one_minus(a), a));
    llvm::Value* value = b_.CreateSelect(high, fma(s, f(-2.0f), f(1.57079632679489662f)), s);
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, value, x);
  }
  llvm::Value* acos(llvm::Value* x) {
    llvm::Value* a = fabs(x);
    llvm::Value* high = b_.CreateFCmpOGT(a, f(0.5f));
    llvm::Value* s = small_asin(b_.CreateSelect(high, half_root_of_one_minus(a), x));
    llvm::Value* twice = b_.CreateFAdd(s, s);
    llvm::Value* outer = b_.CreateSelect(b_.CreateFCmpOLT(x, f(0.0f)), b_.CreateFSub(f(3.14159265358979324f), twice), twice);
    return b_.CreateSelect(high, outer, b_.CreateFSub(f(1.57079632679489662f), s));
  }
  // atan |x| = y0 + atan t: |x| above tan(3 pi / 8) as pi/2 + atan(-1 / |x|), above tan(pi / 8)
  // as pi/4 + atan((|x| - 1) / (|x| + 1)), so |t| <= tan(pi / 8), where an odd polynomial of
  // degree 9 holds; with the sign of x (pi/2 at infinity, NaN for NaN).
  llvm::Value* atan(llvm::Value* x) {
    llvm::Value* a = fabs(x);
    llvm::Value* far = b_.CreateFCmpOGT(a, f(2.414213562373095f));
    llvm::Value* middle = b_.CreateFCmpOGT(a, f(0.4142135623730950f));
    llvm::Value* t = b_.CreateSelect(
        far, b_.CreateFDiv(f(-1.0f), a),
        b_.CreateSelect(middle, b_.CreateFDiv(b_.CreateFSub(a, f(1.0f)), b_.CreateFAdd(a, f(1.0f))), a));
    llvm::Value* y0 = b_.CreateSelect(far, f(1.57079632679489662f), b_.CreateSelect(middle, f(0.785398163397448310f), f(0.0f)));
    llvm::Value* z = b_.CreateFMul(t, t);
    llvm::Value* p = polynomial(z, {8.05374449538e-2f, -1.38776856032e-1f, 1.99777106478e-1f, -3.33329491539e-1f});
    llvm::Value* value = b_.CreateFAdd(y0, fma(b_.CreateFMul(p, z), t, t));
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, value, x);
  }
  // powf(a, b) as e^(b log |a|), the sign and the special cases as libm: 1 where b is 0 or a is
  // 1 (even for a NaN in the other), and for a < 0 NaN unless b is whole, negative where b is odd.
  // Relative error about |b log |a|| 1.2e-7 plus exp's (log's rounding, scaled by b).
  llvm::Value* pow(llvm::Value* a, llvm::Value* c) {
    llvm::Value* magnitude = exp(b_.CreateFMul(c, log(fabs(a))));
    llvm::Value* whole = b_.CreateFCmpOEQ(rounded(c, Rounding::down), c);
    llvm::Value* half = b_.CreateFMul(c, f(0.5f));
    llvm::Value* odd = b_.CreateAnd(whole, b_.CreateFCmpONE(rounded(half, Rounding::down), half));
    // An odd power keeps a's sign (-0 included); a negative a to a fraction has no real power.
    llvm::Value* value = b_.CreateSelect(odd, b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, magnitude, a), magnitude);
    llvm::Value* negative = b_.CreateFCmpOLT(a, f(0.0f));
    value = b_.CreateSelect(b_.CreateAnd(negative, b_.CreateNot(whole)), f(std::numeric_limits<float>::quiet_NaN()), value);
    llvm::Value* one = b_.CreateOr(b_.CreateFCmpOEQ(c, f(0.0f)), b_.CreateFCmpOEQ(a, f(1.0f)));
    return b_.CreateSelect(one, f(1.0f), value);
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
      case KernelOp::log: return log(a);
      case KernelOp::div: return b_.CreateFDiv(a, c);  // exact: the user's division, not divide()'s estimate
      case KernelOp::max: return max(a, c);
      case KernelOp::min: return min(a, c);
      // sqrt is one correctly rounded instruction (IEEE: NaN below 0), fabs a bit mask.
      case KernelOp::sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
      case KernelOp::abs: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
      case KernelOp::square: return b_.CreateFMul(a, a);
      case KernelOp::cube: return b_.CreateFMul(b_.CreateFMul(a, a), a);
      // Exact divisions: both are the user's values, not an activation's intermediate.
      case KernelOp::softsign:
        return b_.CreateFDiv(a, b_.CreateFAdd(f(1.0f), b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a)));
      case KernelOp::silu: return b_.CreateFDiv(a, b_.CreateFAdd(f(1.0f), exp(b_.CreateFNeg(a))));
      case KernelOp::elu: return elu(a, constant);
      case KernelOp::selu: return b_.CreateFMul(f(ir::kSeluLambda), elu(a, ir::kSeluAlpha));
      case KernelOp::log_sigmoid: return log_sigmoid(a);
      case KernelOp::erf: return erf(a);
      case KernelOp::sin: return sine(a, false);
      case KernelOp::cos: return sine(a, true);
      case KernelOp::sinh: return sinh(a);
      case KernelOp::cosh: return cosh(a);
      case KernelOp::round: return rounded(a, Rounding::nearest);
      case KernelOp::ceil: return rounded(a, Rounding::up);
      case KernelOp::floor: return rounded(a, Rounding::down);
      case KernelOp::tan: return b_.CreateFDiv(sine(a, false), sine(a, true));  // exact: sin and cos share the reduction
      case KernelOp::asinh: return asinh(a);
      case KernelOp::acosh: return acosh(a);
      case KernelOp::atanh: return atanh(a);
      case KernelOp::asin: return asin(a);
      case KernelOp::acos: return acos(a);
      case KernelOp::atan: return atan(a);
      case KernelOp::pow: return pow(a, c);
      // (y, dy): dy where y > 0 (ordered: a NaN y gives 0), as the other executors' select
      case KernelOp::relu_grad: return b_.CreateSelect(b_.CreateFCmpOGT(a, f(0.0f)), c, f(0.0f));
    }
    throw InternalError("LlvmBackend::compile: no rule for kernel op " + std::string(kernel_op_name(op)));
  }

 private:
  llvm::IRBuilder<>& b_;
  llvm::Type* type_;
  llvm::Type* int_type_;
};

}  // namespace edb::jit
