// CellProgram -> LLVM IR: per stage, a loop over row tiles (one vector of each block) and, inside,
// over register blocks of calls. A block's k loops each keep a few weight vectors' accumulators for
// every call of the block in registers (as many as the ISA's registers hold: jit::cell_blocking)
// while they stream the tile's packed weights and broadcast each call's x element (read through the
// call's pointer); between loops the accumulators lie in a stack buffer, from which the stage's one
// epilogue runs the stage body, two calls at a time, and stores. A stage of several columns runs
// each column of each call as a unit of its own (a call's pointers moved by the column's stride).
#include "jit/llvm_cell.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <numeric>
#include <tuple>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>

#include "ir/isa.h"
#include "jit/llvm_backend.h"
#include "jit/llvm_math.h"

namespace edb::jit {

static_assert(offsetof(CellArgs, calls) == 0 && offsetof(CellArgs, shared) == 8 && offsetof(CellArgs, weights) == 16 &&
              offsetof(CellArgs, pointers) == 24 && offsetof(CellArgs, tile_begin) == 32 &&
              offsetof(CellArgs, tile_end) == 40);

int32_t cell_vector_floats() { return ir::vector_floats(ir::selected_isa()); }

int32_t cell_vector_registers() { return ir::vector_registers(ir::selected_isa()); }

int64_t cell_tiles(const CellProgram& program) { return (program.rows + cell_vector_floats() - 1) / cell_vector_floats(); }

int64_t cell_tile_step(const CellProgram& program) {
  const int64_t tiles = cell_tiles(program);
  int64_t step = 1;
  for (const CellProgram::Stage& stage : program.stages) {
    if (!stage.steps.empty()) continue;  // a column stage runs whole columns
    const int64_t per_block = std::min<int64_t>(cell_blocking(stage, cell_vector_registers(), tiles).tiles, tiles);
    step = std::lcm(step, per_block);
  }
  return step;
}

std::vector<CellPass> cell_passes(const CellProgram::Stage& stage) {
  std::vector<CellPass> passes;
  for (size_t c = 0; c < stage.contractions.size(); ++c) {
    if (stage.contractions[c].transposed) continue;  // dot products of its own (CellRenderer::dots)
    int64_t k_begin = 0;
    size_t after = 0;  // a contraction's segments go to passes in their order: its sums add k in order
    for (const CellProgram::Segment& x : stage.contractions[c].x) {
      auto same = [&](const CellPass& pass) {
        return pass.x.operand.slot == x.operand.slot && pass.x.operand.shared == x.operand.shared &&
               pass.x.operand.stride == x.operand.stride && pass.x.row == x.row && pass.x.rows == x.rows &&
               pass.step == stage.contractions[c].x_step;
      };
      auto pass = std::find_if(passes.begin() + std::ptrdiff_t(after), passes.end(), same);
      if (pass == passes.end()) pass = passes.insert(passes.end(), CellPass{x, stage.contractions[c].x_step, {}});
      pass->members.push_back({int32_t(c), k_begin});
      after = size_t(pass - passes.begin()) + 1;
      k_begin += x.rows;
    }
  }
  return passes;
}

std::vector<int32_t> cell_loop_widths(int32_t vectors, int32_t group) {
  const int32_t loops = std::max(1, (vectors + group - 1) / group);
  std::vector<int32_t> widths(size_t(loops), vectors / loops);
  for (int32_t i = 0; i < vectors % loops; ++i) ++widths[size_t(i)];
  return widths;
}

CellBlocking cell_blocking(const CellProgram::Stage& stage, int32_t registers, int64_t row_tiles) {
  std::vector<int32_t> pass_blocks;  // the weight vectors of one row tile of each pass
  for (const CellPass& pass : cell_passes(stage)) {
    int32_t blocks = 0;
    for (const CellPass::Member& member : pass.members) blocks += stage.contractions[size_t(member.contraction)].blocks;
    pass_blocks.push_back(blocks);
  }
  const int32_t widest = pass_blocks.empty() ? 0 : *std::max_element(pass_blocks.begin(), pass_blocks.end());
  if (widest == 0) {  // no contraction, or only transposed ones (dot products, no register block)
    int32_t accumulators = 0;
    for (const CellProgram::Contraction& c : stage.contractions) accumulators += c.blocks;
    if (accumulators > 0) return {std::clamp((registers - 2) / accumulators, 1, 8), 1, 1};
    // An elementwise stage (a backward body's first, as a rule) runs two row tiles a call where
    // one vector is half a 64-byte line (AVX2) and the rows are whole pairs of tiles, so that it
    // writes its frames' lines whole: a tile at a time, a line's second half came a whole pass
    // over the calls later, the line read for ownership again once the batch's frames outgrew the
    // cache. TreeLSTM training under EDB_ISA=avx2: the backward cells' first-stage epilogues
    // 0.79x (leaf) and 0.90x (internal) of their samples. Not more than two tiles: the epilogue
    // interleaves every tile of a call, and four would spill on SSE2's 16 registers.
    const int32_t line_tiles = std::clamp(64 / (cell_vector_floats() * 4), 1, 2);
    return {4, row_tiles > 0 && row_tiles % line_tiles == 0 ? line_tiles : 1, 1};
  }
  // A k loop accumulates up to `group` weight vectors (row tiles of gate blocks) for each of
  // `calls` calls: vectors x calls accumulators, the vectors and a broadcast in registers. Two
  // vectors of six calls on 16 registers (as the weight-gradient kernel's 16x6 tile on AVX2), four
  // of six on 32. A pass of more vectors runs k loops of about equal width (cell_loop_widths),
  // the accumulators kept in the block's buffer between loops.
  const int32_t group = std::max(1, registers / 8);
  // Row tiles per block: first, that no pass runs a k loop of one vector where two fit (it loads
  // as often as it multiplies, and on 16 registers its calls' accumulators are fewer than the FMA
  // pipes' latency needs: TreeLSTM's backward, passes of 1, 1 and 2 blocks, ran its one-block
  // passes so on AVX2); then that the widest pass's narrowest k loop holds about a group; then
  // tiles that cover the rows in whole blocks; then the fewest.
  const int32_t enough = (3 * group + 3) / 4;
  int32_t tiles = 1;
  std::tuple<int32_t, int32_t, bool, int32_t> best{-1, -1, false, 0};
  for (int32_t t = 1; t <= group && (row_tiles <= 0 || t <= row_tiles); ++t) {
    int32_t narrowest = group;
    for (int32_t blocks : pass_blocks) narrowest = std::min(narrowest, cell_loop_widths(t * blocks, group).back());
    const std::tuple<int32_t, int32_t, bool, int32_t> score{std::min(narrowest, 2),
                                                            std::min(cell_loop_widths(t * widest, group).back(), enough),
                                                            row_tiles <= 0 || row_tiles % t == 0, -t};
    if (score > best) best = score, tiles = t;
  }
  const int32_t size = cell_loop_widths(tiles * widest, group).front();
  return {std::clamp((registers - size - 2) / size, 1, 8), tiles, size};
}

namespace {

class CellRenderer {
 public:
  CellRenderer(llvm::Module& module, const CellProgram& program)
      : module_(module), program_(program), b_(module.getContext()), vector_(cell_vector_floats()),
        f32_(b_.getFloatTy()), i64_(b_.getInt64Ty()), ptr_(b_.getPtrTy()),
        vf_(llvm::FixedVectorType::get(f32_, unsigned(vector_))) {}

