// CellProgram -> LLVM IR: per stage, a loop over row tiles (one vector of each block) and, inside,
// over register blocks of calls. A block keeps a contraction's accumulators (blocks x calls vectors)
// in registers from its first pass over an x segment to its last while it streams the tile's packed
// weights and broadcasts each call's x element (read through the call's pointer), then leaves them
// in a stack buffer for the stage's one epilogue, which runs the stage body call by call and stores.
// A stage of several columns runs each column of each call as a unit of its own (a call's pointers
// moved by the column's stride).
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

namespace {

// Per contraction of the stage: the first and the last of `passes` it is a member of (none, as a
// transposed contraction: passes.size() and 0). The renderer opens a contraction's accumulators
// at its first pass and leaves them for the buffer after its last.
std::vector<std::pair<size_t, size_t>> pass_spans(const CellProgram::Stage& stage, const std::vector<CellPass>& passes) {
  std::vector<std::pair<size_t, size_t>> spans(stage.contractions.size(), {passes.size(), 0});
  for (size_t p = 0; p < passes.size(); ++p)
    for (const CellPass::Member& member : passes[p].members) {
      auto& [first, last] = spans[size_t(member.contraction)];
      first = std::min(first, p);
      last = p;
    }
  return spans;
}

}  // namespace

CellBlocking cell_blocking(const CellProgram::Stage& stage, int32_t registers, int64_t row_tiles) {
  // The accumulator blocks in registers: those of the contractions open during a pass, at the
  // pass that has the most (BiLSTM's two directions, one contraction each, hold one at a time);
  // a transposed contraction's alone.
  const std::vector<CellPass> passes = cell_passes(stage);
  const std::vector<std::pair<size_t, size_t>> spans = pass_spans(stage, passes);
  int32_t accumulators = 0, widest = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    int32_t open = 0;
    for (size_t c = 0; c < stage.contractions.size(); ++c)
      if (spans[c].first <= p && p <= spans[c].second) open += stage.contractions[c].blocks;
    accumulators = std::max(accumulators, open);
    int32_t blocks = 0;  // the weight vectors of one k step of the pass
    for (const CellPass::Member& member : passes[p].members) blocks += stage.contractions[size_t(member.contraction)].blocks;
    widest = std::max(widest, blocks);
  }
  for (const CellProgram::Contraction& c : stage.contractions)
    if (c.transposed) accumulators = std::max(accumulators, c.blocks);
  if (accumulators == 0) return {4, 1};
  // Few gate blocks: several row tiles per register block, so that each broadcast x element feeds
  // enough FMAs (a block of one tile and one gate would load as often as it multiplies).
  int32_t tiles = accumulators == 1 ? 3 : accumulators == 2 ? 2 : 1;
  auto calls = [&](int32_t t) { return std::clamp((registers - t * widest - 2) / (t * accumulators), 1, 8); };
  // One tile more where it covers the rows in whole blocks and still holds a few calls: the rest
  // would run one tile at a time, loading as often as it multiplies (64 rows of 16-float vectors:
  // a block of 3 tiles and one of 1, instead of one of 4 for W_M [A; B]'s 64 columns of MV-RNN).
  if (row_tiles > 0 && tiles > 1 && row_tiles % tiles != 0 && row_tiles % (tiles + 1) == 0 && calls(tiles + 1) >= 3) ++tiles;
  return {calls(tiles), tiles};
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
    for (size_t s = 0; s < program_.stages.size(); ++s) stage(function, program_.stages[s], int(s));
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
    // The accumulators go to a stack buffer, [contraction block][tile][call], and one epilogue per
    // stage and tile count runs the stage body call by call from there: one copy of the body's
    // code instead of one per (tile, call) of every block width, which was most of a cell kernel's
    // code and of its compile time.
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
    // Each contraction's accumulators go to the buffer as soon as its last pass ends.
    contract(function, block, stage, [&](size_t c, const Accumulators& accumulators) {
      for (int32_t g = 0; g < stage.contractions[c].blocks; ++g)
        for (int32_t q = 0; q < block.pairs(); ++q)
          b_.CreateAlignedStore(accumulators[size_t(g)][size_t(q)],
                                b_.CreateConstInBoundsGEP1_64(vf_, buffer, uint64_t((first[c] + g) * block.pairs() + q)),
                                llvm::Align(size_t(vector_) * 4));
    });
    b_.CreateCall(epilogue_function(stage, index, tiles, masked),
                  {block.shared, block.pointers, block.tile, block.first_call, b_.getInt64(uint64_t(calls)), buffer});
    b_.CreateRetVoid();
    b_.restoreIP(saved);
    return function;
  }

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
    counted_loop(function, b_.getInt64(0), calls, 1, "call", [&](llvm::Value* j) {
      block.call_table.clear();
      block.column.clear();
      unit(block, b_.CreateAdd(block.first_call, j));
      MathEmitter math(b_, vf_);
      for (int32_t u = 0; u < tiles; ++u) {
        llvm::Value* q = b_.CreateAdd(b_.CreateMul(b_.getInt64(uint64_t(u)), calls), j);
        std::vector<llvm::Value*> values(stage.body.size());
        for (size_t i = 0; i < stage.body.size(); ++i) {
          const CellProgram::Instruction& in = stage.body[i];
          switch (in.kind) {
            case CellProgram::Instruction::load:
              values[i] = load_tile(block, u, operand_pointer(block, in.operand, 0), int64_t(in.block) * program_.rows);
              break;
            case CellProgram::Instruction::accumulator: {
              llvm::Value* at = b_.CreateAdd(
                  b_.CreateMul(b_.getInt64(uint64_t(first_block[size_t(in.contraction)] + in.block)), pairs), q);
              values[i] = b_.CreateAlignedLoad(vf_, b_.CreateInBoundsGEP(vf_, buffer, at), llvm::Align(size_t(vector_) * 4));
              break;
            }
            case CellProgram::Instruction::compute:
              values[i] = math.op(in.op, values[size_t(in.a)], in.b >= 0 ? values[size_t(in.b)] : nullptr, in.constant);
              break;
          }
        }
        for (const CellProgram::Store& store : stage.stores) {
          llvm::Value* base = operand_pointer(block, store.operand, 0);
          llvm::Value* at = b_.CreateInBoundsGEP(
              f32_, base, b_.CreateAdd(block.row[size_t(u)], b_.getInt64(uint64_t(int64_t(store.block) * program_.rows))));
          b_.CreateMaskedStore(values[size_t(store.value)], at, llvm::Align(4), block.mask[size_t(u)]);
        }
      }
    });
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
  // packed tile streamed once for all its calls, in one k loop per pass (jit::cell_passes): the
  // contractions that read the same x segment share its broadcasts, so a one-block contraction
  // beside a wider one (TreeLSTM's forget gates) is no longer a loop that loads as often as it
  // multiplies. Each accumulator sums its k in the same order as a loop per contraction would.
  // finished(c, accumulators) takes contraction c's accumulators after its last pass.
  template <typename Finished>
  void contract(llvm::Function* function, const Block& block, const CellProgram::Stage& stage, Finished&& finished) {
    const int32_t pairs = block.pairs();
    std::vector<Accumulators> acc(stage.contractions.size());
    std::vector<llvm::Value*> packed;    // per contraction: its packed weight at the block's tile
    std::vector<uint64_t> tile_floats;   // per contraction: floats of one packed row tile
    // A contraction's accumulators start (from its bias) at its first pass and leave for the
    // buffer after its last, so that only the open contractions' accumulators hold registers.
    auto open = [&](size_t index) {
      const CellProgram::Contraction& c = stage.contractions[index];
      acc[index].assign(size_t(c.blocks), std::vector<llvm::Value*>(size_t(pairs)));
      for (int32_t j = 0; j < block.calls; ++j) {
        llvm::Value* bias = c.has_bias ? operand_pointer(block, c.bias.operand, j) : nullptr;
        for (int32_t u = 0; u < block.tiles; ++u)
          for (int32_t g = 0; g < c.blocks; ++g)
            acc[index][size_t(g)][size_t(u * block.calls + j)] =
                bias ? load_tile(block, u, bias, c.bias.row + int64_t(g) * program_.rows) : llvm::Constant::getNullValue(vf_);
      }
    };
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
    const std::vector<CellPass> passes = cell_passes(stage);
    const std::vector<std::pair<size_t, size_t>> spans = pass_spans(stage, passes);
    for (size_t p = 0; p < passes.size(); ++p) {
      const CellPass& pass = passes[p];
      for (const CellPass::Member& m : pass.members)
        if (acc[size_t(m.contraction)].empty()) open(size_t(m.contraction));
      std::vector<llvm::Value*> xs;
      for (int32_t j = 0; j < block.calls; ++j)
        xs.push_back(b_.CreateConstInBoundsGEP1_64(f32_, operand_pointer(block, pass.x.operand, j), uint64_t(pass.x.row)));
      std::vector<llvm::Value*> w_segment;  // per member: a packed weight's segment, or null
      std::vector<std::vector<llvm::Value*>> matrices;  // per member: a per-call matrix's column k_begin, per call
      for (const CellPass::Member& m : pass.members) {
        const CellProgram::Contraction& c = stage.contractions[size_t(m.contraction)];
        matrices.emplace_back();
        if (c.has_matrix) {
          w_segment.push_back(nullptr);
          for (int32_t j = 0; j < block.calls; ++j)
            matrices.back().push_back(b_.CreateConstInBoundsGEP1_64(
                f32_, operand_pointer(block, c.matrix.operand, j), uint64_t(c.matrix.row + m.k_begin * c.leading)));
          continue;
        }
        w_segment.push_back(
            b_.CreateConstInBoundsGEP1_64(f32_, packed[size_t(m.contraction)], uint64_t(m.k_begin * c.blocks * vector_)));
      }
      // The k loop carries the members' accumulators in phis.
      llvm::BasicBlock* before = b_.GetInsertBlock();
      auto* loop = llvm::BasicBlock::Create(context(), "k", function);
      auto* exit = llvm::BasicBlock::Create(context(), "k.exit", function);
      b_.CreateBr(loop);
      b_.SetInsertPoint(loop);
      llvm::PHINode* k = b_.CreatePHI(i64_, 2, "k");
      k->addIncoming(b_.getInt64(0), before);
      std::vector<std::vector<std::vector<llvm::PHINode*>>> phis;  // [member][block][pair]
      for (const CellPass::Member& m : pass.members) {
        Accumulators& a = acc[size_t(m.contraction)];
        phis.emplace_back(a.size());
        for (size_t g = 0; g < a.size(); ++g)
          for (int32_t q = 0; q < pairs; ++q) {
            llvm::PHINode* phi = b_.CreatePHI(vf_, 2);
            phi->addIncoming(a[g][size_t(q)], before);
            phis.back()[g].push_back(phi);
          }
      }
      std::vector<std::vector<std::vector<llvm::Value*>>> ws;  // [member][tile][block]; per call for a matrix
      for (size_t i = 0; i < pass.members.size(); ++i) {
        const int32_t blocks = stage.contractions[size_t(pass.members[i].contraction)].blocks;
        if (!w_segment[i]) {
          ws.emplace_back();
          continue;
        }
        llvm::Value* w_row = b_.CreateInBoundsGEP(f32_, w_segment[i], b_.CreateMul(k, b_.getInt64(uint64_t(blocks * vector_))));
        ws.emplace_back(size_t(block.tiles));
        for (int32_t u = 0; u < block.tiles; ++u)
          for (int32_t g = 0; g < blocks; ++g)
            ws.back()[size_t(u)].push_back(b_.CreateAlignedLoad(
                vf_,
                b_.CreateConstInBoundsGEP1_64(f32_, w_row, uint64_t(u) * tile_floats[size_t(pass.members[i].contraction)] +
                                                                uint64_t(g * vector_)),
                llvm::Align(size_t(vector_) * 4)));
      }
      for (int32_t j = 0; j < block.calls; ++j) {
        llvm::Value* at = pass.step == 1 ? k : b_.CreateMul(k, b_.getInt64(uint64_t(pass.step)));
        llvm::Value* element = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, xs[size_t(j)], at));
        llvm::Value* broadcast = b_.CreateVectorSplat(unsigned(vector_), element);
        for (size_t i = 0; i < pass.members.size(); ++i) {
          const CellProgram::Contraction& c = stage.contractions[size_t(pass.members[i].contraction)];
          Accumulators& a = acc[size_t(pass.members[i].contraction)];
          // A per-call matrix: this call's column k, block by block (no reuse across calls).
          llvm::Value* column =
              c.has_matrix ? b_.CreateInBoundsGEP(f32_, matrices[i][size_t(j)], b_.CreateMul(k, b_.getInt64(uint64_t(c.leading))))
                           : nullptr;
          for (int32_t u = 0; u < block.tiles; ++u)
            for (size_t g = 0; g < a.size(); ++g) {
              const size_t q = size_t(u * block.calls + j);
              llvm::Value* w = column ? load_tile(block, u, column, int64_t(g) * program_.rows) : ws[i][size_t(u)][g];
              // fmuladd: one FMA where the ISA has it, a multiply and an add where it has not
              // (llvm.fma would call fmaf lane by lane there).
              a[g][q] = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vf_}, {w, broadcast, phis[i][g][q]});
            }
        }
      }
      llvm::Value* next = b_.CreateNSWAdd(k, b_.getInt64(1));
      k->addIncoming(next, loop);
      for (size_t i = 0; i < pass.members.size(); ++i) {
        Accumulators& a = acc[size_t(pass.members[i].contraction)];
        for (size_t g = 0; g < a.size(); ++g)
          for (int32_t q = 0; q < pairs; ++q) phis[i][g][size_t(q)]->addIncoming(a[g][size_t(q)], loop);
      }
      llvm::BranchInst* back = b_.CreateCondBr(b_.CreateICmpSLT(next, b_.getInt64(uint64_t(pass.x.rows))), loop, exit);
      back->setMetadata(llvm::LLVMContext::MD_loop, no_unrolling());
      b_.SetInsertPoint(exit);
      for (const CellPass::Member& m : pass.members) {
        Accumulators& a = acc[size_t(m.contraction)];
        for (size_t g = 0; g < a.size(); ++g)
          for (int32_t q = 0; q < pairs; ++q) {
            llvm::PHINode* out = b_.CreatePHI(vf_, 1);
            out->addIncoming(a[g][size_t(q)], loop);
            a[g][size_t(q)] = out;
          }
      }
      for (const CellPass::Member& m : pass.members)
        if (spans[size_t(m.contraction)].second == p) finished(size_t(m.contraction), acc[size_t(m.contraction)]);
    }
    for (size_t c = 0; c < stage.contractions.size(); ++c)
      if (stage.contractions[c].transposed) {
        open(c);
        dots(function, block, stage.contractions[c], acc[c]);
        finished(c, acc[c]);
      }
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
  std::map<std::pair<int32_t, int32_t>, llvm::Function*> dots_;  // by (K, leading)
};

}  // namespace

void render_cell(llvm::Module& module, const CellProgram& program, const std::string& symbol) {
  CellRenderer(module, program).render(symbol);
}

}  // namespace edb::jit
