// Batched kernels per op, each over an Eigen view of the whole batch: member k's value is column
// block k of a rows x (members * cols) matrix, because outputs sit consecutively in member order.
#include "runtime/batched.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "edbatch/errors.h"

namespace edb::runtime {

namespace {

using ConstMatrix = Eigen::Map<const Eigen::MatrixXf>;
using Matrix = Eigen::Map<Eigen::MatrixXf>;
using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
using Array = Eigen::Map<Eigen::ArrayXf>;

constexpr int64_t kMinColumnsPerTask = 16;       // GEMM column blocks worth a thread hand-off
constexpr int64_t kMinElementsPerTask = 1 << 15;  // elementwise ranges worth a thread hand-off

// One operand slot of a batch, resolved to memory: a single value (shared by every member) or
// the members' values laid one after another (in place, or gathered into scratch).
struct Operand {
  const float* data = nullptr;
  bool shared = false;
  ir::Shape shape;  // of one member
};

struct BatchContext {
  const Values& values;
  std::span<const ir::NodeId> members;
  const ir::Node& first;  // all members share op, shapes and attributes but per-member index
  float* out;
  BatchedExecutor::Scratch& scratch;
  ThreadPool& pool;
  Stats& stats;

  int64_t n() const { return static_cast<int64_t>(members.size()); }
  ir::NodeId arg(size_t member, size_t slot) const { return values.graph.args(members[member])[slot]; }

  Operand operand(size_t slot) const {
    const ir::Shape shape = values.graph.node(arg(0, slot)).shape;
    const int64_t size = shape.size();
    const float* base = values.in(arg(0, slot));
    bool shared = true, contiguous = true;
    for (size_t k = 1; k < members.size() && (shared || contiguous); ++k) {
      const float* p = values.in(arg(k, slot));
      shared = shared && p == base;
      contiguous = contiguous && p == base + int64_t(k) * size;
    }
    if (shared && members.size() > 1) return {base, true, shape};
    if (contiguous) return {base, false, shape};
    float* gathered = scratch.allocate(size_t(size) * members.size());
    for (size_t k = 0; k < members.size(); ++k)
      std::memcpy(gathered + int64_t(k) * size, values.in(arg(k, slot)), sizeof(float) * size_t(size));
    stats.bytes_gathered += int64_t(sizeof(float)) * size * n();
    return {gathered, false, shape};
  }

  // All members' values of a slot as one rows x (n * cols) matrix; shared values are repeated.
  ConstMatrix all(const Operand& op) const {
    if (op.shared) {
      float* repeated = scratch.allocate(size_t(op.shape.size()) * members.size());
      for (int64_t k = 0; k < n(); ++k)
        std::memcpy(repeated + k * op.shape.size(), op.data, sizeof(float) * size_t(op.shape.size()));
      return ConstMatrix(repeated, op.shape.rows, op.shape.cols * n());
    }
    return ConstMatrix(op.data, op.shape.rows, op.shape.cols * n());
  }
  Matrix output() const { return Matrix(out, first.shape.rows, first.shape.cols * n()); }

