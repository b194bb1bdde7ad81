// One batch as the batched executors see it (runtime/batched.h, runtime/jit_executor.h): its
// members, its output block, and each operand slot classified once per batch (shared, strided, or
// gathered through per-member pointers in strided runs).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <functional>
#include <span>

#include "edbatch/stats.h"
#include "runtime/batched.h"
#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::runtime {

class WeightGradients;  // runtime/weight_gradients.h

using ConstMatrix = Eigen::Map<const Eigen::MatrixXf>;
using Matrix = Eigen::Map<Eigen::MatrixXf>;
using StridedConst = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;

constexpr int64_t kMinElementsPerTask = 1 << 15;  // elementwise ranges worth a thread hand-off
constexpr int64_t kMinRowsPerTask = 64;            // GEMM row blocks worth a thread hand-off

struct Operand {
  enum Kind { kShared, kStrided, kGathered };
  Kind kind = kStrided;
  const float* base = nullptr;     // shared, strided
  int64_t stride = 0;              // strided: floats from member k to k + 1
  const float* const* pointers = nullptr;  // gathered: one per member
  const uint32_t* run_end = nullptr;       // gathered: run_end[k], the end of member k's strided run
  ir::Shape shape;                 // of one member
  // Shared (or one member's) and a model parameter: which (a GEMM keeps its weight packed).
  const ir::ParameterInfo* parameter = nullptr;

  // Whether member k + 1 may follow member k in one strided view (the executor's stride rule).
  static bool stride_fits(int64_t stride, const ir::Shape& shape) {
    return stride == 0 || (stride >= shape.size() && (shape.cols == 1 || stride == shape.size()));
  }
  // Floats from member k to k + 1 inside a run (any member of a strided or shared operand).
  int64_t stride_at(int64_t k) const {
    if (kind != kGathered) return stride;
    return run_end[k] > uint32_t(k + 1) ? pointers[k + 1] - pointers[k] : shape.size();
  }
  // Members [k, k + count) as one strided rows x (count * cols) matrix: within one run.
  StridedConst view(int64_t k, int64_t count) const {
    const int64_t s = stride_at(k);
    return StridedConst(member(k), shape.rows, shape.cols * count, Eigen::OuterStride<>(shape.cols == 1 ? s : shape.rows));
  }

  const float* member(int64_t k) const {
    return kind == kGathered ? pointers[k] : kind == kShared ? base : base + k * stride;
  }
  // Strided operands as one rows x (n * cols) matrix (column vectors may have any stride).
  StridedConst view(int64_t n) const {
    return StridedConst(base, shape.rows, shape.cols * n, Eigen::OuterStride<>(shape.cols == 1 ? stride : shape.rows));
  }
  int64_t bytes() const { return int64_t(sizeof(float)) * shape.size(); }
  // Members [begin, end) one after another, member k at into + k * shape.size().
  void copy(int64_t begin, int64_t end, float* into) const {
    const int64_t size = shape.size();
    for (int64_t k = begin; k < end; ++k) std::memcpy(into + k * size, member(k), sizeof(float) * size_t(size));
  }
};

// The members of a batch of batch nodes (ir::NodeBatch) as the executor reads them: every node's
// members one after another, each argument where it lies (a row of its node).
struct MemberTable {
  ir::Node first;                  // a member as a plain node: its op, attributes, column shape
  int64_t members = 0;
  std::vector<const float*> pointers;  // member after member, slot after slot
  std::vector<uint8_t> in_arena;       // the same, whether that argument lies in the arena
  std::vector<ir::Shape> shapes;       // per slot
  std::vector<const ir::ParameterInfo*> parameters;  // per slot: the first member's, if a whole parameter
  std::vector<int64_t> labels;         // per member, for an op with a per-member index
};

struct BatchContext {
  const Values& values;
  std::span<const ir::NodeId> members;
  const ir::Node& first;  // all members share op, shapes and attributes but per-member index
  float* out;
  BatchedExecutor::Scratch& scratch;
  ThreadPool& pool;
  Stats& stats;
  // Set for a batch of batch nodes: the members are the table's, not `members` (the nodes), and
  // `first` is the table's member node. Read through in(), in_arena_at(), arg_shape(), index().
  const MemberTable* table = nullptr;
  // The evaluation's weight gradients started early (runtime/weight_gradients.h), or null.
  WeightGradients* weight_gradients = nullptr;

  int64_t n() const { return table ? table->members : static_cast<int64_t>(members.size()); }
  ir::NodeId arg(size_t member, size_t slot) const { return values.graph.args(members[member])[slot]; }
  // Member k's argument in `slot`: where it lies, and its shape (the same for every member).
  const float* in(size_t k, size_t slot) const {
    return table ? table->pointers[k * table->shapes.size() + slot] : values.in(arg(k, slot));
  }
  ir::Shape arg_shape(size_t slot) const {
    return table ? table->shapes[slot] : values.graph.node(arg(0, slot)).shape;
  }
  // Member k's per-member index (a pick's label, a lookup's entry).
  int64_t index(size_t k) const { return table ? table->labels[k] : values.graph.node(members[k]).attrs.index; }
  Matrix output() const { return Matrix(out, first.shape.rows, first.shape.cols * n()); }
  Matrix output(int64_t k) const {
    return Matrix(out + k * first.shape.size(), first.shape.rows, first.shape.cols);
  }

