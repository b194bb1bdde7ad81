// The LLVM renderer of cell programs (jit/cell_program.h), for the LLVM backend's module pipeline.
// Internal to jit/: it names LLVM types.
#pragma once

#include <cstdint>
#include <string>

#include "jit/cell_program.h"

namespace llvm {
class Module;
}

namespace edb::jit {

// Vector registers of the host's vector width, and how many calls one register block of `stage`
// holds (its accumulators, one weight vector per block and a broadcast must fit).
int32_t cell_vector_registers();
int32_t cell_calls_per_block(const CellProgram::Stage& stage, int32_t registers);

// Defines `extern "C" void <symbol>(const CellArgs*)` in `module`.
void render_cell(llvm::Module& module, const CellProgram& program, const std::string& symbol);

}  // namespace edb::jit
