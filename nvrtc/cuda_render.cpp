// The CUDA C renderer: the kernel IR walked once, each instruction printed from a table of CUDA
// expressions; the GEMM is a fixed template. No headers: NVRTC declares expf, logf and tanhf itself.
#include "nvrtc/cuda_render.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "edbatch/errors.h"

namespace edb::nvrtc {

namespace {

// A float constant exactly: a hex literal when finite, its bits otherwise.
std::string float_literal(float value) {
  char text[64];
  if (std::isfinite(value)) std::snprintf(text, sizeof text, "%af", double(value));
  else std::snprintf(text, sizeof text, "__int_as_float(0x%08x)", std::bit_cast<uint32_t>(value));
  return text;
}

std::string value_name(jit::ValueId id) { return "v" + std::to_string(id); }

// Member k's element e of input i.
std::string load_expression(jit::OperandAccess access, int32_t input) {
  const std::string in = "inputs[" + std::to_string(input) + "]";
  switch (access) {
    case jit::OperandAccess::shared: return in + ".base[e]";
    case jit::OperandAccess::strided: return in + ".base[k * " + in + ".stride + e]";
    case jit::OperandAccess::gathered: return in + ".pointers[k][e]";
  }
  throw InternalError("render_kernel: operand access " + std::to_string(int(access)) + " out of range");
}

// A computing kernel op on values named a and b.
std::string op_expression(jit::KernelOp op, const std::string& a, const std::string& b, float constant) {
  switch (op) {
    case jit::KernelOp::load: break;
    case jit::KernelOp::add: return a + " + " + b;
    case jit::KernelOp::sub: return a + " - " + b;
    case jit::KernelOp::cmult: return a + " * " + b;
    case jit::KernelOp::scale: return a + " * " + float_literal(constant);
    case jit::KernelOp::add_const: return a + " + " + float_literal(constant);
    case jit::KernelOp::tanh: return "tanhf(" + a + ")";
    case jit::KernelOp::sigmoid: return "1.0f / (1.0f + expf(-" + a + "))";
    case jit::KernelOp::relu: return a + " < 0.0f ? 0.0f : " + a;  // NaN stays NaN, as jit::interpret
    case jit::KernelOp::exp: return "expf(" + a + ")";
    case jit::KernelOp::log: return "logf(" + a + ")";
    case jit::KernelOp::div: return a + " / " + b;
    // ir::max_of and ir::min_of: a NaN in either argument gives NaN (fmaxf would drop it)
    case jit::KernelOp::max: return a + " != " + a + " || " + a + " >= " + b + " ? " + a + " : " + b;
    case jit::KernelOp::min: return a + " != " + a + " || " + a + " <= " + b + " ? " + a + " : " + b;
    case jit::KernelOp::sqrt: return "sqrtf(" + a + ")";
    case jit::KernelOp::abs: return "fabsf(" + a + ")";
    case jit::KernelOp::square: return a + " * " + a;
    case jit::KernelOp::cube: return a + " * " + a + " * " + a;
    case jit::KernelOp::softsign: return a + " / (1.0f + fabsf(" + a + "))";
    case jit::KernelOp::silu: return a + " / (1.0f + expf(-" + a + "))";
    case jit::KernelOp::elu: return a + " > 0.0f ? " + a + " : " + float_literal(constant) + " * expm1f(" + a + ")";
    case jit::KernelOp::selu:
      return float_literal(ir::kSeluLambda) + " * (" + a + " > 0.0f ? " + a + " : " + float_literal(ir::kSeluAlpha) +
             " * expm1f(" + a + "))";
    case jit::KernelOp::log_sigmoid: return "fminf(" + a + ", 0.0f) - log1pf(expf(-fabsf(" + a + ")))";
    case jit::KernelOp::erf: return "erff(" + a + ")";
    case jit::KernelOp::sin: return "sinf(" + a + ")";
    case jit::KernelOp::cos: return "cosf(" + a + ")";
    case jit::KernelOp::sinh: return "sinhf(" + a + ")";
    case jit::KernelOp::cosh: return "coshf(" + a + ")";
    case jit::KernelOp::round: return "roundf(" + a + ")";
    case jit::KernelOp::ceil: return "ceilf(" + a + ")";
    case jit::KernelOp::floor: return "floorf(" + a + ")";
    case jit::KernelOp::tan: return "tanf(" + a + ")";
    case jit::KernelOp::asinh: return "asinhf(" + a + ")";
    case jit::KernelOp::acosh: return "acoshf(" + a + ")";
    case jit::KernelOp::atanh: return "atanhf(" + a + ")";
    case jit::KernelOp::asin: return "asinf(" + a + ")";
    case jit::KernelOp::acos: return "acosf(" + a + ")";
    case jit::KernelOp::atan: return "atanf(" + a + ")";
    case jit::KernelOp::pow: return "powf(" + a + ", " + b + ")";
    case jit::KernelOp::relu_grad: return a + " > 0.0f ? " + b + " : 0.0f";  // a NaN y gives 0, as jit::interpret
  }
  throw InternalError("render_kernel: no CUDA rule for kernel op " + std::string(jit::kernel_op_name(op)));
}

std::string expression(const jit::Kernel& kernel, const jit::Instruction& in) {
  if (in.op == jit::KernelOp::load) return load_expression(kernel.inputs[size_t(in.input)], in.input);
  return op_expression(in.op, value_name(in.a), value_name(in.b), in.constant);
}

// The float pointer of a cell program operand in the kernel below.
// An operand's pointer; in a stage of several columns, at column `col`'s values.
std::string operand_pointer(const jit::CellProgram::Operand& operand) {
  const std::string base = (operand.shared ? "shared[" : "p[") + std::to_string(operand.slot) + "]";
  return operand.stride ? "(" + base + " + col * " + std::to_string(operand.stride) + ")" : base;
}

// The selection steps (pick_neg_log_softmax, argmax, kmax_pooling, their gradients, transpose)
// inside the step's braces, x, y and o declared: the reference's rule (runtime/selection.h ranks a
// NaN above every number, the earlier at ties). False for another step.
bool render_selection_step(std::ostringstream& out, const jit::CellProgram::ColumnStep& step) {
  using Step = jit::CellProgram::ColumnStep;
  const std::string rows = std::to_string(step.x.rows), cols = std::to_string(step.cols), index = std::to_string(step.index);
  const std::string stride = std::to_string(step.x.operand.stride);
  // Whether a ranks strictly above b.
  const auto ranks = [](const std::string& a, const std::string& b) {
    return "(" + a + " > " + b + " || (" + a + " != " + a + " && " + b + " == " + b + "))";
  };
  const std::string each = "        for (int r = 0; r < " + rows + "; ++r) ";
  switch (step.kind) {
    case Step::pick_neg_log_softmax:
    case Step::pick_neg_log_softmax_grad:
      out << "        float m = __int_as_float(0xff800000), s = 0.0f;\n"
          << each << "if (x[r] > m) m = x[r];\n" << each << "s += expf(x[r] - m);\n"
          << "        const float l = m + logf(s);\n";
      if (step.kind == Step::pick_neg_log_softmax)
        out << "        o[0] = l - x[" << index << "];\n";
      else
        out << each << "o[r] = expf(x[r] - l);\n        o[" << index << "] -= 1.0f;\n" << each << "o[r] *= y[0];\n";
      break;
    case Step::argmax:
      out << "        for (int c = 0; c < " << cols << "; ++c) {\n          const float* xc = x + c * " << stride
          << ";\n          float* oc = o + c * " << rows << ";\n          int b = 0;\n"
          << "          for (int r = 1; r < " << rows << "; ++r) if " << ranks("xc[r]", "xc[b]") << " b = r;\n"
          << "          for (int r = 0; r < " << rows << "; ++r) oc[r] = 0.0f;\n          oc[b] = 1.0f;\n        }\n";
      break;
    case Step::kmax_pooling:
    case Step::kmax_pooling_grad:
      // Per row, column p's rank: the columns before it when sorted largest first, stably.
      out << each << "{\n          int place = 0;\n          for (int p = 0; p < " << cols << "; ++p) {\n"
          << "            const float v = x[p * " << stride << " + r];\n            int rank = 0;\n"
          << "            for (int q = 0; q < " << cols << "; ++q) {\n              const float w = x[q * " << stride << " + r];\n"
          << "              if (q < p ? !" << ranks("v", "w") << " : q > p && " << ranks("w", "v") << ") ++rank;\n            }\n";
      if (step.kind == Step::kmax_pooling)
        out << "            if (rank < " << index << ") o[place++ * " << rows << " + r] = v;\n";
      else
        out << "            o[p * " << rows << " + r] = rank < " << index << " ? y[place++ * " << step.y.operand.stride
            << " + r] : 0.0f;\n";
      out << "          }\n        }\n";
      break;
    case Step::transpose:
      out << "        for (int c = 0; c < " << cols << "; ++c)\n" << "  " << each << "o[r * " << cols << " + c] = x[c * " << stride
          << " + r];\n";
      break;
    default: return false;
  }
  out << "      }\n";
  return true;
}

// A column stage: each step by thread 0 of the call's block, row after row (the steps' formulas
// are the reference executor's), then a barrier before the stages that read their outputs.
void render_column_steps(std::ostringstream& out, const jit::CellProgram::Stage& stage, size_t index) {
  using Step = jit::CellProgram::ColumnStep;
  auto base = [](const jit::CellProgram::Operand& operand) {
    return (operand.shared ? "shared[" : "p[") + std::to_string(operand.slot) + "]";
  };
  out << "    // stage " << index << ": column steps\n    if (threadIdx.x == 0) {\n";
  for (const Step& step : stage.steps) {
    const std::string rows = std::to_string(step.x.rows);
    out << "      {\n        const float* x = " << base(step.x.operand) << " + " << step.x.row << ";\n";
    if (jit::column_step_has_y(step))
      out << "        const float* y = " << base(step.y.operand) << " + " << step.y.row << ";\n";
    out << "        float* o = " << base(step.out) << ";\n";
    if (render_selection_step(out, step)) continue;
    if (step.kind == Step::scalar) {
      out << "        o[0] = " << op_expression(step.op, "x[0]", jit::column_step_has_y(step) ? "y[0]" : "", step.constant)
          << ";\n      }\n";
      continue;
    }
    if (jit::column_step_is_total(step.kind)) {
      out << "        float t = 0.0f;\n        for (int c = 0; c < " << step.cols << "; ++c)\n          for (int r = 0; r < "
          << rows << "; ++r) t += x[c * " << step.x.operand.stride << " + r]"
          << (step.kind == Step::dot ? " * y[c * " + std::to_string(step.y.operand.stride) + " + r]" : std::string())
          << ";\n        o[0] = t"
          << (step.kind == Step::mean ? " / " + std::to_string(step.x.rows * step.cols) + ".0f" : std::string()) << ";\n      }\n";
      continue;
    }
    out << "        for (int c = 0; c < " << step.cols << "; ++c) {\n          const float* xc = x + c * "
        << step.x.operand.stride << ";\n          float* oc = o + c * " << rows << ";\n";
    if (jit::column_step_has_y(step))
      out << "          const float* yc = y + c * " << step.y.operand.stride << ";\n";
    const std::string each = "          for (int r = 0; r < " + rows + "; ++r) ";
    switch (step.kind) {
      case Step::softmax:
      case Step::log_softmax:
        out << "          float m = __int_as_float(0xff800000), s = 0.0f;\n"
            << each << "if (xc[r] > m) m = xc[r];\n";
        if (step.kind == Step::softmax)
          out << each << "{ oc[r] = expf(xc[r] - m); s += oc[r]; }\n" << each << "oc[r] = oc[r] / s;\n";
        else
          out << each << "s += expf(xc[r] - m);\n          const float l = m + logf(s);\n" << each << "oc[r] = xc[r] - l;\n";
        break;
      case Step::softmax_grad:
        out << "          float d = 0.0f;\n" << each << "d += xc[r] * yc[r];\n" << each << "oc[r] = xc[r] * (yc[r] - d);\n";
        break;
      case Step::log_softmax_grad:
        out << "          float d = 0.0f;\n" << each << "d += yc[r];\n" << each << "oc[r] = yc[r] - expf(xc[r]) * d;\n";
        break;
      default: break;
    }
    out << "        }\n      }\n";
  }
  out << "    }\n    __syncthreads();\n";
}

}  // namespace

std::string render_kernel(const jit::Kernel& kernel, const std::string& symbol) {
  jit::verify(kernel);
  std::ostringstream out;
  out << "// " << kernel.name << "\n"
      << "struct EdbKernelInput { const float* base; long long stride; const float* const* pointers; };\n"
      << "extern \"C\" __global__ void " << symbol
      << "(long long members, long long elements, const EdbKernelInput* __restrict__ inputs,\n"
      << "    float* const* __restrict__ outputs) {\n"
      << "  const long long total = members * elements;\n"
      << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;\n"
      << "       i += (long long)gridDim.x * blockDim.x) {\n"
      << "    const long long k = i / elements, e = i - k * elements;\n"
      << "    (void)k; (void)e;\n";
  for (size_t v = 0; v < kernel.body.size(); ++v)
    out << "    const float " << value_name(jit::ValueId(v)) << " = " << expression(kernel, kernel.body[v]) << ";\n";
  for (size_t j = 0; j < kernel.outputs.size(); ++j)
    out << "    outputs[" << j << "][i] = " << value_name(kernel.outputs[j]) << ";\n";
  out << "  }\n}\n";
  return out.str();
}

std::string render_cell(const jit::CellProgram& program, const std::string& symbol, int vector) {
  jit::verify(program);
  const std::string rows = std::to_string(program.rows), v = std::to_string(vector);
  std::ostringstream out;
  out << "// cell " << program.name << "\n"
      << "extern \"C\" __global__ void " << symbol
      << "(long long calls, const float* const* __restrict__ shared,\n"
      << "    const float* const* __restrict__ weights, float* const* __restrict__ pointers) {\n"
      << "  for (long long call = blockIdx.x; call < calls; call += gridDim.x) {\n"
      << "    float* const* p = pointers + call * " << program.call_slots << ";\n"
      << "    (void)p; (void)shared; (void)weights;\n";
  for (size_t s = 0; s < program.stages.size(); ++s) {
    const jit::CellProgram::Stage& stage = program.stages[s];
    if (!stage.steps.empty()) {
      render_column_steps(out, stage, s);
      continue;
    }
    out << "    // stage " << s << "\n";
    // A loop of one column too: a stage of one column may still carry operands' column strides,
    // which then move nothing (col is 0), as the LLVM backend ignores them there.
    out << "    for (long long col = 0; col < " << stage.columns << "; ++col)\n";
    out << "    for (int r = threadIdx.x; r < " << rows << "; r += blockDim.x) {\n"
        << "      const long long tile = r / " << v << ", lane = r - tile * " << v << ";\n"
        << "      (void)tile; (void)lane;\n";
    for (size_t c = 0; c < stage.contractions.size(); ++c) {
      const jit::CellProgram::Contraction& k = stage.contractions[c];
      if (k.has_matrix) {  // a per-call W read in place: column k, or (transposed) output row r's column
        const std::string m = operand_pointer(k.matrix.operand) + " + " + std::to_string(k.matrix.row);
        const std::string leading = std::to_string(k.leading);
        const jit::CellProgram::Segment& x = k.x[0];
        for (int32_t g = 0; g < k.blocks; ++g) {
          const std::string a = "a" + std::to_string(c) + "_" + std::to_string(g);
          const std::string row = "(" + std::to_string(int64_t(g) * program.rows) + " + r)";
          out << "      float " << a << " = "
              << (k.has_bias ? operand_pointer(k.bias.operand) + "[" + std::to_string(k.bias.row + int64_t(g) * program.rows) + " + r]"
                             : std::string("0.0f"))
              << ";\n";
          if (k.transposed) {
            out << "      for (int k = 0; k < " << x.rows << "; ++k) " << a << " += (" << m << ")[" << row << " * " << leading
                << " + k] * " << operand_pointer(x.operand) << "[" << x.row << " + k];\n";
            continue;
          }
          int64_t k_begin = 0;
          for (const jit::CellProgram::Segment& piece : k.x) {
            out << "      for (int k = 0; k < " << piece.rows << "; ++k) " << a << " += (" << m << ")[(" << k_begin
                << " + k) * " << leading << " + " << row << "] * " << operand_pointer(piece.operand) << "[" << piece.row
                << " + k * " << k.x_step << "];\n";
            k_begin += piece.rows;
          }
        }
        continue;
      }
      int64_t depth = 0;
      for (const jit::CellProgram::Segment& x : k.x) depth += x.rows;
      for (int32_t g = 0; g < k.blocks; ++g)
        out << "      float a" << c << "_" << g << " = "
            << (k.has_bias ? operand_pointer(k.bias.operand) + "[" + std::to_string(k.bias.row + int64_t(g) * program.rows) + " + r]"
                           : std::string("0.0f"))
            << ";\n";
      int64_t k_begin = 0;
      for (const jit::CellProgram::Segment& x : k.x) {
        out << "      {\n        const float* x = " << operand_pointer(x.operand) << " + " << x.row << ";\n"
            << "        const float* w = weights[" << k.weight << "] + (tile * " << depth << " + " << k_begin << ") * "
            << k.blocks * vector << " + lane;\n"
            << "        for (int k = 0; k < " << x.rows << "; ++k) {\n          const float xk = x[k];\n";
        for (int32_t g = 0; g < k.blocks; ++g)
          out << "          a" << c << "_" << g << " += w[(k * " << k.blocks << " + " << g << ") * " << v << "] * xk;\n";
        out << "        }\n      }\n";
        k_begin += x.rows;
      }
    }
    for (size_t i = 0; i < stage.body.size(); ++i) {
      const jit::CellProgram::Instruction& in = stage.body[i];
      std::string value;
      switch (in.kind) {
        case jit::CellProgram::Instruction::load:
          value = operand_pointer(in.operand) + "[" + std::to_string(int64_t(in.block) * program.rows) + " + r]";
          break;
        case jit::CellProgram::Instruction::accumulator:
          value = "a" + std::to_string(in.contraction) + "_" + std::to_string(in.block);
          break;
        case jit::CellProgram::Instruction::compute:
          value = op_expression(in.op, value_name(in.a), in.b >= 0 ? value_name(in.b) : std::string(), in.constant);
          break;
      }
      out << "      const float " << value_name(jit::ValueId(i)) << " = " << value << ";\n";
    }
    for (const jit::CellProgram::Store& store : stage.stores)
      out << "      " << operand_pointer(store.operand) << "[" << int64_t(store.block) * program.rows << " + r] = "
          << value_name(store.value) << ";\n";
    out << "    }\n    __syncthreads();\n";
  }
  out << "  }\n}\n";
  return out.str();
}

std::string render_gemm(const std::string& symbol) {
  const std::string tile = std::to_string(kGemmTile);
  std::string source = R"(// batched fp32 GEMM, TILE x TILE tiles through shared memory; X gathered per member in its loads
extern "C" __global__ void SYMBOL(int rows, int depth, int cols, long long members,
    const float* __restrict__ w, const float* const* __restrict__ x, float* __restrict__ c, int accumulate) {
  __shared__ float w_tile[TILE][TILE + 1];  // [depth][row]
  __shared__ float x_tile[TILE][TILE + 1];  // [column][depth]
  const int tr = threadIdx.x, tc = threadIdx.y;  // tr varies fastest: rows of W and C, depth of X
  const long long row = (long long)blockIdx.x * TILE + tr;
  const long long total_cols = members * cols;
  for (long long col0 = (long long)blockIdx.y * TILE; col0 < total_cols; col0 += (long long)gridDim.y * TILE) {
    const long long col = col0 + tc;
    long long member = 0, within = 0;
    if (col < total_cols) { member = col / cols; within = col - member * cols; }
    float sum = 0.0f;
    for (int k0 = 0; k0 < depth; k0 += TILE) {
      w_tile[tc][tr] = (row < rows && k0 + tc < depth) ? w[(long long)(k0 + tc) * rows + row] : 0.0f;
      x_tile[tc][tr] = (col < total_cols && k0 + tr < depth) ? x[member][within * depth + k0 + tr] : 0.0f;
      __syncthreads();
      #pragma unroll
      for (int kk = 0; kk < TILE; ++kk) sum += w_tile[kk][tr] * x_tile[tc][kk];
      __syncthreads();
    }
    if (row < rows && col < total_cols) {
      float* out = c + col * rows + row;
      *out = accumulate ? *out + sum : sum;
    }
  }
}
)";
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = source.find(from); at != std::string::npos; at = source.find(from, at + to.size()))
      source.replace(at, from.size(), to);
  };
  replace_all("SYMBOL", symbol);
  replace_all("TILE", tile);
  return source;
}

std::string gemm_description() {
  // The source with a placeholder symbol: any change to the template changes every GEMM key.
  return "gemm fp32 tile " + std::to_string(kGemmTile) + "\n" + render_gemm("edb_gemm");
}

}  // namespace edb::nvrtc