  // Runs body(begin, end) over [0, total) in pieces of at least `grain`, across the pool.
  template <typename Body>
  void split(int64_t total, int64_t grain, Body&& body) const {
    const int64_t pieces = std::min<int64_t>(pool.size(), std::max<int64_t>(1, total / grain));
    if (pieces <= 1) return body(int64_t{0}, total);
    const std::function<void(int)> task = [&](int i) { body(total * i / pieces, total * (i + 1) / pieces); };
    pool.parallel_for(static_cast<int>(pieces), task);
  }
};

// out += W_1 X_1 + W_2 X_2 + ...: one GEMM per shared weight over all members, in column blocks.
void gemm_columns(const BatchContext& c, const std::vector<std::pair<Operand, Operand>>& products) {
  Matrix out = c.output();
  const int64_t columns = out.cols();
  c.split(columns, kMinColumnsPerTask, [&](int64_t begin, int64_t end) {
    for (const auto& [w, x] : products) {
      const ConstMatrix weight(w.data, w.shape.rows, w.shape.cols);
      const ConstMatrix xs(x.data, x.shape.rows, x.shape.cols * c.n());
      out.middleCols(begin, end - begin).noalias() += weight * xs.middleCols(begin, end - begin);
    }
  });
  c.stats.kernel_calls += static_cast<int64_t>(products.size());
}

// Products whose left factor differs per member: one small product per member, added to `out`.
void per_member_products(const BatchContext& c, size_t product_begin) {
  const ir::Shape out_shape = c.first.shape;
  for (int64_t k = 0; k < c.n(); ++k) {
    Matrix out(c.out + k * out_shape.size(), out_shape.rows, out_shape.cols);
    for (size_t slot = product_begin; slot + 1 < c.first.arg_count; slot += 2) {
      const ir::NodeId a = c.arg(size_t(k), slot), b = c.arg(size_t(k), slot + 1);
      const ir::Shape sa = c.values.graph.node(a).shape, sb = c.values.graph.node(b).shape;
      out.noalias() += ConstMatrix(c.values.in(a), sa.rows, sa.cols) * ConstMatrix(c.values.in(b), sb.rows, sb.cols);
    }
  }
  c.stats.kernel_calls += c.n();
}

// matmul, affine, matvec: the output starts as the bias (affine) or zero, then takes the products:
// one GEMM per shared weight over all members, or per-member products otherwise.
void run_linear(const BatchContext& c) {
  const size_t product_begin = c.first.op == ir::Op::affine ? 1 : 0;
  Matrix out = c.output();
  if (c.first.op == ir::Op::affine) {
    const Operand bias = c.operand(0);
    if (bias.shared && bias.shape.cols == 1) out.colwise() = ConstMatrix(bias.data, bias.shape.rows, 1).col(0);
    else out = c.all(bias);
  } else {
    out.setZero();
  }
  std::vector<std::pair<Operand, Operand>> products;
  for (size_t slot = product_begin; slot + 1 < c.first.arg_count; slot += 2) {
    const Operand w = c.operand(slot);
    if (c.first.op == ir::Op::matvec || (!w.shared && c.n() > 1)) return per_member_products(c, product_begin);
    products.emplace_back(w, c.operand(slot + 1));
  }
  gemm_columns(c, products);
}

template <typename F>
void unary(const BatchContext& c, F&& f) {
  const ConstMatrix x = c.all(c.operand(0));
  const int64_t total = x.size();
  Array out(c.out, total);
  const ConstArray in(x.data(), total);
  c.split(total, kMinElementsPerTask, [&](int64_t b, int64_t e) { out.segment(b, e - b) = f(in.segment(b, e - b)); });
  c.stats.kernel_calls += 1;
}

template <typename F>
void binary(const BatchContext& c, F&& f) {
  const ConstMatrix a = c.all(c.operand(0)), b = c.all(c.operand(1));
  const int64_t total = a.size();
  Array out(c.out, total);
  const ConstArray x(a.data(), total), y(b.data(), total);
  c.split(total, kMinElementsPerTask,
          [&](int64_t s, int64_t e) { out.segment(s, e - s) = f(x.segment(s, e - s), y.segment(s, e - s)); });
  c.stats.kernel_calls += 1;
}

// Per-column log-sum-exp of a rows x columns matrix.
Eigen::RowVectorXf log_sum_exp(const ConstMatrix& x) {
  const Eigen::RowVectorXf max = x.colwise().maxCoeff();
  return max + ((x.rowwise() - max).array().exp().colwise().sum().log()).matrix();
}

void run_batch(const BatchContext& c) {
  const ir::Node& node = c.first;
  switch (node.op) {
    case ir::Op::input:
    case ir::Op::parameter:
      throw InternalError("batched executor: a leaf was scheduled");
    case ir::Op::lookup: {
      const ir::ParameterInfo& table = c.values.graph.parameter(node.attrs.parameter);
      const int64_t dim = table.shape.rows;
      for (int64_t k = 0; k < c.n(); ++k) {
        const int64_t entry = c.values.graph.node(c.members[size_t(k)]).attrs.index;
        std::memcpy(c.out + k * dim, table.data + entry * dim, sizeof(float) * size_t(dim));
      }
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::matmul:
    case ir::Op::affine:
    case ir::Op::matvec:
      return run_linear(c);
    case ir::Op::add: return binary(c, [](auto x, auto y) { return x + y; });
    case ir::Op::sub: return binary(c, [](auto x, auto y) { return x - y; });
    case ir::Op::cmult: return binary(c, [](auto x, auto y) { return x * y; });
    case ir::Op::scale: {
      const float s = node.attrs.constant;
      return unary(c, [s](auto x) { return x * s; });
    }
    case ir::Op::add_const: {
      const float s = node.attrs.constant;
      return unary(c, [s](auto x) { return x + s; });
    }
    case ir::Op::tanh: return unary(c, [](auto x) { return x.tanh(); });
    case ir::Op::sigmoid: return unary(c, [](auto x) { return x.logistic(); });
    case ir::Op::relu: return unary(c, [](auto x) { return x.max(0.0f); });
    case ir::Op::sum: {
      Matrix out = c.output();
      out = c.all(c.operand(0));
      for (size_t slot = 1; slot < node.arg_count; ++slot) out += c.all(c.operand(slot));
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::concat: {
      // Member k's output column block is [a_k; b_k; ...]: per slot, one strided block copy.
      Matrix out = c.output();
      int64_t row = 0;
      for (size_t slot = 0; slot < node.arg_count; ++slot) {
        const ConstMatrix in = c.all(c.operand(slot));
        out.middleRows(row, in.rows()) = in;
        row += in.rows();
      }
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::slice: {
      const ConstMatrix in = c.all(c.operand(0));
      c.output() = in.middleRows(node.attrs.begin, node.attrs.end - node.attrs.begin);
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::softmax: {
      const ConstMatrix x = c.all(c.operand(0));
      c.output() = ((x.rowwise() - log_sum_exp(x)).array().exp()).matrix();
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::log_softmax: {
      const ConstMatrix x = c.all(c.operand(0));
      c.output() = x.rowwise() - log_sum_exp(x);
      c.stats.kernel_calls += 1;
      return;
    }
    case ir::Op::pick_neg_log_softmax: {
      const ConstMatrix x = c.all(c.operand(0));
      const Eigen::RowVectorXf lse = log_sum_exp(x);
      for (int64_t k = 0; k < c.n(); ++k)
        c.out[k] = lse(k) - x(c.values.graph.node(c.members[size_t(k)]).attrs.index, k);
      c.stats.kernel_calls += 1;
      return;
    }
  }
  throw InternalError("batched executor: unknown op");
}

}  // namespace

float* BatchedExecutor::Scratch::allocate(size_t floats) {
  while (used_block_ < blocks_.size()) {
    std::vector<float>& block = blocks_[used_block_];
    if (block.size() - used_in_block_ >= floats) {
      float* p = block.data() + used_in_block_;
      used_in_block_ += (floats + 15) & ~size_t{15};  // keep 64-byte alignment steps
      return p;
    }
    ++used_block_;
    used_in_block_ = 0;
  }
  blocks_.emplace_back(std::max<size_t>(floats + 16, size_t{1} << 20));
  used_block_ = blocks_.size() - 1;
  used_in_block_ = (floats + 15) & ~size_t{15};
  return blocks_.back().data();
}

BatchedExecutor::BatchedExecutor(int threads) : pool_(threads) {}

void BatchedExecutor::execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) {
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const std::span<const ir::NodeId> members = schedule.batch(b);
    const ir::Node& first = values.graph.node(members[0]);
    const int64_t size = first.shape.size();
    for (size_t k = 1; k < members.size(); ++k)
      if (values.plan.offset[members[k]] != values.plan.offset[members[0]] + int64_t(k) * size)
        throw InternalError("batched executor: batch " + std::to_string(b) +
                            "'s outputs are not consecutive in member order (plan contract C1)");
    scratch_.reset();
    run_batch(BatchContext{values, members, first, values.out(members[0]), scratch_, pool_, stats});
  }
  stats.batches += static_cast<int64_t>(schedule.batch_count());
}

}  // namespace edb::runtime
