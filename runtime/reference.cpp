// The reference executor: one node at a time, each op written plainly with Eigen maps.
// Dispatch is generated from ir/ops.def, so a new op fails to compile until it is defined here.
#include <Eigen/Core>
#include <cmath>

#include "edbatch/errors.h"
#include "runtime/executor.h"
#include "runtime/call_expansion.h"
#include "runtime/selection.h"

namespace edb::runtime {

namespace {

using ConstMatrix = Eigen::Map<const Eigen::MatrixXf>;
using Matrix = Eigen::Map<Eigen::MatrixXf>;

struct NodeContext {
  const Values& values;
  ir::NodeId id;
  const ir::Node& node;

  ConstMatrix arg(size_t i) const {
    const ir::NodeId a = values.graph.args(node)[i];
    const ir::Shape s = values.graph.node(a).shape;
    return ConstMatrix(values.in(a), s.rows, s.cols);
  }
  size_t arg_count() const { return node.arg_count; }
  Matrix out() const { return Matrix(values.out(id), node.shape.rows, node.shape.cols); }
};

[[noreturn]] void not_executable(const NodeContext& c) {
  throw InternalError("reference executor: leaf %" + std::to_string(c.id) + " was scheduled");
}

void eval_input(const NodeContext& c) { not_executable(c); }
void eval_parameter(const NodeContext& c) { not_executable(c); }
// A cell call runs its body node by node (ReferenceExecutor::execute, through CallExpansion).
void eval_call(const NodeContext& c) {
  throw InternalError("evaluate_node: node %" + std::to_string(c.id) + " is a call of cell '" +
                      c.values.graph.cell(c.node.attrs.index).name + "'; an executor runs calls");
}

void eval_lookup(const NodeContext& c) {
  const ir::ParameterInfo& table = c.values.graph.parameter(c.node.attrs.parameter);
  const int64_t entry = c.node.attrs.index;
  if (entry < 0 || entry >= table.shape.cols)
    throw InternalError("lookup entry out of range at node %" + std::to_string(c.id));
  c.out() = ConstMatrix(table.data + entry * table.shape.rows, table.shape.rows, 1);
}

void eval_matmul(const NodeContext& c) { c.out().noalias() = c.arg(0) * c.arg(1); }
void eval_matvec(const NodeContext& c) { c.out().noalias() = c.arg(0) * c.arg(1); }

void eval_affine(const NodeContext& c) {
  Matrix out = c.out();
  out = c.arg(0);
  for (size_t i = 1; i < c.arg_count(); i += 2) out.noalias() += c.arg(i) * c.arg(i + 1);
}

void eval_add(const NodeContext& c) { c.out() = c.arg(0) + c.arg(1); }
void eval_sub(const NodeContext& c) { c.out() = c.arg(0) - c.arg(1); }
void eval_cmult(const NodeContext& c) { c.out() = c.arg(0).cwiseProduct(c.arg(1)); }
void eval_scale(const NodeContext& c) { c.out() = c.arg(0) * c.node.attrs.constant; }
void eval_add_const(const NodeContext& c) {
  c.out() = c.arg(0).array() + c.node.attrs.constant;
}
void eval_tanh(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return std::tanh(v); });
}
void eval_sigmoid(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return 1.0f / (1.0f + std::exp(-v)); });
}
void eval_relu(const NodeContext& c) { c.out() = c.arg(0).cwiseMax(0.0f); }

void eval_sum(const NodeContext& c) {
  Matrix out = c.out();
  out = c.arg(0);
  for (size_t i = 1; i < c.arg_count(); ++i) out += c.arg(i);
}

void eval_concat(const NodeContext& c) {
  Matrix out = c.out();
  int row = 0;
  for (size_t i = 0; i < c.arg_count(); ++i) {
    ConstMatrix a = c.arg(i);
    out.middleRows(row, a.rows()) = a;
    row += static_cast<int>(a.rows());
  }
}

void eval_slice(const NodeContext& c) {
  c.out() = c.arg(0).middleRows(c.node.attrs.begin, c.node.attrs.end - c.node.attrs.begin);
}

void eval_reshape(const NodeContext& c) {
  const ir::NodeId a = c.values.graph.args(c.node)[0];
  std::copy_n(c.values.in(a), c.node.shape.size(), c.values.out(c.id));
}

void eval_scale_gradient(const NodeContext& c) { eval_reshape(c); }  // x itself