  // Whether member k's operand in `slot` lies in the arena (else it is a leaf's own data).
  bool in_arena_at(size_t k, size_t slot) const {
    return table ? table->in_arena[k * table->shapes.size() + slot] != 0 : values.plan.offset[arg(k, slot)] >= 0;
  }

  Operand operand(size_t slot) const {
    Operand op;
    op.shape = arg_shape(slot);
    const int64_t size = op.shape.size();
    op.base = in(0, slot);
    const ir::ParameterInfo* parameter = nullptr;
    if (table) {
      parameter = table->parameters[slot];
    } else if (const ir::Node& leaf = values.graph.node(arg(0, slot)); leaf.op == ir::Op::parameter) {
      parameter = &values.graph.parameter(leaf.attrs.parameter);
    }
    const size_t count = size_t(n());
    if (count == 1) {
      op.stride = size;
      op.parameter = parameter;
      return op;
    }
    // An arena value and a leaf are never one run, whatever their distance: it depends on where the
    // arena happens to lie, and the planner (memplan::operand_modes) counts them gathered too, so
    // the bytes gathered are the same in every run.
    const bool in_arena = in_arena_at(0, slot);
    const int64_t stride = in(1, slot) - op.base;
    bool regular = Operand::stride_fits(stride, op.shape);
    for (size_t k = 1; k < count && regular; ++k)
      regular = in_arena_at(k, slot) == in_arena && in(k, slot) == op.base + int64_t(k) * stride;
    if (regular) {
      op.kind = stride == 0 ? Operand::kShared : Operand::kStrided;
      op.stride = stride;
      if (stride == 0) op.parameter = parameter;
      return op;
    }
    const float** pointers = scratch.allocate_pointers(count);
    for (size_t k = 0; k < count; ++k) pointers[k] = in(k, slot);
    // Maximal strided runs, left to right, each in the arena or among leaves. A repeated matrix is
    // no run: no view repeats one.
    uint32_t* run_end = reinterpret_cast<uint32_t*>(scratch.allocate(count));
    auto fits = [&](int64_t s) { return Operand::stride_fits(s, op.shape) && (s != 0 || op.shape.cols == 1); };
    for (size_t start = 0; start < count;) {
      size_t end = start + 1;
      const bool space = in_arena_at(start, slot);
      if (end < count && in_arena_at(end, slot) == space && fits(pointers[end] - pointers[start])) {
        const int64_t s = pointers[end] - pointers[start];
        while (end + 1 < count && in_arena_at(end + 1, slot) == space && pointers[end + 1] - pointers[end] == s)
          ++end;
        ++end;
      }
      for (size_t k = start; k < end; ++k) run_end[k] = uint32_t(end);
      start = end;
    }
    op.kind = Operand::kGathered;
    op.pointers = pointers;
    op.run_end = run_end;
    return op;
  }

  // Records the bytes of members that are read alone (not in a strided run of two or more).
  void count_alone(const Operand& op, int64_t begin, int64_t end) const {
    if (op.kind != Operand::kGathered) return;
    for (int64_t k = begin; k < end; ++k)
      if (op.run_end[k] == uint32_t(k + 1) && (k == 0 || op.run_end[k - 1] != uint32_t(k + 1)))
        stats.bytes_gathered += op.bytes();
  }

  // A strided (or shared) view of the operand, copying gathered members into scratch.
  // Shared values are repeated so the view has one column block per member.
  StridedConst matrix(const Operand& op) const {
    if (op.kind == Operand::kStrided) return op.view(n());
    if (op.kind == Operand::kGathered) stats.bytes_gathered += op.bytes() * n();
    const int64_t size = op.shape.size();
    float* copy = scratch.allocate(size_t(size * n()));
    op.copy(0, n(), copy);
    return StridedConst(copy, op.shape.rows, op.shape.cols * n(), Eigen::OuterStride<>(op.shape.rows));
  }

  // Runs body(begin, end) over [0, total) in pieces of at least `grain`, across the pool.
  template <typename Body>
  void split(int64_t total, int64_t grain, Body&& body) const {
    const int64_t pieces = std::min<int64_t>(pool.size(), std::max<int64_t>(1, total / grain));
    if (pieces <= 1) return body(int64_t{0}, total);
    const std::function<void(int)> task = [&](int i) { body(total * i / pieces, total * (i + 1) / pieces); };
    pool.parallel_for(static_cast<int>(pieces), task);
  }
};

}  // namespace edb::runtime