  void render(const std::string& symbol) {
    auto* function = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr_}, false),
                                            llvm::Function::ExternalLinkage, symbol, module_);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    MathEmitter::allow_reciprocal_estimates(*function);
    auto* entry = llvm::BasicBlock::Create(context(), "entry", function);
    b_.SetInsertPoint(entry);
    llvm::Value* args = function->getArg(0);
    calls_ = load_field(args, offsetof(CellArgs, calls), i64_);
    shared_ = load_field(args, offsetof(CellArgs, shared), ptr_);
    weights_ = load_field(args, offsetof(CellArgs, weights), ptr_);
    pointers_ = load_field(args, offsetof(CellArgs, pointers), ptr_);
    tile_begin_ = load_field(args, offsetof(CellArgs, tile_begin), i64_);
    llvm::Value* tile_end = load_field(args, offsetof(CellArgs, tile_end), i64_);
    const int64_t tiles = (program_.rows + vector_ - 1) / vector_;
    tile_end_ = b_.CreateSelect(b_.CreateICmpSLT(tile_end, b_.getInt64(0)), b_.getInt64(uint64_t(tiles)), tile_end);
    for (size_t s = 0; s < program_.stages.size(); ++s) {
      const CellProgram::Stage& stage = program_.stages[s];
      if (stage.steps.empty()) this->stage(function, stage, int(s));
      else b_.CreateCall(render_column_stage(module_, program_, stage, int(s)), {shared_, pointers_, calls_});
    }
    b_.CreateRetVoid();
  }

 private:
  llvm::LLVMContext& context() { return module_.getContext(); }
  llvm::Value* load_field(llvm::Value* base, int64_t byte_offset, llvm::Type* type) {
    return b_.CreateLoad(type, b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), base, uint64_t(byte_offset)));
  }

  // for (i = begin; i < end; i += step) body(i): a counted loop at the insert point; leaves the
  // insert point after it.
  template <typename Body>
  void counted_loop(llvm::Function* function, llvm::Value* begin, llvm::Value* end, int64_t step, const char* name,
                    Body&& body) {
    llvm::BasicBlock* before = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(context(), name, function);
    auto* exit = llvm::BasicBlock::Create(context(), std::string(name) + ".exit", function);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), loop, exit);
    b_.SetInsertPoint(loop);
    llvm::PHINode* i = b_.CreatePHI(i64_, 2, name);
    i->addIncoming(begin, before);
    body(static_cast<llvm::Value*>(i));
    llvm::Value* next = b_.CreateNSWAdd(i, b_.getInt64(step));
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, end), loop, exit);
    b_.SetInsertPoint(exit);
  }

  void stage(llvm::Function* function, const CellProgram::Stage& stage, int index) {
    columns_ = stage.columns;
    llvm::Value* units = stage.columns == 1 ? calls_ : b_.CreateMul(calls_, b_.getInt64(uint64_t(stage.columns)));
    const int64_t tiles = (program_.rows + vector_ - 1) / vector_;
    const CellBlocking blocking = cell_blocking(stage, cell_vector_registers(), tiles);
    group_ = blocking.group;
    const int32_t tiles_per_block = int32_t(std::min<int64_t>(blocking.tiles, tiles));
    const int64_t whole_tiles = tiles / tiles_per_block * tiles_per_block;
    const std::string prefix = "stage" + std::to_string(index);
    // Register blocks of tiles_per_block row tiles, then single tiles for the rest of the rows;
    // within [tile_begin, tile_end), which begins at a multiple of tiles_per_block (cell_tile_step).
    // Blocks of tiles wholly inside the rows load and store without masks; only those holding the
    // last, partial tile (rows not a multiple of the vector) take the masked variant.
    struct Variant {
      int32_t tiles;
      bool masked;
      llvm::Value *begin, *end;
    };
    auto smaller = [&](llvm::Value* a, llvm::Value* b) { return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b); };
    auto larger = [&](llvm::Value* a, llvm::Value* b) { return b_.CreateSelect(b_.CreateICmpSGT(a, b), a, b); };
    const int64_t full_tiles = program_.rows / vector_;  // tiles with every lane inside the rows
    const int64_t unmasked_blocks_end = std::min(whole_tiles, full_tiles / tiles_per_block * tiles_per_block);
    std::vector<Variant> variants;
    auto add = [&](int32_t tiles_each, bool masked, int64_t from, int64_t to) {
      if (from >= to) return;
      variants.push_back({tiles_each, masked, larger(tile_begin_, b_.getInt64(uint64_t(from))),
                          smaller(tile_end_, b_.getInt64(uint64_t(to)))});
    };
    add(tiles_per_block, false, 0, unmasked_blocks_end);
    add(tiles_per_block, true, unmasked_blocks_end, whole_tiles);
    add(1, false, whole_tiles, std::max(whole_tiles, full_tiles));
    add(1, true, std::max(whole_tiles, full_tiles), tiles);
    for (const Variant& variant : variants) {
      // Block functions of `calls` calls, and of each power of two below it for the rest (the
      // last calls % calls run as, say, 4 + 2 + 1): few variants keep compiling short.
      llvm::Function* wide = block_function(stage, index, blocking.calls, variant.tiles, variant.masked);
      std::vector<std::pair<int32_t, llvm::Function*>> narrow;  // widest first
      for (int32_t width = 1; width < blocking.calls; width *= 2)
        narrow.emplace(narrow.begin(), width, block_function(stage, index, width, variant.tiles, variant.masked));
      counted_loop(function, variant.begin, variant.end, variant.tiles, (prefix + ".tiles").c_str(), [&](llvm::Value* tile) {
        llvm::Value* whole = b_.CreateMul(b_.CreateSDiv(units, b_.getInt64(blocking.calls)), b_.getInt64(blocking.calls));
        counted_loop(function, b_.getInt64(0), whole, blocking.calls, (prefix + ".blocks").c_str(), [&](llvm::Value* j) {
          b_.CreateCall(wide, {shared_, weights_, pointers_, tile, j});
        });
        llvm::Value* next = whole;
        for (const auto& [width, block] : narrow) {
          // while fewer than a block of calls are left, take `width` of them if that many are.
          auto* take = llvm::BasicBlock::Create(context(), prefix + ".rest" + std::to_string(width), function);
          auto* after = llvm::BasicBlock::Create(context(), prefix + ".rest" + std::to_string(width) + ".done", function);
          llvm::BasicBlock* before = b_.GetInsertBlock();
          b_.CreateCondBr(b_.CreateICmpSGE(b_.CreateSub(units, next), b_.getInt64(width)), take, after);
          b_.SetInsertPoint(take);
          b_.CreateCall(block, {shared_, weights_, pointers_, tile, next});
          llvm::Value* taken = b_.CreateAdd(next, b_.getInt64(width));
          b_.CreateBr(after);
          b_.SetInsertPoint(after);
          llvm::PHINode* phi = b_.CreatePHI(i64_, 2);
          phi->addIncoming(next, before);
          phi->addIncoming(taken, take);
          next = phi;
        }
      });
    }
  }

  // void block(ptr shared, ptr weights, ptr pointers, i64 tile, i64 first_call): `calls` calls of
  // `tiles` row tiles (from `tile` on) of one stage; `masked` when they may hold the partial tile.
  llvm::Function* block_function(const CellProgram::Stage& stage, int index, int32_t calls, int32_t tiles, bool masked) {
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, ptr_, i64_, i64_}, false);
    auto* function = llvm::Function::Create(type, llvm::Function::InternalLinkage,
                                            "stage" + std::to_string(index) + "_x" + std::to_string(calls) + "_t" +
                                                std::to_string(tiles) + (masked ? "_masked" : ""),
                                            module_);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    function->addFnAttr(llvm::Attribute::AlwaysInline);
    MathEmitter::allow_reciprocal_estimates(*function);
    const llvm::IRBuilderBase::InsertPoint saved = b_.saveIP();
    b_.SetInsertPoint(llvm::BasicBlock::Create(context(), "entry", function));
    Block block{function->getArg(0), function->getArg(1), function->getArg(2), function->getArg(3), function->getArg(4),
                calls, tiles, masked, {}, {}, {}, {}};
    // Per tile: its first row inside a block, and the lanes whose row is inside it (the last tile
    // may be partial).
    tile_rows(block);
    for (int32_t j = 0; j < calls; ++j) unit(block, b_.CreateAdd(block.first_call, b_.getInt64(uint64_t(j))));
    if (!stage.contractions.empty()) prefetch_epilogue(stage, block);  // else nothing would hide the wait
    // The accumulators live in a stack buffer, [contraction block][tile][call], between k loops,
    // and one epilogue per stage and tile count runs the stage body call by call from there: one
    // copy of the body's code instead of one per (tile, call) of every block width, which was most
    // of a cell kernel's code and of its compile time.
    const std::vector<int32_t> first = first_blocks(stage);
    const int32_t accumulator_blocks = first.back();
    llvm::Value* buffer = llvm::ConstantPointerNull::get(llvm::PointerType::get(context(), 0));
    if (accumulator_blocks > 0) {
      llvm::IRBuilderBase::InsertPointGuard guard(b_);
      llvm::BasicBlock& entry = function->getEntryBlock();
      b_.SetInsertPoint(&entry, entry.getFirstInsertionPt());
      auto* alloca = b_.CreateAlloca(llvm::ArrayType::get(vf_, uint64_t(accumulator_blocks) * uint64_t(block.pairs())));
      alloca->setAlignment(llvm::Align(size_t(vector_) * 4));
      buffer = alloca;
    }
    contract(function, block, stage, Buffer{*this, buffer, first, block.pairs(), calls});
    b_.CreateCall(epilogue_function(stage, index, tiles, masked),
                  {block.shared, block.pointers, block.tile, block.first_call, b_.getInt64(uint64_t(calls)), buffer});
    b_.CreateRetVoid();
    b_.restoreIP(saved);
    return function;
  }

  // A block's accumulators in its stack buffer: contraction c's block g, tile u, call j at
  // (B_c + g) * pairs + u * calls + j (B_c: first_blocks).
  struct Buffer {
    CellRenderer& r;
    llvm::Value* data;
    const std::vector<int32_t>& first;
    int32_t pairs, calls;
    llvm::Value* at(size_t c, int32_t g, int32_t u, int32_t j) const {
      return r.b_.CreateConstInBoundsGEP1_64(r.vf_, data, uint64_t((first[c] + g) * pairs + u * calls + j));
    }
    llvm::Value* load(size_t c, int32_t g, int32_t u, int32_t j) const {
      return r.b_.CreateAlignedLoad(r.vf_, at(c, g, u, j), llvm::Align(size_t(r.vector_) * 4));
    }
    void store(size_t c, int32_t g, int32_t u, int32_t j, llvm::Value* value) const {
      r.b_.CreateAlignedStore(value, at(c, g, u, j), llvm::Align(size_t(r.vector_) * 4));
    }
  };

  // Per contraction c, B_c: the accumulator blocks of the contractions before it; last, all of them.
  static std::vector<int32_t> first_blocks(const CellProgram::Stage& stage) {
    std::vector<int32_t> first{0};
    for (const CellProgram::Contraction& c : stage.contractions) first.push_back(first.back() + c.blocks);
    return first;
  }

  // The table of pointers of call `call` (an i64).
  llvm::Value* call_table(llvm::Value* pointers, llvm::Value* call) {
    return b_.CreateInBoundsGEP(ptr_, pointers, b_.CreateMul(call, b_.getInt64(uint64_t(program_.call_slots))));
  }

  // void epilogue(ptr shared, ptr pointers, i64 tile, i64 first_call, i64 calls, ptr accumulators):
  // the stage body over `tiles` row tiles (from `tile` on) of calls [first_call, first_call +
  // calls), reading contraction c's block g for tile u and call j at accumulators[(B_c + g) *
  // tiles * calls + u * calls + j] (B_c: the blocks of the contractions before c), and storing.
  llvm::Function* epilogue_function(const CellProgram::Stage& stage, int index, int32_t tiles, bool masked) {
    llvm::Function*& cached = epilogues_[{index, tiles, masked}];
    if (cached) return cached;
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, i64_, i64_, i64_, ptr_}, false);
    auto* function = llvm::Function::Create(
        type, llvm::Function::InternalLinkage,
        "stage" + std::to_string(index) + "_epilogue_t" + std::to_string(tiles) + (masked ? "_masked" : ""), module_);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    function->addFnAttr(llvm::Attribute::NoInline);  // shared by every block width
    MathEmitter::allow_reciprocal_estimates(*function);
    cached = function;
    const llvm::IRBuilderBase::InsertPoint saved = b_.saveIP();
    b_.SetInsertPoint(llvm::BasicBlock::Create(context(), "entry", function));
    Block block{function->getArg(0), nullptr, function->getArg(1), function->getArg(2), function->getArg(3),
                1, tiles, masked, {}, {}, {}, {}};
    llvm::Value* calls = function->getArg(4);
    llvm::Value* buffer = function->getArg(5);
    tile_rows(block);
    llvm::Value* pairs = b_.CreateMul(calls, b_.getInt64(uint64_t(tiles)));
    const std::vector<int32_t> first_block = first_blocks(stage);
    // The body of calls [j, j + group), their instructions interleaved.
    auto body = [&](llvm::Value* j, int32_t group) {
      block.call_table.clear();
      block.column.clear();
      for (int32_t g = 0; g < group; ++g) unit(block, b_.CreateAdd(block.first_call, b_.CreateAdd(j, b_.getInt64(uint64_t(g)))));
      MathEmitter math(b_, vf_);
      // Every (tile, call) pair of the group, their instructions interleaved: the tiles of one
      // call too (they ran one after the other, so a block of two tiles and one call, TreeLSTM's
      // leaf under AVX2, ran one chain at a time: 8.9 cycles a tile and call in llvm-mca's Zen 4
      // model, 7.1 interleaved).
      std::vector<std::pair<int32_t, int32_t>> units;  // (tile, call in the group)
      for (int32_t u = 0; u < tiles; ++u)
        for (int32_t g = 0; g < group; ++g) units.push_back({u, g});
      std::vector<std::vector<llvm::Value*>> values(units.size(), std::vector<llvm::Value*>(stage.body.size()));
      for (size_t i = 0; i < stage.body.size(); ++i) {
        const CellProgram::Instruction& in = stage.body[i];
        for (size_t p = 0; p < units.size(); ++p) {
          const auto [u, g] = units[p];
          llvm::Value*& value = values[p][i];
          switch (in.kind) {
            case CellProgram::Instruction::load:
              value = load_tile(block, u, operand_pointer(block, in.operand, g), int64_t(in.block) * program_.rows);
              break;
            case CellProgram::Instruction::accumulator: {
              llvm::Value* q = b_.CreateAdd(b_.CreateMul(b_.getInt64(uint64_t(u)), calls), b_.CreateAdd(j, b_.getInt64(uint64_t(g))));
              llvm::Value* at = b_.CreateAdd(
                  b_.CreateMul(b_.getInt64(uint64_t(first_block[size_t(in.contraction)] + in.block)), pairs), q);
              value = b_.CreateAlignedLoad(vf_, b_.CreateInBoundsGEP(vf_, buffer, at), llvm::Align(size_t(vector_) * 4));
              break;
            }
            case CellProgram::Instruction::compute:
              value = math.op(in.op, values[p][size_t(in.a)], in.b >= 0 ? values[p][size_t(in.b)] : nullptr, in.constant);
              break;
          }
        }
      }
      for (size_t p = 0; p < units.size(); ++p) {
        const auto [u, g] = units[p];
        for (const CellProgram::Store& store : stage.stores) {
          llvm::Value* base = operand_pointer(block, store.operand, g);
          llvm::Value* at = b_.CreateInBoundsGEP(
              f32_, base, b_.CreateAdd(block.row[size_t(u)], b_.getInt64(uint64_t(int64_t(store.block) * program_.rows))));
          b_.CreateMaskedStore(values[p][size_t(store.value)], at, llvm::Align(4), block.mask[size_t(u)]);
        }
      }
    };
    // Two calls at a time where a block is one tile: the body is a chain of dependent steps
    // (exp, a division, exp again), and one call's chain alone left the vector units waiting.
    const int32_t group = tiles == 1 ? 2 : 1;
    llvm::Value* whole = group == 1 ? calls : b_.CreateMul(b_.CreateSDiv(calls, b_.getInt64(uint64_t(group))), b_.getInt64(uint64_t(group)));
    counted_loop(function, b_.getInt64(0), whole, group, "call", [&](llvm::Value* j) { body(j, group); });
    if (group > 1) counted_loop(function, whole, calls, 1, "call.rest", [&](llvm::Value* j) { body(j, 1); });
    b_.CreateRetVoid();
    b_.restoreIP(saved);
    return function;
  }

  struct Block {
    llvm::Value *shared, *weights, *pointers, *tile, *first_call;
    int32_t calls, tiles;
    bool masked;                     // the tiles may hold the last, partial one
    std::vector<llvm::Value*> row;   // per tile: its first row inside a block
    std::vector<llvm::Value*> mask;  // per tile: lanes inside the block
    std::vector<llvm::Value*> call_table;  // per call: its pointer table
    std::vector<llvm::Value*> column;      // per call: its column (an i64), or null in a stage of one
    // The (tile, call) pairs of a block, q = tile * calls + call.
    int32_t pairs() const { return calls * tiles; }
  };
  // Adds unit `unit` (an i64) to the block: its call's pointer table and its column (unit = call *
  // columns + column).
  void unit(Block& block, llvm::Value* unit) {
    if (columns_ == 1) {
      block.call_table.push_back(call_table(block.pointers, unit));
      block.column.push_back(nullptr);
      return;
    }
    llvm::Value* columns = b_.getInt64(uint64_t(columns_));
    block.call_table.push_back(call_table(block.pointers, b_.CreateUDiv(unit, columns)));
    block.column.push_back(b_.CreateURem(unit, columns));
  }

  // [block of the contraction][tile * calls + call]
  using Accumulators = std::vector<std::vector<llvm::Value*>>;

  // Prefetches the lines the block's epilogue reads (its per-call loads) and writes (its stores),
  // for every call and tile of the block, so that they arrive while the contractions run: in a
  // training forward pass the frames hold many values, written to lines no cache holds, and the
  // epilogue waited for each (in treelstm_internal, the loads of the children's cells and the
  // stores' reads for ownership took most of the epilogue's samples).
  void prefetch_epilogue(const CellProgram::Stage& stage, const Block& block) {
    llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(&module_, llvm::Intrinsic::prefetch, {ptr_});
    auto line = [&](const CellProgram::Operand& operand, int32_t j, int32_t u, int64_t row0, bool write) {
      llvm::Value* base = operand_pointer(block, operand, j);
      llvm::Value* at =
          b_.CreateInBoundsGEP(f32_, base, b_.CreateAdd(block.row[size_t(u)], b_.getInt64(uint64_t(row0))));
      b_.CreateCall(prefetch, {at, b_.getInt32(write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
    };
    for (int32_t j = 0; j < block.calls; ++j)
      for (int32_t u = 0; u < block.tiles; ++u) {
        for (const CellProgram::Instruction& in : stage.body)
          if (in.kind == CellProgram::Instruction::load && !in.operand.shared)
            line(in.operand, j, u, int64_t(in.block) * program_.rows, false);
        for (const CellProgram::Store& store : stage.stores)
          line(store.operand, j, u, int64_t(store.block) * program_.rows, true);
      }
  }

  // Per tile of the block: its first row, and the lanes whose row is inside the block.
  void tile_rows(Block& block) {
    std::vector<llvm::Constant*> lanes;
    for (int32_t l = 0; l < vector_; ++l) lanes.push_back(b_.getInt64(uint64_t(l)));
    for (int32_t u = 0; u < block.tiles; ++u) {
      llvm::Value* row = b_.CreateMul(b_.CreateAdd(block.tile, b_.getInt64(uint64_t(u))), b_.getInt64(uint64_t(vector_)));
      block.row.push_back(row);
      // Tiles wholly inside the rows: the masked loads and stores fold to plain ones (AVX2's
      // vmaskmovps store is many times the cost of a store on AMD's cores).
      if (!block.masked || program_.rows % vector_ == 0) {
        block.mask.push_back(llvm::ConstantInt::getTrue(llvm::FixedVectorType::get(b_.getInt1Ty(), unsigned(vector_))));
        continue;
      }
      llvm::Value* rows = b_.CreateAdd(b_.CreateVectorSplat(unsigned(vector_), row), llvm::ConstantVector::get(lanes));
      block.mask.push_back(b_.CreateICmpSLT(rows, b_.CreateVectorSplat(unsigned(vector_), b_.getInt64(uint64_t(program_.rows)))));
    }
  }

  // The float pointer of an operand for call j (at its column's values in a stage of several).
  llvm::Value* operand_pointer(const Block& block, const CellProgram::Operand& operand, int32_t j) {
    llvm::Value* table = operand.shared ? block.shared : block.call_table[size_t(j)];
    llvm::Value* base = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, table, uint64_t(operand.slot)));
    llvm::Value* column = block.column[size_t(j)];
    if (!column || operand.stride == 0) return base;
    return b_.CreateInBoundsGEP(f32_, base, b_.CreateMul(column, b_.getInt64(uint64_t(operand.stride))));
  }
  // Rows [row0 + tile u's row, + vector) of an operand, lanes outside the block zero.
  llvm::Value* load_tile(const Block& block, int32_t u, llvm::Value* base, int64_t row0) {
    llvm::Value* at = b_.CreateInBoundsGEP(f32_, base, b_.CreateAdd(block.row[size_t(u)], b_.getInt64(uint64_t(row0))));
    return b_.CreateMaskedLoad(vf_, at, llvm::Align(4), block.mask[size_t(u)], llvm::Constant::getNullValue(vf_));
  }

  // Loop metadata: the k loop carries blocks x calls FMAs already; unrolling it only grows code.
  llvm::MDNode* no_unrolling() {
    llvm::LLVMContext& c = context();
    llvm::Metadata* disable = llvm::MDNode::get(c, llvm::MDString::get(c, "llvm.loop.unroll.disable"));
    llvm::MDNode* self = llvm::MDNode::getDistinct(c, {nullptr, disable});
    self->replaceOperandWith(0, self);
    return self;
  }

  // acc_c = bias_c + W_c x_c for every contraction c of the stage over the block's tiles, each
  // packed tile streamed once for all its calls, in k loops per pass (jit::cell_passes): the
  // contractions that read the same x segment share its broadcasts, so a one-block contraction
  // beside a wider one (TreeLSTM's forget gates) is no longer a loop that loads as often as it
  // multiplies. A pass's weight vectors (member, tile, block) go to k loops of at most group_
  // (CellBlocking::group, cell_loop_widths; more in a block of fewer calls), each loop's
  // accumulators taken from the buffer (at a contraction's first pass, its bias) and left there
  // after it. Each accumulator sums its k in the same order as a loop per contraction would.
  void contract(llvm::Function* function, const Block& block, const CellProgram::Stage& stage, const Buffer& buffer) {
    std::vector<llvm::Value*> packed;    // per contraction: its packed weight at the block's tile
    std::vector<uint64_t> tile_floats;   // per contraction: floats of one packed row tile
    for (const CellProgram::Contraction& c : stage.contractions) {
      int64_t k_total = 0;
      for (const CellProgram::Segment& x : c.x) k_total += x.rows;
      tile_floats.push_back(uint64_t(k_total * c.blocks * vector_));
      if (c.has_matrix) {  // read in place, call by call
        packed.push_back(nullptr);
        continue;
      }
      llvm::Value* weight = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, block.weights, uint64_t(c.weight)));
      packed.push_back(b_.CreateInBoundsGEP(f32_, weight, b_.CreateMul(block.tile, b_.getInt64(tile_floats.back()))));
    }
    // A block of fewer calls than the stage's (the rest of a batch) takes more vectors a loop, as
    // many as its registers hold: 2 vectors of one call would be 2 chains of dependent FMAs.
    const int32_t group = std::max(group_, (cell_vector_registers() - 2) / (block.calls + 1));
    // A contraction's accumulator before its first k step: its bias (or zero), then where the
    // last k loop left it.
    std::vector<bool> started(stage.contractions.size(), false);
    auto initial = [&](size_t c, int32_t g, int32_t u, int32_t j) -> llvm::Value* {
      if (started[c]) return buffer.load(c, g, u, j);
      const CellProgram::Contraction& contraction = stage.contractions[c];
      if (!contraction.has_bias) return llvm::Constant::getNullValue(vf_);
      return load_tile(block, u, operand_pointer(block, contraction.bias.operand, j),
                       contraction.bias.row + int64_t(g) * program_.rows);
    };
    for (const CellPass& pass : cell_passes(stage)) {
      std::vector<llvm::Value*> xs;
      for (int32_t j = 0; j < block.calls; ++j)
        xs.push_back(b_.CreateConstInBoundsGEP1_64(f32_, operand_pointer(block, pass.x.operand, j), uint64_t(pass.x.row)));
      struct Vector {
        size_t member;
        int32_t tile, block;
      };
      std::vector<Vector> vectors;
      for (size_t i = 0; i < pass.members.size(); ++i)
        for (int32_t u = 0; u < block.tiles; ++u)
          for (int32_t g = 0; g < stage.contractions[size_t(pass.members[i].contraction)].blocks; ++g)
            vectors.push_back({i, u, g});
      size_t first = 0;
      for (int32_t width : cell_loop_widths(int32_t(vectors.size()), group)) {
        const std::vector<Vector> loop_vectors(vectors.begin() + std::ptrdiff_t(first),
                                               vectors.begin() + std::ptrdiff_t(first + size_t(width)));
        k_loop(function, block, stage, pass, xs, packed, tile_floats, loop_vectors, initial, buffer);
        first += size_t(width);
      }
      for (const CellPass::Member& m : pass.members) started[size_t(m.contraction)] = true;
    }
    for (size_t c = 0; c < stage.contractions.size(); ++c) {
      if (!stage.contractions[c].transposed) continue;
      Accumulators acc(size_t(stage.contractions[c].blocks), std::vector<llvm::Value*>(size_t(block.pairs())));
      for (int32_t g = 0; g < stage.contractions[c].blocks; ++g)
        for (int32_t u = 0; u < block.tiles; ++u)
          for (int32_t j = 0; j < block.calls; ++j) acc[size_t(g)][size_t(u * block.calls + j)] = initial(c, g, u, j);
      dots(function, block, stage.contractions[c], acc);
      for (int32_t g = 0; g < stage.contractions[c].blocks; ++g)
        for (int32_t u = 0; u < block.tiles; ++u)
          for (int32_t j = 0; j < block.calls; ++j) buffer.store(c, g, u, j, acc[size_t(g)][size_t(u * block.calls + j)]);
    }
  }

  // One k loop of a pass over `vectors` (of its members' weight vectors) for every call of the
  // block: its accumulators start from initial(c, g, u, j), are carried in phis, and go to the
  // buffer.
  template <typename Vector, typename Initial>
  void k_loop(llvm::Function* function, const Block& block, const CellProgram::Stage& stage, const CellPass& pass,
              const std::vector<llvm::Value*>& xs, const std::vector<llvm::Value*>& packed,
              const std::vector<uint64_t>& tile_floats, const std::vector<Vector>& vectors, Initial&& initial,
              const Buffer& buffer) {
    const size_t calls = size_t(block.calls);
    auto contraction_of = [&](const Vector& v) { return size_t(pass.members[v.member].contraction); };
    std::vector<llvm::Value*> start;  // [vector * calls + call]
    for (const Vector& v : vectors)
      for (int32_t j = 0; j < block.calls; ++j) start.push_back(initial(contraction_of(v), v.block, v.tile, j));
    // Per vector: its packed weight's segment (k = 0), or null for a per-call matrix, whose
    // columns (k_begin on) are per call.
    std::vector<llvm::Value*> w_segment;
    std::vector<std::vector<llvm::Value*>> matrices;
    for (const Vector& v : vectors) {
      const CellPass::Member& m = pass.members[v.member];
      const CellProgram::Contraction& c = stage.contractions[contraction_of(v)];
      matrices.emplace_back();
      if (c.has_matrix) {
        w_segment.push_back(nullptr);
        for (int32_t j = 0; j < block.calls; ++j)
          matrices.back().push_back(b_.CreateConstInBoundsGEP1_64(
              f32_, operand_pointer(block, c.matrix.operand, j), uint64_t(c.matrix.row + m.k_begin * c.leading)));
        continue;
      }
      w_segment.push_back(b_.CreateConstInBoundsGEP1_64(
          f32_, packed[contraction_of(v)],
          uint64_t(m.k_begin * c.blocks * vector_) + uint64_t(v.tile) * tile_floats[contraction_of(v)] + uint64_t(v.block * vector_)));
    }
    llvm::BasicBlock* before = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(context(), "k", function);
    auto* exit = llvm::BasicBlock::Create(context(), "k.exit", function);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* k = b_.CreatePHI(i64_, 2, "k");
    k->addIncoming(b_.getInt64(0), before);
    std::vector<llvm::PHINode*> phis;
    for (llvm::Value* value : start) {
      phis.push_back(b_.CreatePHI(vf_, 2));
      phis.back()->addIncoming(value, before);
    }
    std::vector<llvm::Value*> ws;  // per vector: its weight at k, or null (a per-call matrix)
    for (size_t v = 0; v < vectors.size(); ++v) {
      if (!w_segment[v]) {
        ws.push_back(nullptr);
        continue;
      }
      const int32_t blocks = stage.contractions[contraction_of(vectors[v])].blocks;
      ws.push_back(b_.CreateAlignedLoad(
          vf_, b_.CreateInBoundsGEP(f32_, w_segment[v], b_.CreateMul(k, b_.getInt64(uint64_t(blocks * vector_)))),
          llvm::Align(size_t(vector_) * 4)));
    }
    std::vector<llvm::Value*> next_values(phis.begin(), phis.end());
    for (int32_t j = 0; j < block.calls; ++j) {
      llvm::Value* at = pass.step == 1 ? k : b_.CreateMul(k, b_.getInt64(uint64_t(pass.step)));
      llvm::Value* element = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, xs[size_t(j)], at));
      llvm::Value* broadcast = b_.CreateVectorSplat(unsigned(vector_), element);
      for (size_t v = 0; v < vectors.size(); ++v) {
        llvm::Value* w = ws[v];
        if (!w) {  // a per-call matrix: this call's column k, block by block (no reuse across calls)
          const CellProgram::Contraction& c = stage.contractions[contraction_of(vectors[v])];
          llvm::Value* column = b_.CreateInBoundsGEP(f32_, matrices[v][size_t(j)], b_.CreateMul(k, b_.getInt64(uint64_t(c.leading))));
          w = load_tile(block, vectors[v].tile, column, int64_t(vectors[v].block) * program_.rows);
        }
        // fmuladd: one FMA where the ISA has it, a multiply and an add where it has not (llvm.fma
        // would call fmaf lane by lane there).
        llvm::Value*& sum = next_values[v * calls + size_t(j)];
        sum = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vf_}, {w, broadcast, sum});
      }
    }
    llvm::Value* next = b_.CreateNSWAdd(k, b_.getInt64(1));
    k->addIncoming(next, loop);
    for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next_values[i], loop);
    llvm::BranchInst* back = b_.CreateCondBr(b_.CreateICmpSLT(next, b_.getInt64(uint64_t(pass.x.rows))), loop, exit);
    back->setMetadata(llvm::LLVMContext::MD_loop, no_unrolling());
    b_.SetInsertPoint(exit);
    std::vector<llvm::Value*> out;
    for (size_t i = 0; i < phis.size(); ++i) {
      llvm::PHINode* phi = b_.CreatePHI(vf_, 1);
      phi->addIncoming(next_values[i], loop);
      out.push_back(phi);
    }
    for (size_t v = 0; v < vectors.size(); ++v)
      for (int32_t j = 0; j < block.calls; ++j)
        buffer.store(contraction_of(vectors[v]), vectors[v].block, vectors[v].tile, j, out[v * calls + size_t(j)]);
  }

  // acc += W^T x for a transposed per-call matrix W (K x blocks * rows, columns `leading` apart):
  // lane l of tile u of block g is the dot product of x with W's column g * rows + row(u) + l,
  // computed by one shared function per (K, leading) (dot_function).
  void dots(llvm::Function*, const Block& block, const CellProgram::Contraction& c, Accumulators& acc) {
    const CellProgram::Segment& x = c.x[0];
    llvm::Function* dot = dot_function(x.rows, c.leading);
    for (int32_t j = 0; j < block.calls; ++j) {
      llvm::Value* xs = b_.CreateConstInBoundsGEP1_64(f32_, operand_pointer(block, x.operand, j), uint64_t(x.row));
      llvm::Value* matrix = b_.CreateConstInBoundsGEP1_64(f32_, operand_pointer(block, c.matrix.operand, j), uint64_t(c.matrix.row));
      for (int32_t u = 0; u < block.tiles; ++u)
        for (int32_t g = 0; g < c.blocks; ++g) {
          const size_t q = size_t(u * block.calls + j);
          llvm::Value* columns = b_.CreateInBoundsGEP(
              f32_, matrix, b_.CreateMul(b_.getInt64(uint64_t(int64_t(g) * program_.rows)), b_.getInt64(uint64_t(c.leading))));
          acc[size_t(g)][q] = b_.CreateFAdd(acc[size_t(g)][q], b_.CreateCall(dot, {columns, xs, block.row[size_t(u)]}));
        }
    }
  }

  // <vector x float> dot(ptr columns, ptr x, i64 row): lane l the dot product of x's K floats with
  // column row + l of the matrix at `columns` (columns `leading` apart), one accumulator per lane
  // over K a vector at a time, then summed across its lanes. A lane past the block's rows reads
  // the block's last column (its sum is never stored). Not inlined: one copy for every block width.
  llvm::Function* dot_function(int32_t k_rows, int32_t leading) {
    llvm::Function*& cached = dots_[{k_rows, leading}];
    if (cached) return cached;
    auto* type = llvm::FunctionType::get(vf_, {ptr_, ptr_, i64_}, false);
    auto* function = llvm::Function::Create(type, llvm::Function::InternalLinkage,
                                            "dot_k" + std::to_string(k_rows) + "_l" + std::to_string(leading), module_);
    function->addFnAttr(llvm::Attribute::NoUnwind);
    function->addFnAttr(llvm::Attribute::NoInline);
    cached = function;
    const llvm::IRBuilderBase::InsertPoint saved = b_.saveIP();
    b_.SetInsertPoint(llvm::BasicBlock::Create(context(), "entry", function));
    llvm::Value* matrix = function->getArg(0);
    llvm::Value* xs = function->getArg(1);
    llvm::Value* row0 = function->getArg(2);
    const int64_t whole = k_rows / vector_, tail = k_rows % vector_;
    std::vector<llvm::Constant*> tail_lanes;
    for (int32_t l = 0; l < vector_; ++l) tail_lanes.push_back(b_.getInt1(l < tail));
    llvm::Value* tail_mask = llvm::ConstantVector::get(tail_lanes);
    llvm::Value* zero = llvm::Constant::getNullValue(vf_);
    std::vector<llvm::Value*> columns;  // per lane
    for (int32_t l = 0; l < vector_; ++l) {
      llvm::Value* row = b_.CreateAdd(row0, b_.getInt64(uint64_t(l)));
      row = b_.CreateSelect(b_.CreateICmpSLT(row, b_.getInt64(uint64_t(program_.rows))), row,
                            b_.getInt64(uint64_t(program_.rows - 1)));
      columns.push_back(b_.CreateInBoundsGEP(f32_, matrix, b_.CreateMul(row, b_.getInt64(uint64_t(leading)))));
    }
    std::vector<llvm::Value*> sums(size_t(vector_), zero);
    auto step = [&](llvm::Value* k, llvm::Value* mask, std::vector<llvm::Value*>& into) {
      auto load = [&](llvm::Value* base) -> llvm::Value* {
        llvm::Value* at = b_.CreateInBoundsGEP(f32_, base, k);
        if (mask) return b_.CreateMaskedLoad(vf_, at, llvm::Align(4), mask, zero);
        return b_.CreateAlignedLoad(vf_, at, llvm::Align(4));
      };
      llvm::Value* xv = load(xs);
      for (int32_t l = 0; l < vector_; ++l)
        into[size_t(l)] = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vf_}, {load(columns[size_t(l)]), xv, into[size_t(l)]});
    };
    if (whole > 0) {
      llvm::BasicBlock* before = b_.GetInsertBlock();
      auto* loop = llvm::BasicBlock::Create(context(), "dot", function);
      auto* exit = llvm::BasicBlock::Create(context(), "dot.exit", function);
      b_.CreateBr(loop);
      b_.SetInsertPoint(loop);
      llvm::PHINode* k = b_.CreatePHI(i64_, 2, "k");
      k->addIncoming(b_.getInt64(0), before);
      std::vector<llvm::PHINode*> phis;
      std::vector<llvm::Value*> next_sums;
      for (int32_t l = 0; l < vector_; ++l) {
        phis.push_back(b_.CreatePHI(vf_, 2));
        phis.back()->addIncoming(sums[size_t(l)], before);
        next_sums.push_back(phis.back());
      }
      step(b_.CreateMul(k, b_.getInt64(uint64_t(vector_))), nullptr, next_sums);
      llvm::Value* next = b_.CreateNSWAdd(k, b_.getInt64(1));
      k->addIncoming(next, loop);
      for (int32_t l = 0; l < vector_; ++l) phis[size_t(l)]->addIncoming(next_sums[size_t(l)], loop);
      llvm::BranchInst* back = b_.CreateCondBr(b_.CreateICmpSLT(next, b_.getInt64(uint64_t(whole))), loop, exit);
      back->setMetadata(llvm::LLVMContext::MD_loop, no_unrolling());
      b_.SetInsertPoint(exit);
      for (int32_t l = 0; l < vector_; ++l) {
        llvm::PHINode* out = b_.CreatePHI(vf_, 1);
        out->addIncoming(next_sums[size_t(l)], loop);
        sums[size_t(l)] = out;
      }
    }
    if (tail > 0) step(b_.getInt64(uint64_t(whole * vector_)), tail_mask, sums);
    llvm::FastMathFlags reassociate;
    reassociate.setAllowReassoc();
    llvm::Value* dot = zero;
    for (int32_t l = 0; l < vector_; ++l) {
      llvm::CallInst* sum = b_.CreateIntrinsic(llvm::Intrinsic::vector_reduce_fadd, {vf_}, {llvm::ConstantFP::get(f32_, 0.0), sums[size_t(l)]});
      sum->setFastMathFlags(reassociate);
      dot = b_.CreateInsertElement(dot, sum, b_.getInt64(uint64_t(l)));
    }
    b_.CreateRet(dot);
    b_.restoreIP(saved);
    return function;
  }

  llvm::Module& module_;
  const CellProgram& program_;
  llvm::IRBuilder<> b_;
  int32_t vector_;
  llvm::Type *f32_, *i64_, *ptr_;
  llvm::FixedVectorType* vf_;
  llvm::Value *calls_ = nullptr, *shared_ = nullptr, *weights_ = nullptr, *pointers_ = nullptr;
  llvm::Value *tile_begin_ = nullptr, *tile_end_ = nullptr;  // the tile range, tile_end resolved
  std::map<std::tuple<int, int32_t, bool>, llvm::Function*> epilogues_;  // by (stage, tiles, masked)
  int32_t columns_ = 1;  // the stage being rendered's
  int32_t group_ = 1;    // the stage being rendered's weight vectors per k loop (CellBlocking::group)
  std::map<std::pair<int32_t, int32_t>, llvm::Function*> dots_;  // by (K, leading)
};

}  // namespace

void render_cell(llvm::Module& module, const CellProgram& program, const std::string& symbol) {
  CellRenderer(module, program).render(symbol);
}

}  // namespace edb::jit
