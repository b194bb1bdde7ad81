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

// Vector registers of the host's vector width, and how many calls and row tiles one register
// block of `stage` holds (its accumulators, the weight vectors of a k step and a broadcast fit).
int32_t cell_vector_registers();
struct CellBlocking {
  int32_t calls = 1;
  int32_t tiles = 1;
};
CellBlocking cell_blocking(const CellProgram::Stage& stage, int32_t registers);

// Defines `extern "C" void <symbol>(const CellArgs*)` in `module`.
void render_cell(llvm::Module& module, const CellProgram& program, const std::string& symbol);

}  // namespace edb::jit
