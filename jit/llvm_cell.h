// The LLVM renderer of cell programs (jit/cell_program.h), for the LLVM backend's module pipeline.
// Internal to jit/: it names LLVM types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/cell_program.h"

namespace llvm {
class Function;
class Module;
}

namespace edb::jit {

// The k loops of a stage's contractions: one per distinct x segment, which every contraction
// reading it (`members`, at its k offset `k_begin` in that contraction) accumulates in, sharing
// the segment's broadcasts. In the order of first use; each contraction's segments lie in passes
// in their own order (a segment read again after another starts a pass of its own).
struct CellPass {
  struct Member {
    int32_t contraction = 0;
    int64_t k_begin = 0;
  };
  CellProgram::Segment x;
  int32_t step = 1;  // the contraction's x_step
  std::vector<Member> members;
};
std::vector<CellPass> cell_passes(const CellProgram::Stage& stage);

// Vector registers of the host's vector width, and the register block of `stage`'s k loops: how
// many calls and row tiles one block holds, and how many weight vectors (row tiles of gate blocks)
// one k loop accumulates for each of the calls (`group`: group x calls accumulators, the group's
// weight vectors and a broadcast fit), for blocks of `row_tiles` row tiles (0: unknown).
int32_t cell_vector_registers();
struct CellBlocking {
  int32_t calls = 1;
  int32_t tiles = 1;
  int32_t group = 1;
};
CellBlocking cell_blocking(const CellProgram::Stage& stage, int32_t registers, int64_t row_tiles = 0);
// The widths of the k loops a pass of `vectors` weight vectors runs as, at most `group` each and
// about equal, the wider first.
std::vector<int32_t> cell_loop_widths(int32_t vectors, int32_t group);

// A column stage (CellProgram::Stage::steps) as `void stageN_columns(ptr shared, ptr pointers, i64
// calls)`: each call's steps in order (jit/llvm_cell_columns.cpp).
llvm::Function* render_column_stage(llvm::Module& module, const CellProgram& program, const CellProgram::Stage& stage,
                                    int index);

// Defines `extern "C" void <symbol>(const CellArgs*)` in `module`.
void render_cell(llvm::Module& module, const CellProgram& program, const std::string& symbol);

}  // namespace edb::jit
