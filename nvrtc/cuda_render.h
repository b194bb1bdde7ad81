// CUDA C for NVRTC from jit/'s kernel IR (one fused elementwise kernel), and the tiled fp32 batched
// GEMM. The sources include no header. Compiling is nvrtc_compiler.h's job, launching cuda_driver.h's.
#pragma once

#include <string>

#include "jit/cell_program.h"
#include "jit/kernel_ir.h"

namespace edb::nvrtc {

// `extern "C" __global__ void SYMBOL(long long members, long long elements,
//                                      const EdbKernelInput* inputs, float* const* outputs)`:
// jit::KernelArgs' fields, passed by value, with the input and output arrays in device memory
// (EdbKernelInput has jit::KernelInput's layout). One thread per element of members x elements, in
// a grid-stride loop; gathers are fused into the loads. Verifies the kernel first.
std::string render_kernel(const jit::Kernel& kernel, const std::string& symbol);

// A compiled cell (jit/cell_program.h): `extern "C" __global__ void SYMBOL(long long calls,
//     const float* const* shared, const float* const* weights, float* const* pointers)`, jit::CellArgs'
// fields by value. One block per call (grid-stride), its threads over the rows; stages apart by
// __syncthreads. Weights packed by jit::pack_weight with `vector` floats per row tile.
std::string render_cell(const jit::CellProgram& program, const std::string& symbol, int vector = 32);

// The batched GEMM, C (+)= W * [X_0 X_1 ... X_{members-1}], everything column-major:
// `extern "C" __global__ void SYMBOL(int rows, int depth, int cols, long long members,
//     const float* w, const float* const* x, float* c, int accumulate)`
// W is rows x depth; member m's X is depth x cols at x[m] (the gather is fused into the tile
// loads); C is rows x (members * cols). accumulate = 0 overwrites C, 1 adds to it. Launch with
// blocks of kGemmTile x kGemmTile threads and a grid of ceil(rows / tile) x (up to 65535) blocks;
// the kernel walks column tiles beyond gridDim.y itself.
inline constexpr int kGemmTile = 16;
std::string render_gemm(const std::string& symbol);
// The GEMM's canonical description, the text its cache key is made of (changes with its source).
std::string gemm_description();

}  // namespace edb::nvrtc