// The oracle's sums: in row order, in double, rounded once. Eigen's vectorized sums start their
// packets at the first aligned entry, so the same values at another address (another trace's
// arena) could round differently; these do not depend on where the values lie.
template <typename Derived>
double total(const Eigen::MatrixBase<Derived>& x) {
  double s = 0.0;
  for (Eigen::Index j = 0; j < x.cols(); ++j)
    for (Eigen::Index i = 0; i < x.rows(); ++i) s += double(x(i, j));
  return s;
}
template <typename Derived>
Eigen::RowVectorXf column_sums(const Eigen::MatrixBase<Derived>& x) {
  Eigen::RowVectorXf sums(x.cols());
  for (Eigen::Index j = 0; j < x.cols(); ++j) sums(j) = float(total(x.col(j)));
  return sums;
}

// Per column: log sum exp, stabilised by the column maximum.
Eigen::RowVectorXf log_sum_exp(const ConstMatrix& x) {
  const Eigen::RowVectorXf max = x.colwise().maxCoeff();
  return max + column_sums((x.rowwise() - max).array().exp().matrix()).array().log().matrix();
}

void eval_softmax(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  c.out() = ((x.rowwise() - log_sum_exp(x)).array().exp()).matrix();
}

void eval_log_softmax(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  c.out() = x.rowwise() - log_sum_exp(x);
}

void eval_pick_neg_log_softmax(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  c.out()(0, 0) = log_sum_exp(x)(0) - x(c.node.attrs.index, 0);
}

void eval_exp(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return std::exp(v); });
}
void eval_log(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return std::log(v); });
}
// The unary ops of issue 46, each as its formula in float (sigmoid as eval_sigmoid's).
void eval_sqrt(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::sqrt(v); }); }
void eval_abs(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::fabs(v); }); }
void eval_square(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return v * v; }); }
void eval_cube(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return v * v * v; }); }
void eval_softsign(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return v / (1.0f + std::fabs(v)); });
}
void eval_silu(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return v / (1.0f + std::exp(-v)); });
}
void eval_elu(const NodeContext& c) {
  const float alpha = c.node.attrs.constant;
  c.out() = c.arg(0).unaryExpr([alpha](float v) { return v > 0 ? v : alpha * std::expm1(v); });
}
void eval_selu(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return ir::kSeluLambda * (v > 0 ? v : ir::kSeluAlpha * std::expm1(v)); });
}
void eval_log_sigmoid(const NodeContext& c) {
  c.out() = c.arg(0).unaryExpr([](float v) { return std::min(v, 0.0f) - std::log1p(std::exp(-std::fabs(v))); });
}
void eval_erf(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::erf(v); }); }
void eval_sin(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::sin(v); }); }
void eval_cos(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::cos(v); }); }
void eval_sinh(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::sinh(v); }); }
void eval_cosh(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::cosh(v); }); }
void eval_round(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::round(v); }); }
void eval_ceil(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::ceil(v); }); }
void eval_floor(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::floor(v); }); }
void eval_tan(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::tan(v); }); }
void eval_asinh(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::asinh(v); }); }
void eval_acosh(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::acosh(v); }); }
void eval_atanh(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::atanh(v); }); }
void eval_asin(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::asin(v); }); }
void eval_acos(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::acos(v); }); }
void eval_atan(const NodeContext& c) { c.out() = c.arg(0).unaryExpr([](float v) { return std::atan(v); }); }
void eval_pow(const NodeContext& c) {
  c.out() = c.arg(0).binaryExpr(c.arg(1), [](float a, float b) { return std::pow(a, b); });
}
// argmax and kmax_pooling: the positions runtime/selection.h's rule picks, then the values.
void eval_argmax(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  Matrix out = c.out();
  out.setZero();
  for (Eigen::Index j = 0; j < x.cols(); ++j) out(argmax_position(x.data() + j * x.rows(), x.rows(), 1), j) = 1.0f;
}
void eval_kmax_pooling(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  Matrix out = c.out();
  std::vector<int64_t> kept;
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    kmax_positions(x.data() + i, x.cols(), x.rows(), out.cols(), kept);
    for (Eigen::Index j = 0; j < out.cols(); ++j) out(i, j) = x(i, kept[size_t(j)]);
  }
}
void eval_div(const NodeContext& c) { c.out() = c.arg(0).cwiseQuotient(c.arg(1)); }
void eval_max(const NodeContext& c) { c.out() = c.arg(0).binaryExpr(c.arg(1), [](float a, float b) { return ir::max_of(a, b); }); }
void eval_min(const NodeContext& c) { c.out() = c.arg(0).binaryExpr(c.arg(1), [](float a, float b) { return ir::min_of(a, b); }); }
void eval_sum_elements(const NodeContext& c) { c.out()(0, 0) = float(total(c.arg(0))); }
void eval_mean_elements(const NodeContext& c) {
  c.out()(0, 0) = float(total(c.arg(0)) / double(c.arg(0).size()));
}
void eval_transpose(const NodeContext& c) { c.out() = c.arg(0).transpose(); }

