// A column stage of a cell program (jit/cell_program.h) as LLVM IR: call by call, each step's
// loops over its columns' rows in vectors of the host's width, the last one masked (the maximum,
// the sum of exponentials, the outputs). What a column
// step computes is the reference executor's formula (runtime/reference.cpp); choosing which values
// become column steps is runtime/cell_lowerer_columns.cpp's.
#include <limits>
#include <string>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "jit/llvm_backend.h"
#include "jit/llvm_cell.h"
#include "jit/llvm_math.h"

namespace edb::jit {

namespace {

using Step = CellProgram::ColumnStep;

class ColumnRenderer {
 public:
  ColumnRenderer(llvm::Module& module, const CellProgram& program)
      : module_(module), program_(program), b_(module.getContext()), vector_(cell_vector_floats()), f32_(b_.getFloatTy()),
        i64_(b_.getInt64Ty()), ptr_(b_.getPtrTy()), vf_(llvm::FixedVectorType::get(f32_, unsigned(vector_))),
        math_(b_, f32_), vector_math_(b_, vf_) {}

  llvm::Function* render(const CellProgram::Stage& stage, int index) {
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, i64_}, false);
    function_ = llvm::Function::Create(type, llvm::Function::InternalLinkage, "stage" + std::to_string(index) + "_columns",
                                       module_);
    function_->addFnAttr(llvm::Attribute::NoUnwind);
    function_->addFnAttr(llvm::Attribute::NoInline);
    b_.SetInsertPoint(llvm::BasicBlock::Create(module_.getContext(), "entry", function_));
    llvm::Value* shared = function_->getArg(0);
    llvm::Value* pointers = function_->getArg(1);
    llvm::Value* calls = function_->getArg(2);
    loop(calls, {}, "call", [&](llvm::Value* call, const std::vector<llvm::Value*>&) {
      llvm::Value* table = b_.CreateInBoundsGEP(ptr_, pointers, b_.CreateMul(call, b_.getInt64(uint64_t(program_.call_slots))));
      for (const Step& step : stage.steps) this->step(step, shared, table);
      return std::vector<llvm::Value*>{};
    });
    b_.CreateRetVoid();
    return function_;
  }

 private:
  // for (i = 0; i < n; ++i) carried = body(i, carried), at the insert point; returns the carried
  // values after the loop (`initial` where n <= 0) and leaves the insert point after it.
  template <typename Body>
  std::vector<llvm::Value*> loop(llvm::Value* n, const std::vector<llvm::Value*>& initial, const char* name, Body&& body) {
    llvm::LLVMContext& context = module_.getContext();
    llvm::BasicBlock* before = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(context, name, function_);
    auto* exit = llvm::BasicBlock::Create(context, std::string(name) + ".exit", function_);
    b_.CreateCondBr(b_.CreateICmpSLT(b_.getInt64(0), n), head, exit);
    b_.SetInsertPoint(head);
    llvm::PHINode* i = b_.CreatePHI(i64_, 2, name);
    i->addIncoming(b_.getInt64(0), before);
    std::vector<llvm::Value*> carried;
    for (llvm::Value* v : initial) {
      llvm::PHINode* phi = b_.CreatePHI(v->getType(), 2);
      phi->addIncoming(v, before);
      carried.push_back(phi);
    }
    const std::vector<llvm::Value*> next = body(static_cast<llvm::Value*>(i), carried);
    llvm::Value* step = b_.CreateNSWAdd(i, b_.getInt64(1));
    llvm::BasicBlock* end = b_.GetInsertBlock();
    i->addIncoming(step, end);
    for (size_t k = 0; k < carried.size(); ++k) llvm::cast<llvm::PHINode>(carried[k])->addIncoming(next[k], end);
    b_.CreateCondBr(b_.CreateICmpSLT(step, n), head, exit);
    b_.SetInsertPoint(exit);
    std::vector<llvm::Value*> after;
    for (size_t k = 0; k < initial.size(); ++k) {
      llvm::PHINode* phi = b_.CreatePHI(initial[k]->getType(), 2);
      phi->addIncoming(initial[k], before);
      phi->addIncoming(next[k], end);
      after.push_back(phi);
    }
    return after;
  }

