// A column stage of a cell program (jit/cell_program.h) as LLVM IR: call by call, each step's
// loops over its columns' rows (the maximum, the sum of exponentials, the outputs). What a column
// step computes is the reference executor's formula (runtime/reference.cpp); choosing which values
// become column steps is runtime/cell_lowering.cpp's.
#include <limits>
#include <string>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "jit/llvm_cell.h"
#include "jit/llvm_math.h"

namespace edb::jit {

namespace {

using Step = CellProgram::ColumnStep;

class ColumnRenderer {
 public:
  ColumnRenderer(llvm::Module& module, const CellProgram& program)
      : module_(module), program_(program), b_(module.getContext()), f32_(b_.getFloatTy()), i64_(b_.getInt64Ty()),
        ptr_(b_.getPtrTy()), math_(b_, f32_) {}

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
  llvm::Value* at(llvm::Value* base, llvm::Value* i) {
    return b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, base, i));
  }
  void put(llvm::Value* value, llvm::Value* base, llvm::Value* i) {
    b_.CreateStore(value, b_.CreateInBoundsGEP(f32_, base, i));
  }

  void step(const Step& step, llvm::Value* shared, llvm::Value* table) {
    const int64_t rows = step.x.rows;
    llvm::Value* x = pointer(step.x.operand, step.x.row, shared, table);
    llvm::Value* y = column_step_has_y(step.kind) ? pointer(step.y.operand, step.y.row, shared, table) : nullptr;
    llvm::Value* out = pointer(step.out, 0, shared, table);
    llvm::Value* n = b_.getInt64(uint64_t(rows));
    llvm::Value* zero = llvm::ConstantFP::get(f32_, 0.0);
    // Sums in row order from 0 (the reference's Eigen sums in another order: within rounding).
    auto sum = [&](llvm::Value* start, auto&& term) {
      return loop(n, {start}, "row", [&](llvm::Value* i, const std::vector<llvm::Value*>& s) {
               return std::vector<llvm::Value*>{b_.CreateFAdd(s[0], term(i))};
             })[0];
    };
    if (column_step_is_total(step.kind)) {
      llvm::Value* total = loop(b_.getInt64(uint64_t(step.cols)), {zero}, "col", [&](llvm::Value* j, const std::vector<llvm::Value*>& s) {
        llvm::Value* xj = column(x, j, step.x.operand.stride);
        return std::vector<llvm::Value*>{sum(s[0], [&](llvm::Value* i) { return at(xj, i); })};
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
          // exp(x - max) summed; a NaN anywhere makes the sum, so every output, NaN, as the reference's.
          llvm::Value* top = loop(n, {llvm::ConstantFP::getInfinity(f32_, true)}, "row",
                                  [&](llvm::Value* i, const std::vector<llvm::Value*>& m) {
                                    llvm::Value* v = at(xj, i);
                                    return std::vector<llvm::Value*>{b_.CreateSelect(b_.CreateFCmpOGT(v, m[0]), v, m[0])};
                                  })[0];
          const bool soft = step.kind == Step::softmax;
          llvm::Value* total = sum(zero, [&](llvm::Value* i) {
            llvm::Value* e = math_.exp(b_.CreateFSub(at(xj, i), top));
            if (soft) put(e, oj, i);
            return e;
          });
          if (soft) {
            loop(n, {}, "row", [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
              put(b_.CreateFDiv(at(oj, i), total), oj, i);
              return std::vector<llvm::Value*>{};
            });
          } else {
            llvm::Value* log_sum = b_.CreateFAdd(top, math_.log(total));
            loop(n, {}, "row", [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
              put(b_.CreateFSub(at(xj, i), log_sum), oj, i);
              return std::vector<llvm::Value*>{};
            });
          }
          break;
        }
        case Step::softmax_grad: {
          // (y, dy): y * (dy - sum(dy * y))
          llvm::Value* dot = sum(zero, [&](llvm::Value* i) { return b_.CreateFMul(at(xj, i), at(yj, i)); });
          loop(n, {}, "row", [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
            put(b_.CreateFMul(at(xj, i), b_.CreateFSub(at(yj, i), dot)), oj, i);
            return std::vector<llvm::Value*>{};
          });
          break;
        }
        case Step::log_softmax_grad: {
          // (y, dy): dy - exp(y) * sum(dy)
          llvm::Value* total = sum(zero, [&](llvm::Value* i) { return at(yj, i); });
          loop(n, {}, "row", [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
            put(b_.CreateFSub(at(yj, i), b_.CreateFMul(math_.exp(at(xj, i)), total)), oj, i);
            return std::vector<llvm::Value*>{};
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
  llvm::Type *f32_, *i64_, *ptr_;
  MathEmitter math_;
  llvm::Function* function_ = nullptr;
};

}  // namespace

llvm::Function* render_column_stage(llvm::Module& module, const CellProgram& program, const CellProgram::Stage& stage,
                                    int index) {
  return ColumnRenderer(module, program).render(stage, index);
}

}  // namespace edb::jit
