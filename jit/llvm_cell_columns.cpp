// A column stage of a cell program (jit/cell_program.h) as LLVM IR: call by call, each step's
// loops over its columns' rows in vectors of the host's width, the last one masked (the maximum,
// the sum of exponentials, the outputs; argmax and transpose float by float). What a column
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
    switch (step.kind) {
      case Step::pick_neg_log_softmax:
      case Step::pick_neg_log_softmax_grad: return pick_neg_log_softmax(step, x, y, out);
      case Step::argmax: return argmax(step, x, out);
      case Step::kmax_pooling:
      case Step::kmax_pooling_grad: return kmax_pooling(step, x, y, out);
      case Step::transpose: return transpose(step, x, out);
      default: break;
    }
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
          llvm::Value* top = column_max(xj, rows);
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

  // Whether a ranks strictly above b (scalars or vectors), as runtime/selection.h ranks: a NaN
  // above every number, NaNs alike.
  llvm::Value* ranks_above(llvm::Value* a, llvm::Value* b) {
    return b_.CreateOr(b_.CreateFCmpOGT(a, b), b_.CreateAnd(b_.CreateFCmpUNO(a, a), b_.CreateFCmpORD(b, b)));
  }
  // The largest entry of a column: lanes that skip NaNs (a NaN never compares greater), so it
  // holds none (-inf for a column of NaNs), reduced across the lanes at the end.
  llvm::Value* column_max(llvm::Value* xj, int64_t rows) {
    const float minus_infinity = -std::numeric_limits<float>::infinity();
    llvm::Value* lanes = over_rows(rows, {splat(minus_infinity)}, [&](llvm::Value* at, llvm::Value* mask, const std::vector<llvm::Value*>& m) {
                           llvm::Value* v = load(xj, at, mask, minus_infinity);
                           return std::vector<llvm::Value*>{b_.CreateSelect(b_.CreateFCmpOGT(v, m[0]), v, m[0])};
                         })[0];
    return b_.CreateFPMaxReduce(lanes);
  }

  // log sum exp of a column: its maximum (the lanes skip NaNs, as softmax's) plus the log of the
  // sum of exp(x - maximum), NaN where x holds one.
  llvm::Value* log_sum_exp(llvm::Value* xj, int64_t rows) {
    llvm::Value* top = column_max(xj, rows);
    llvm::Value* total = sum(rows, llvm::ConstantFP::get(f32_, 0.0), [&](llvm::Value* at, llvm::Value* mask) {
      return vector_math_.exp(b_.CreateFSub(load(xj, at, mask), splat(top)));
    });
    return b_.CreateFAdd(top, math_.log(total));
  }

  // log sum exp(x) - x[label]; the gradient (exp(x - log sum exp(x)) - e_label) * dl, in the
  // reference's order: the softmax, the label's minus 1, the product.
  void pick_neg_log_softmax(const Step& step, llvm::Value* x, llvm::Value* y, llvm::Value* out) {
    const int64_t rows = step.x.rows;
    llvm::Value* lse = log_sum_exp(x, rows);
    llvm::Value* label = b_.CreateConstInBoundsGEP1_64(f32_, x, uint64_t(step.index));
    if (step.kind == Step::pick_neg_log_softmax) {
      b_.CreateStore(b_.CreateFSub(lse, b_.CreateLoad(f32_, label)), out);
      return;
    }
    each(rows, [&](llvm::Value* at, llvm::Value* mask) {
      store(vector_math_.exp(b_.CreateFSub(load(x, at, mask), splat(lse))), out, at, mask);
    });
    llvm::Value* picked = b_.CreateConstInBoundsGEP1_64(f32_, out, uint64_t(step.index));
    b_.CreateStore(b_.CreateFSub(b_.CreateLoad(f32_, picked), llvm::ConstantFP::get(f32_, 1.0)), picked);
    llvm::Value* dl = splat(b_.CreateLoad(f32_, y));
    each(rows, [&](llvm::Value* at, llvm::Value* mask) { store(b_.CreateFMul(load(out, at, mask), dl), out, at, mask); });
  }

  // Per column a one-hot column at its largest row (the first at ties): a scalar scan, then zeros
  // and the one.
  void argmax(const Step& step, llvm::Value* x, llvm::Value* out) {
    const int64_t rows = step.x.rows;
    loop(b_.getInt64(uint64_t(step.cols)), {}, "col", [&](llvm::Value* j, const std::vector<llvm::Value*>&) {
      llvm::Value* xj = column(x, j, step.x.operand.stride);
      llvm::Value* oj = column(out, j, rows);
      const std::vector<llvm::Value*> start = {b_.getInt64(0), b_.CreateLoad(f32_, xj)};
      llvm::Value* best = loop(b_.getInt64(uint64_t(rows - 1)), start, "scan", [&](llvm::Value* i, const std::vector<llvm::Value*>& c) {
                            llvm::Value* r = b_.CreateNSWAdd(i, b_.getInt64(1));
                            llvm::Value* v = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, xj, r));
                            llvm::Value* above = ranks_above(v, c[1]);
                            return std::vector<llvm::Value*>{b_.CreateSelect(above, r, c[0]), b_.CreateSelect(above, v, c[1])};
                          })[0];
      each(rows, [&](llvm::Value* at, llvm::Value* mask) { store(splat(0.0f), oj, at, mask); });
      b_.CreateStore(llvm::ConstantFP::get(f32_, 1.0), b_.CreateInBoundsGEP(f32_, oj, best));
      return std::vector<llvm::Value*>{};
    });
  }

  // kmax_pooling (y null) or its gradient, rows in vectors: per column p of x, its rank in its row
  // (the columns before it in a stable sort, largest first: larger ones, and equal earlier ones);
  // kept when below k, at the place that counts the kept columns before it. Forward, kept values
  // go to their place's column; backward, dy's column at the place comes back, 0 where not kept.
  void kmax_pooling(const Step& step, llvm::Value* x, llvm::Value* y, llvm::Value* out) {
    const int64_t rows = step.x.rows, cols = step.cols, k = step.index;
    const int32_t stride = step.x.operand.stride;
    llvm::Type* vi = llvm::FixedVectorType::get(b_.getInt32Ty(), unsigned(vector_));
    llvm::Value* none = llvm::Constant::getNullValue(vi);
    llvm::Value* no = llvm::Constant::getNullValue(llvm::FixedVectorType::get(b_.getInt1Ty(), unsigned(vector_)));
    auto count = [&](llvm::Value* scalar) { return b_.CreateVectorSplat(unsigned(vector_), b_.CreateTrunc(scalar, b_.getInt32Ty())); };
    each(rows, [&](llvm::Value* at, llvm::Value* mask) {
      loop(b_.getInt64(uint64_t(cols)), {none}, "column", [&](llvm::Value* p, const std::vector<llvm::Value*>& place) {
        llvm::Value* xp = load(column(x, p, stride), at, mask);
        llvm::Value* rank = loop(b_.getInt64(uint64_t(cols)), {none}, "rank", [&](llvm::Value* q, const std::vector<llvm::Value*>& r) {
                              llvm::Value* xq = load(column(x, q, stride), at, mask);
                              llvm::Value* before = b_.CreateSelect(b_.CreateICmpSLT(q, p), b_.CreateNot(ranks_above(xp, xq)),
                                                                    b_.CreateSelect(b_.CreateICmpSGT(q, p), ranks_above(xq, xp), no));
                              return std::vector<llvm::Value*>{b_.CreateAdd(r[0], b_.CreateZExt(before, vi))};
                            })[0];
        llvm::Value* kept = b_.CreateICmpSLT(rank, count(b_.getInt64(uint64_t(k))));
        if (!y) {
          loop(b_.getInt64(uint64_t(k)), {}, "place", [&](llvm::Value* s, const std::vector<llvm::Value*>&) {
            llvm::Value* here = b_.CreateAnd(kept, b_.CreateICmpEQ(place[0], count(s)));
            if (mask) here = b_.CreateAnd(here, mask);
            b_.CreateMaskedStore(xp, b_.CreateInBoundsGEP(f32_, column(out, s, rows), at), llvm::Align(4), here);
            return std::vector<llvm::Value*>{};
          });
        } else {
          const int32_t y_stride = step.y.operand.stride;
          llvm::Value* dx = loop(b_.getInt64(uint64_t(k)), {splat(0.0f)}, "place", [&](llvm::Value* s, const std::vector<llvm::Value*>& d) {
                              llvm::Value* here = b_.CreateAnd(kept, b_.CreateICmpEQ(place[0], count(s)));
                              return std::vector<llvm::Value*>{b_.CreateSelect(here, load(column(y, s, y_stride), at, mask), d[0])};
                            })[0];
          store(dx, column(out, p, rows), at, mask);
        }
        return std::vector<llvm::Value*>{b_.CreateAdd(place[0], b_.CreateZExt(kept, vi))};
      });
    });
  }

  // x's transpose: element (r, c) to (c, r), float by float.
  void transpose(const Step& step, llvm::Value* x, llvm::Value* out) {
    const int64_t rows = step.x.rows, cols = step.cols;
    loop(b_.getInt64(uint64_t(cols)), {}, "col", [&](llvm::Value* c, const std::vector<llvm::Value*>&) {
      llvm::Value* xc = column(x, c, step.x.operand.stride);
      loop(b_.getInt64(uint64_t(rows)), {}, "row", [&](llvm::Value* r, const std::vector<llvm::Value*>&) {
        llvm::Value* v = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, xc, r));
        b_.CreateStore(v, b_.CreateInBoundsGEP(f32_, out, b_.CreateAdd(b_.CreateMul(r, b_.getInt64(uint64_t(cols))), c)));
        return std::vector<llvm::Value*>{};
      });
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