void eval_matmul_tn(const NodeContext& c) { c.out().noalias() = c.arg(0).transpose() * c.arg(1); }

void eval_matmul_nt(const NodeContext& c) {
  Matrix out = c.out();
  out.setZero();
  for (size_t i = 0; i < c.arg_count(); i += 2) out.noalias() += c.arg(i) * c.arg(i + 1).transpose();
}

void eval_matmul_nt_rows(const NodeContext& c) {
  Matrix out = c.out();
  out.setZero();
  const auto args = c.values.graph.args(c.node);
  const auto rows = c.values.graph.rows(c.node.attrs.index, args.size());
  const int64_t r = c.node.shape.rows, k = c.node.shape.cols;
  for (size_t i = 0; i < args.size(); i += 2)
    out.noalias() += ConstMatrix(c.values.row(args[i], rows[i]), r, 1) * ConstMatrix(c.values.row(args[i + 1], rows[i + 1]), k, 1).transpose();
}

void eval_tanh_grad(const NodeContext& c) {
  c.out() = c.arg(1).cwiseProduct((1.0f - c.arg(0).array().square()).matrix());
}
void eval_sigmoid_grad(const NodeContext& c) {
  c.out() = (c.arg(1).array() * c.arg(0).array() * (1.0f - c.arg(0).array())).matrix();
}
void eval_relu_grad(const NodeContext& c) {
  c.out() = (c.arg(0).array() > 0.0f).select(c.arg(1), 0.0f);
}

void eval_softmax_grad(const NodeContext& c) {
  ConstMatrix y = c.arg(0), dy = c.arg(1);
  const Eigen::RowVectorXf dot = column_sums(y.cwiseProduct(dy));
  c.out() = y.cwiseProduct(dy - dot.replicate(y.rows(), 1));
}

void eval_log_softmax_grad(const NodeContext& c) {
  ConstMatrix y = c.arg(0), dy = c.arg(1);
  c.out() = dy - (y.array().exp().matrix().array().rowwise() * column_sums(dy).array()).matrix();
}

void eval_pick_neg_log_softmax_grad(const NodeContext& c) {
  ConstMatrix x = c.arg(0);
  Matrix out = c.out();
  out = (x.rowwise() - log_sum_exp(x)).array().exp().matrix();
  out(c.node.attrs.index, 0) -= 1.0f;
  out *= c.arg(1)(0, 0);
}

void eval_kmax_pooling_grad(const NodeContext& c) {
  ConstMatrix x = c.arg(0), dy = c.arg(1);
  Matrix out = c.out();
  out.setZero();
  std::vector<int64_t> kept;
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    kmax_positions(x.data() + i, x.cols(), x.rows(), dy.cols(), kept);
    for (Eigen::Index j = 0; j < dy.cols(); ++j) out(i, kept[size_t(j)]) = dy(i, j);
  }
}

}  // namespace

void evaluate_node(const Values& values, ir::NodeId id) {
  const NodeContext context{values, id, values.graph.node(id)};
  if (ir::is_node_batch(context.node))  // recorded only where cells compile (the jit's batched executor)
    throw InternalError("reference executor: node %" + std::to_string(id) + " is a batch of " +
                        std::to_string(context.node.attrs.members) + " members");
  switch (context.node.op) {
#define EDB_OP(name, arity, flags) \
  case ir::Op::name:               \
    eval_##name(context);          \
    return;
#include "ir/ops.def"
#undef EDB_OP
  }
  throw InternalError("reference executor: unknown op at node %" + std::to_string(id));
}

ReferenceExecutor::ReferenceExecutor() : calls_(std::make_unique<CallExpansion>()) {}
ReferenceExecutor::~ReferenceExecutor() = default;

void ReferenceExecutor::set_cache_entries(size_t entries) { calls_->set_capacity(entries); }
void ReferenceExecutor::cache_sizes(CacheSizes& sizes) const { sizes.call_expansions = calls_->sizes(); }
void ReferenceExecutor::forget_cells() { calls_->clear(); }

void ReferenceExecutor::execute(const scheduler::Schedule& schedule, const Values& values,
                                Stats& stats) {
  // Node by node whatever the batches: one call per node computed (a view computes nothing); a
  // cell call is its body's nodes, one by one.
  for (ir::NodeId id : schedule.nodes) {
    if (values.plan.is_view(id)) continue;
    if (values.graph.node(id).op == ir::Op::call) {
      calls_->run(*this, std::span(&id, 1), values, stats, schedule.node_by_node);
      continue;
    }
    evaluate_node(values, id);
    stats.kernel_calls += 1;
  }
}

}  // namespace edb::runtime