  // The float pointer of a segment's first row in the call whose slot table is `table`.
  llvm::Value* pointer(const CellProgram::Operand& operand, int64_t row, llvm::Value* shared, llvm::Value* table) {
    llvm::Value* slots = operand.shared ? shared : table;
    llvm::Value* base = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, slots, uint64_t(operand.slot)));
    return b_.CreateConstInBoundsGEP1_64(f32_, base, uint64_t(row));
  }
  llvm::Value* column(llvm::Value* base, llvm::Value* j, int64_t stride) {
    return b_.CreateInBoundsGEP(f32_, base, b_.CreateMul(j, b_.getInt64(uint64_t(stride))));
  }
  llvm::Value* splat(llvm::Value* scalar) { return b_.CreateVectorSplat(unsigned(vector_), scalar); }
  llvm::Value* splat(float value) { return splat(llvm::ConstantFP::get(f32_, double(value))); }

  // A vector of rows [at, at + vector) of a column; `mask`: only the rows inside it, `outside` in
  // the other lanes.
  llvm::Value* load(llvm::Value* base, llvm::Value* at, llvm::Value* mask, float outside = 0.0f) {
    llvm::Value* address = b_.CreateInBoundsGEP(f32_, base, at);
    if (!mask) return b_.CreateAlignedLoad(vf_, address, llvm::Align(4));
    return b_.CreateMaskedLoad(vf_, address, llvm::Align(4), mask, splat(outside));
  }
  void store(llvm::Value* value, llvm::Value* base, llvm::Value* at, llvm::Value* mask) {
    llvm::Value* address = b_.CreateInBoundsGEP(f32_, base, at);
    if (!mask) b_.CreateAlignedStore(value, address, llvm::Align(4));
    else b_.CreateMaskedStore(value, address, llvm::Align(4), mask);
  }
  // A term of a sum: 0 in the lanes outside the column.
  llvm::Value* inside(llvm::Value* value, llvm::Value* mask) {
    return mask ? b_.CreateSelect(mask, value, splat(0.0f)) : value;
  }

  // body(at, mask, carried) -> carried, over a column of `rows` rows in vectors: a loop over the
  // whole vectors (mask null), then one vector holding the rest (mask: its rows). Returns the
  // carried vectors after.
  template <typename Body>
  std::vector<llvm::Value*> over_rows(int64_t rows, std::vector<llvm::Value*> carried, Body&& body) {
    const int64_t whole = rows / vector_;
    if (whole > 0)
      carried = loop(b_.getInt64(uint64_t(whole)), carried, "rows", [&](llvm::Value* i, const std::vector<llvm::Value*>& c) {
        return body(b_.CreateMul(i, b_.getInt64(uint64_t(vector_))), static_cast<llvm::Value*>(nullptr), c);
      });
    if (rows % vector_ != 0) {
      std::vector<llvm::Constant*> lanes;
      for (int32_t l = 0; l < vector_; ++l) lanes.push_back(b_.getInt1(whole * vector_ + l < rows));
      carried = body(b_.getInt64(uint64_t(whole * vector_)), llvm::ConstantVector::get(lanes), carried);
    }
    return carried;
  }
  // The sum over the rows of `terms`: a vector of lane sums, added across in lane order.
  template <typename Term>
  llvm::Value* sum(int64_t rows, llvm::Value* start, Term&& term) {
    llvm::Value* lanes = over_rows(rows, {splat(0.0f)}, [&](llvm::Value* at, llvm::Value* mask, const std::vector<llvm::Value*>& c) {
                           return std::vector<llvm::Value*>{b_.CreateFAdd(c[0], inside(term(at, mask), mask))};
                         })[0];
    return b_.CreateFAddReduce(start, lanes);
  }
  template <typename Each>
  void each(int64_t rows, Each&& each) {
    over_rows(rows, {}, [&](llvm::Value* at, llvm::Value* mask, const std::vector<llvm::Value*>&) {
      each(at, mask);
      return std::vector<llvm::Value*>{};
    });
  }

  void step(const Step& step, llvm::Value* shared, llvm::Value* table) {
    const int64_t rows = step.x.rows;
    llvm::Value* x = pointer(step.x.operand, step.x.row, shared, table);
    llvm::Value* y = column_step_has_y(step) ? pointer(step.y.operand, step.y.row, shared, table) : nullptr;
    llvm::Value* out = pointer(step.out, 0, shared, table);
    llvm::Value* zero = llvm::ConstantFP::get(f32_, 0.0);
    if (step.kind == Step::scalar) {
      llvm::Value* a = b_.CreateLoad(f32_, x);
      llvm::Value* c = y ? b_.CreateLoad(f32_, y) : nullptr;
      b_.CreateStore(math_.op(step.op, a, c, step.constant), out);
      return;
    }
    if (column_step_is_total(step.kind)) {
      llvm::Value* total = loop(b_.getInt64(uint64_t(step.cols)), {zero}, "col", [&](llvm::Value* j, const std::vector<llvm::Value*>& s) {
        llvm::Value* xj = column(x, j, step.x.operand.stride);
        llvm::Value* yj = y ? column(y, j, step.y.operand.stride) : nullptr;
        return std::vector<llvm::Value*>{sum(rows, s[0], [&](llvm::Value* at, llvm::Value* mask) {
          return yj ? b_.CreateFMul(load(xj, at, mask), load(yj, at, mask)) : load(xj, at, mask);
        })};
      })[0];
      if (step.kind == Step::mean) total = b_.CreateFDiv(total, llvm::ConstantFP::get(f32_, double(rows * step.cols)));
      b_.CreateStore(total, out);
      return;
    }
    loop(b_.getInt64(uint64_t(step.cols)), {}, "col", [&](llvm::Value* j, const std::vector<llvm::Value*>&) {
      llvm::Value* xj = column(x, j, step.x.operand.stride);
      llvm::Value* yj = y ? column(y, j, step.y.operand.stride) : nullptr;
      llvm::Value* oj = column(out, j, rows);
      switch (step.kind) {
        case Step::softmax:
        case Step::log_softmax: {
          // exp(x - max) summed; a NaN anywhere makes the sum, so every output, NaN, as the
          // reference's (the maximum's lanes skip NaNs: they never hold one).
          const float minus_infinity = -std::numeric_limits<float>::infinity();
          llvm::Value* lanes = over_rows(rows, {splat(minus_infinity)}, [&](llvm::Value* at, llvm::Value* mask, const std::vector<llvm::Value*>& m) {
                                 llvm::Value* v = load(xj, at, mask, minus_infinity);
                                 return std::vector<llvm::Value*>{b_.CreateSelect(b_.CreateFCmpOGT(v, m[0]), v, m[0])};
                               })[0];
          llvm::Value* top = b_.CreateFPMaxReduce(lanes);
          const bool soft = step.kind == Step::softmax;
          llvm::Value* total = sum(rows, zero, [&](llvm::Value* at, llvm::Value* mask) {
            llvm::Value* e = vector_math_.exp(b_.CreateFSub(load(xj, at, mask), splat(top)));
            if (soft) store(e, oj, at, mask);
            return e;
          });
          if (soft) {
            each(rows, [&](llvm::Value* at, llvm::Value* mask) { store(b_.CreateFDiv(load(oj, at, mask), splat(total)), oj, at, mask); });
          } else {
            llvm::Value* log_sum = splat(b_.CreateFAdd(top, math_.log(total)));
            each(rows, [&](llvm::Value* at, llvm::Value* mask) { store(b_.CreateFSub(load(xj, at, mask), log_sum), oj, at, mask); });
          }
          break;
        }
        case Step::softmax_grad: {
          // (y, dy): y * (dy - sum(dy * y))
          llvm::Value* dot = splat(sum(rows, zero, [&](llvm::Value* at, llvm::Value* mask) {
            return b_.CreateFMul(load(xj, at, mask), load(yj, at, mask));
          }));
          each(rows, [&](llvm::Value* at, llvm::Value* mask) {
            store(b_.CreateFMul(load(xj, at, mask), b_.CreateFSub(load(yj, at, mask), dot)), oj, at, mask);
          });
          break;
        }
        case Step::log_softmax_grad: {
          // (y, dy): dy - exp(y) * sum(dy)
          llvm::Value* total = splat(sum(rows, zero, [&](llvm::Value* at, llvm::Value* mask) { return load(yj, at, mask); }));
          each(rows, [&](llvm::Value* at, llvm::Value* mask) {
            store(b_.CreateFSub(load(yj, at, mask), b_.CreateFMul(vector_math_.exp(load(xj, at, mask)), total)), oj, at, mask);
          });
          break;
        }
        default: break;
      }
      return std::vector<llvm::Value*>{};
    });
  }

  llvm::Module& module_;
  const CellProgram& program_;
  llvm::IRBuilder<> b_;
  int32_t vector_;
  llvm::Type *f32_, *i64_, *ptr_, *vf_;
  MathEmitter math_, vector_math_;
  llvm::Function* function_ = nullptr;
};

}  // namespace

llvm::Function* render_column_stage(llvm::Module& module, const CellProgram& program, const CellProgram::Stage& stage,
                                    int index) {
  return ColumnRenderer(module, program).render(stage, index);
}

}  // namespace edb::jit
