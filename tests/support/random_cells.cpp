// The random cell programs: generation (shapes compatible by construction) and recording through
// the public API. Printing and shrinking are random_cells_text.cpp's; comparing executors the tests'.
#include "tests/support/random_cells.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <tuple>

#include "tests/support/rng.h"

namespace edb::testing {

bool is_computed(CellOp::Kind k) {
  return k != CellOp::argument && k != CellOp::input && k != CellOp::param && k != CellOp::lookup && k != CellOp::call;
}

namespace {

constexpr int kSizes[] = {2, 3, 4, 6};

CellOp make_op(CellOp::Kind kind, std::vector<int> args = {}) {
  CellOp op;
  op.kind = kind;
  op.args = std::move(args);
  return op;
}

const char* op_name(CellOp::Kind k) {
  switch (k) {
    case CellOp::argument: return "argument";
    case CellOp::input: return "input";
    case CellOp::param: return "param";
    case CellOp::lookup: return "lookup";
    case CellOp::call: return "call";
    case CellOp::call_output: return "call output";
    case CellOp::matmul: return "matmul";
    case CellOp::affine: return "affine";
    case CellOp::add: return "add";
    case CellOp::sub: return "sub";
    case CellOp::cmult: return "cmult";
    case CellOp::max: return "max";
    case CellOp::div: return "div";
    case CellOp::scale: return "scale";
    case CellOp::add_const: return "add_const";
    case CellOp::tanh: return "tanh";
    case CellOp::sigmoid: return "sigmoid";
    case CellOp::relu: return "relu";
    case CellOp::exp_tanh: return "exp_tanh";
    case CellOp::sqrt_square: return "sqrt_square";
    case CellOp::abs: return "abs";
    case CellOp::square: return "square";
    case CellOp::cube_tanh: return "cube_tanh";
    case CellOp::softsign: return "softsign";
    case CellOp::silu: return "silu";
    case CellOp::elu: return "elu";
    case CellOp::selu: return "selu";
    case CellOp::log_sigmoid: return "log_sigmoid";
    case CellOp::erf: return "erf";
    case CellOp::sin_tanh: return "sin_tanh";
    case CellOp::cos_tanh: return "cos_tanh";
    case CellOp::sinh_tanh: return "sinh_tanh";
    case CellOp::cosh_tanh: return "cosh_tanh";
    case CellOp::tan_tanh: return "tan_tanh";
    case CellOp::asinh: return "asinh";
    case CellOp::acosh_square: return "acosh_square";
    case CellOp::atanh_tanh: return "atanh_tanh";
    case CellOp::asin_tanh: return "asin_tanh";
    case CellOp::acos_tanh: return "acos_tanh";
    case CellOp::atan: return "atan";
    case CellOp::pow: return "pow";
    case CellOp::constant_minus: return "constant_minus";
    case CellOp::minus_constant: return "minus_constant";
    case CellOp::negate: return "negate";
    case CellOp::divide_by_constant: return "divide_by_constant";
    case CellOp::constant_times: return "constant_times";
    case CellOp::constant_plus: return "constant_plus";
    case CellOp::slice: return "slice";
    case CellOp::concat: return "concat";
    case CellOp::sum: return "sum";
    case CellOp::softmax: return "softmax";
    case CellOp::sum_elements: return "sum_elements";
    case CellOp::logsumexp: return "logsumexp";
    case CellOp::average: return "average";
    case CellOp::pairwise_rank_loss: return "pairwise_rank_loss";
    case CellOp::dot_product: return "dot_product";
    case CellOp::squared_distance: return "squared_distance";
    case CellOp::l1_distance: return "l1_distance";
    case CellOp::huber_distance: return "huber_distance";
    case CellOp::squared_norm: return "squared_norm";
    case CellOp::sum_dim_rows: return "sum_dim_rows";
    case CellOp::mean_dim_rows: return "mean_dim_rows";
    case CellOp::logsumexp_dim_rows: return "logsumexp_dim_rows";
    case CellOp::hinge: return "hinge";
    case CellOp::binary_log_loss: return "binary_log_loss";
    case CellOp::poisson_loss: return "poisson_loss";
    case CellOp::pick: return "pick";
    case CellOp::pick_neg_log_softmax: return "pick_neg_log_softmax";
    case CellOp::transpose: return "transpose";
    case CellOp::select_rows_ends: return "select_rows";
    case CellOp::std_dim_plus: return "std_dim";
    case CellOp::l2_norm_plus: return "l2_norm";
    case CellOp::layer_norm_plus: return "layer_norm";
    case CellOp::weight_norm_plus: return "weight_norm";
    case CellOp::argmax_times: return "argmax";
    case CellOp::kmax_rows: return "kmax_pooling";
    case CellOp::conv1d_narrow_rows: return "conv1d_narrow";
    case CellOp::conv1d_wide_rows: return "conv1d_wide";
    case CellOp::maxpool_rows: return "maxpool1d";
    case CellOp::broadcast_scalar: return "broadcast";
    case CellOp::scale_gradient: return "scale_gradient";
  }
  return "?";
}

// The shape an op computes from its arguments' shapes (the generator fills rows and cols with it).
std::pair<int, int> shape_of(const CellOp& op, const std::vector<CellOp>& list) {
  const auto rows = [&](size_t i) { return list[size_t(op.args[i])].rows; };
  const auto cols = [&](size_t i) { return list[size_t(op.args[i])].cols; };
  switch (op.kind) {
    case CellOp::matmul: return {rows(0), cols(1)};
    case CellOp::affine: return {rows(0), cols(0)};
    case CellOp::slice: return {op.end - op.begin, cols(0)};
    case CellOp::concat: {
      int total = 0;
      for (size_t i = 0; i < op.args.size(); ++i) total += rows(i);
      return {total, cols(0)};
    }
    case CellOp::sum_elements:
    case CellOp::dot_product:
    case CellOp::squared_distance:
    case CellOp::l1_distance:
    case CellOp::huber_distance:
    case CellOp::squared_norm:
    case CellOp::sum_dim_rows:
    case CellOp::mean_dim_rows:
    case CellOp::logsumexp_dim_rows:
    case CellOp::hinge:
    case CellOp::binary_log_loss:
    case CellOp::poisson_loss:
    case CellOp::pick:
    case CellOp::pick_neg_log_softmax:
    case CellOp::std_dim_plus:
    case CellOp::l2_norm_plus: return {1, 1};
    case CellOp::transpose: return {cols(0), rows(0)};
    case CellOp::select_rows_ends: return {2, 1};
    case CellOp::kmax_rows: return {op.begin, 1};
    case CellOp::conv1d_narrow_rows: return {rows(0) - rows(1) + 1, 1};
    case CellOp::conv1d_wide_rows: return {rows(0) + rows(1) - 1, 1};
    case CellOp::maxpool_rows: return {(rows(0) - op.begin) / op.end + 1, 1};
    default: return {rows(0), cols(0)};
  }
}

class Generator {
 public:
  Generator(uint64_t seed, const RandomCellOptions& options) : r_(mix(seed, 0xce11)), options_(options) {
    spec_.seed = seed;
  }

  CellProgramSpec generate() {
    const int cells = 1 + r_.below(options_.max_cells);
    shared_block_ = 1 + r_.below(4);
    for (int c = 0; c < cells; ++c) {
      spec_.cells.push_back(body());
      for (const CellOp& op : spec_.cells.back().body)
        if (op.kind == CellOp::param) earlier_body_params_.push_back(op.index);
    }
    slot_variant_.resize(spec_.cells.size());
    calls_of_.assign(spec_.cells.size(), 0);
    const int calls = 1 + r_.below(options_.max_calls);
    int cell = 0;
    for (int k = 0; k < calls; ++k) {
      if (k == 0 || r_.chance(0.6)) cell = r_.below(cells);  // else the same cell again: calls batch
      call(cell);
    }
    // Drawn last, so that the draws before it (the program) are what they were without it.
    if (r_.chance(0.3)) spec_.run_after = r_.below(int(spec_.values.size()));
    return spec_;
  }

 private:
  int size() { return kSizes[r_.below(int(std::size(kSizes)))]; }

  int parameter(int rows, int cols, int variant) {
    for (size_t i = 0; i < spec_.parameters.size(); ++i) {
      const ParameterSpec& p = spec_.parameters[i];
      if (p.rows == rows && p.cols == cols && p.variant == variant) return int(i);
    }
    spec_.parameters.push_back({rows, cols, variant});
    return int(spec_.parameters.size() - 1);
  }
  int table(int dim) {
    for (size_t i = 0; i < spec_.table_dims.size(); ++i)
      if (spec_.table_dims[i] == dim) return int(i);
    spec_.table_dims.push_back(dim);
    return int(spec_.table_dims.size() - 1);
  }

  // ---- bodies ----

  static int push(std::vector<CellOp>& list, CellOp op) {
    if (is_computed(op.kind) && op.kind != CellOp::call_output) std::tie(op.rows, op.cols) = shape_of(op, list);
    list.push_back(std::move(op));
    return int(list.size() - 1);
  }

  struct Body {
    CellSpec cell;
    // 0: shapes drawn freely; else every column the body computes has a multiple of `block` rows
    // and every op lowers to a compiled kernel (runtime/cell_kernels.cpp), slices at any offset.
    int block = 0;
    std::vector<bool> hidden;  // values never used again nor returned (computed, then dropped)
    int add(CellOp op) {
      hidden.push_back(false);
      return push(cell.body, std::move(op));
    }
    const CellOp& at(int i) const { return cell.body[size_t(i)]; }
  };

  // A column size for body `b`: a multiple of its block (up to three blocks), or any of kSizes.
  int size(const Body& b) { return b.block ? b.block * (1 + r_.below(b.block > 3 ? 2 : 3)) : size(); }
  static bool fits(const Body& b, const CellOp& v) { return v.cols == 1 && (b.block == 0 || v.rows % b.block == 0); }

  int new_argument(Body& b, int rows, int cols) {
    b.cell.inputs.push_back({rows, cols});
    CellOp op = make_op(CellOp::argument);
    op.index = int(b.cell.inputs.size() - 1);
    op.rows = rows;
    op.cols = cols;
    return b.add(op);
  }
  int body_param(Body& b, int rows, int cols) {
    CellOp op = make_op(CellOp::param);
    op.index = parameter(rows, cols, r_.chance(0.7) ? 0 : 1);  // variant 0 mostly: cells share parameters
    op.rows = rows;
    op.cols = cols;
    return b.add(op);
  }
  // A body value of rows x cols: mostly an earlier one (recent ones favoured, possibly the one
  // the op already reads: the same value twice), else a new argument or a parameter.
  int pick(Body& b, int rows, int cols, bool parameter_allowed) {
    std::vector<int> candidates;
    for (size_t i = 0; i < b.cell.body.size(); ++i)
      if (!b.hidden[i] && b.at(int(i)).rows == rows && b.at(int(i)).cols == cols) candidates.push_back(int(i));
    const int choice = r_.weighted({60, 20, parameter_allowed ? 20 : 0});
    if (choice == 0 && !candidates.empty()) {
      const size_t n = candidates.size();
      return r_.chance(0.5) ? candidates[n - 1 - size_t(r_.below(int(std::min<size_t>(n, 2))))] : candidates[size_t(r_.below(int(n)))];
    }
    if (choice == 2) return body_param(b, rows, cols);
    return b.cell.inputs.size() < 5 ? new_argument(b, rows, cols) : body_param(b, rows, cols);
  }
  int pick_column(Body& b) {
    std::vector<int> candidates;
    for (size_t i = 0; i < b.cell.body.size(); ++i)
      if (!b.hidden[i] && fits(b, b.at(int(i)))) candidates.push_back(int(i));
    if (!candidates.empty() && r_.chance(0.8)) {
      const size_t n = candidates.size();
      return r_.chance(0.6) ? candidates[n - 1 - size_t(r_.below(int(std::min<size_t>(n, 2))))] : candidates[size_t(r_.below(int(n)))];
    }
    return pick(b, size(b), 1, false);
  }
  // A weight: an argument (the caller passes a parameter, or anything else of its shape) or t.param.
  int weight(Body& b, int rows, int cols) {
    if (r_.chance(0.5)) {
      for (size_t i = 0; i < b.cell.body.size(); ++i)
        if (b.at(int(i)).kind == CellOp::argument && b.at(int(i)).rows == rows && b.at(int(i)).cols == cols && r_.chance(0.5))
          return int(i);
      if (b.cell.inputs.size() < 5) return new_argument(b, rows, cols);
    }
    return body_param(b, rows, cols);
  }

  // A slice at any row offset, often of a longer argument (a 6-row lookup, say).
  int slice_op(Body& b) {
    if (b.block) {
      // A block-aligned length at any offset of a longer column, aligned or not.
      const int rows = size(b), extra = 1 + r_.below(3);
      std::vector<int> longer;
      for (size_t i = 0; i < b.cell.body.size(); ++i)
        if (!b.hidden[i] && b.at(int(i)).cols == 1 && b.at(int(i)).rows > rows) longer.push_back(int(i));
      int x = -1;
      if (!longer.empty() && r_.chance(0.5)) x = longer[size_t(r_.below(int(longer.size())))];
      else x = b.cell.inputs.size() < 5 ? new_argument(b, rows + extra, 1) : body_param(b, rows + extra, 1);
      CellOp op = make_op(CellOp::slice, {x});
      op.begin = r_.below(b.at(x).rows - rows + 1);
      op.end = op.begin + rows;
      return b.add(op);
    }
    int x = -1;
    if (r_.chance(0.4) && b.cell.inputs.size() < 5) x = new_argument(b, 6, 1);
    else {
      x = pick_column(b);
      if (b.at(x).rows < 2) x = b.cell.inputs.size() < 5 ? new_argument(b, 6, 1) : body_param(b, 6, 1);
    }
    const int rows = b.at(x).rows;
    CellOp op = make_op(CellOp::slice, {x});
    op.begin = r_.below(rows - 1);
    op.end = op.begin + 1 + r_.below(rows - op.begin);
    if (op.end - op.begin == rows) op.end = rows - 1 > op.begin ? rows - 1 : op.end;
    return b.add(op);
  }

  // An op on a parameter an earlier cell's body reads: a product by it, or an elementwise op with it.
  int reuse(Body& b) {
    const int index = earlier_body_params_[size_t(r_.below(int(earlier_body_params_.size())))];
    const ParameterSpec p = spec_.parameters[size_t(index)];
    CellOp read = make_op(CellOp::param);
    read.index = index;
    read.rows = p.rows;
    read.cols = p.cols;
    if (p.cols == 1 && (b.block == 0 || p.rows % b.block == 0) && r_.chance(0.6)) {
      static constexpr CellOp::Kind kBinary[] = {CellOp::add, CellOp::sub, CellOp::cmult, CellOp::max};
      const CellOp::Kind k = kBinary[r_.below(4)];
      const int x = pick(b, p.rows, 1, false);
      const int param = b.add(read);
      return r_.chance(0.5) ? b.add(make_op(k, {x, param})) : b.add(make_op(k, {param, x}));
    }
    if (b.block && p.rows % b.block != 0) return body_op(b, false);
    // A product: the parameter as the weight of a matmul or of an affine (then a bias of its rows).
    std::vector<int> columns;
    for (size_t i = 0; i < b.cell.body.size(); ++i)
      if (!b.hidden[i] && b.at(int(i)).rows == p.cols && b.at(int(i)).cols == 1) columns.push_back(int(i));
    const int x = !columns.empty() && r_.chance(0.6) ? columns[size_t(r_.below(int(columns.size())))]
                  : b.cell.inputs.size() < 5         ? new_argument(b, p.cols, 1)
                                                     : body_param(b, p.cols, 1);
    const int weight = b.add(read);
    if (r_.chance(0.5)) return b.add(make_op(CellOp::matmul, {weight, x}));
    const int bias = body_param(b, p.rows, 1);
    return b.add(make_op(CellOp::affine, {bias, weight, x}));
  }

  int body_op(Body& b, bool reuse_allowed = true) {
    // Values of 1x1 (sum_elements and the like), transposes of columns (rows) and the matrices
    // of issue 46's convolutions are not whole blocks: free bodies only, but for argmax of a column,
    // which lowers in blocks (a column step). softmax of a column of whole blocks lowers too.
    const int free = b.block ? 0 : 1;
    const int again = reuse_allowed && !earlier_body_params_.empty() ? 10 : 0;
    const int kind = r_.weighted({16, 12, 12, 6, 20, 16, 5, 3, 3 * free, 2 * free, again, free ? 20 : 2});
    if (kind == 10) return reuse(b);
    if (kind == 11) return issue46_op(b);
    switch (kind) {
      case 0: {  // matmul, weight first
        const int x = pick_column(b);
        const int w = weight(b, size(b), b.at(x).rows);
        return b.add(make_op(CellOp::matmul, {w, x}));
      }
      case 1: {  // affine: bias and weights may be arguments
        const int rows = size(b);
        CellOp op = make_op(CellOp::affine);
        op.args.push_back(r_.chance(0.6) ? body_param(b, rows, 1) : pick(b, rows, 1, true));
        const int pairs = 1 + r_.below(2);
        for (int k = 0; k < pairs; ++k) {
          const int x = pick_column(b);
          op.args.push_back(weight(b, rows, b.at(x).rows));
          op.args.push_back(x);
        }
        return b.add(op);
      }
      case 2: return slice_op(b);
      case 3: {  // concat of 2-3 columns
        CellOp op = make_op(CellOp::concat);
        const int parts = 2 + r_.below(2);
        for (int k = 0; k < parts; ++k) op.args.push_back(pick_column(b));
        return b.add(op);
      }
      case 4: {  // unary
        static constexpr CellOp::Kind kUnary[] = {
            CellOp::tanh,           CellOp::sigmoid,        CellOp::relu,   CellOp::exp_tanh,
            CellOp::scale,          CellOp::add_const,      CellOp::negate, CellOp::constant_minus,
            CellOp::minus_constant, CellOp::divide_by_constant, CellOp::constant_times, CellOp::constant_plus,
            CellOp::sqrt_square,    CellOp::abs,            CellOp::square, CellOp::cube_tanh,
            CellOp::softsign,       CellOp::silu,           CellOp::elu,    CellOp::selu,
            CellOp::log_sigmoid,    CellOp::erf,            CellOp::sin_tanh, CellOp::cos_tanh,
            CellOp::sinh_tanh,      CellOp::cosh_tanh,      CellOp::tan_tanh, CellOp::asinh,
            CellOp::acosh_square,   CellOp::atanh_tanh,     CellOp::asin_tanh, CellOp::acos_tanh,
            CellOp::atan,           CellOp::scale_gradient};
        const CellOp::Kind k = kUnary[r_.below(int(std::size(kUnary)))];
        CellOp op = make_op(k, {pick_column(b)});
        static constexpr float kConstants[] = {0.5f, -1.5f, 2.0f, 0.25f};
        op.constant = kConstants[r_.below(4)];
        return b.add(op);
      }
      case 5: {  // binary, the second operand of the first's shape (possibly itself, or a parameter)
        static constexpr CellOp::Kind kBinary[] = {CellOp::add,       CellOp::sub,     CellOp::cmult,
                                                   CellOp::max,       CellOp::div,     CellOp::pow,
                                                   CellOp::logsumexp, CellOp::average, CellOp::pairwise_rank_loss};
        const CellOp::Kind k = kBinary[r_.below(int(std::size(kBinary)))];
        const int a = pick_column(b);
        const int c = pick(b, b.at(a).rows, b.at(a).cols, true);
        return b.add(make_op(k, {a, c}));
      }
      case 6: {  // sum of 2-3
        const int a = pick_column(b);
        CellOp op = make_op(CellOp::sum, {a});
        const int terms = 1 + r_.below(2);
        for (int k = 0; k < terms; ++k) op.args.push_back(pick(b, b.at(a).rows, 1, true));
        return b.add(op);
      }
      case 7: return b.add(make_op(CellOp::softmax, {pick_column(b)}));
      case 8: {  // to 1x1: sum_elements, or one of issue 46's reductions, distances and losses
        static constexpr CellOp::Kind kToScalar[] = {
            CellOp::sum_elements, CellOp::dot_product,  CellOp::squared_distance, CellOp::l1_distance,
            CellOp::huber_distance, CellOp::squared_norm, CellOp::sum_dim_rows,   CellOp::mean_dim_rows,
            CellOp::logsumexp_dim_rows, CellOp::hinge,  CellOp::binary_log_loss,  CellOp::poisson_loss,
            CellOp::pick,         CellOp::pick_neg_log_softmax};
        const CellOp::Kind k = kToScalar[r_.below(int(std::size(kToScalar)))];
        const int a = pick_column(b);
        const bool two = k == CellOp::dot_product || k == CellOp::squared_distance || k == CellOp::l1_distance ||
                         k == CellOp::huber_distance || k == CellOp::binary_log_loss;
        return b.add(two ? make_op(k, {a, pick(b, b.at(a).rows, 1, true)}) : make_op(k, {a}));
      }
      default: {  // transpose twice: a matrix-shaped detour that ends a column again
        const int t = b.add(make_op(CellOp::transpose, {pick_column(b)}));
        b.hidden[size_t(t)] = true;  // a row vector: not a column for later picks
        return b.add(make_op(CellOp::transpose, {t}));
      }
    }
  }

  // A body input of rows x cols (a constant of the body, its values from the seed).
  int body_input(Body& b, int rows, int cols) {
    CellOp op = make_op(CellOp::input);
    op.rows = rows;
    op.cols = cols;
    return b.add(op);
  }

  // One of issue 46's selections, normalisations, convolutions, poolings and pick_neg_log_softmax,
  // of a column of two or more rows; in a body of blocks, argmax (the others work on values that
  // are not whole blocks, or make a 1x1).
  int issue46_op(Body& b) {
    int a = pick_column(b);
    if (b.at(a).rows < 2) a = pick(b, b.block ? size(b) : size(), 1, false);
    const int rows = b.at(a).rows;
    static constexpr CellOp::Kind kKinds[] = {
        CellOp::select_rows_ends, CellOp::std_dim_plus,       CellOp::l2_norm_plus,      CellOp::layer_norm_plus,
        CellOp::weight_norm_plus, CellOp::argmax_times,       CellOp::kmax_rows,         CellOp::conv1d_narrow_rows,
        CellOp::conv1d_wide_rows, CellOp::maxpool_rows,       CellOp::broadcast_scalar,  CellOp::pick_neg_log_softmax};
    const CellOp::Kind k = b.block ? CellOp::argmax_times : kKinds[r_.below(int(std::size(kKinds)))];
    CellOp op = make_op(k, {a});
    switch (k) {
      case CellOp::select_rows_ends:
      case CellOp::pick_neg_log_softmax: break;
      case CellOp::broadcast_scalar:
        op.args.push_back(pick_column(b));
        op.begin = r_.below(4);
        break;
      case CellOp::std_dim_plus:
      case CellOp::l2_norm_plus:
      case CellOp::weight_norm_plus:
      case CellOp::layer_norm_plus:
      case CellOp::argmax_times:
      case CellOp::kmax_rows: {
        op.args.push_back(body_input(b, rows, 1));  // never all equal, never all 0, no near ties
        if (k == CellOp::layer_norm_plus) {
          op.args.push_back(pick(b, rows, 1, true));
          op.args.push_back(pick(b, rows, 1, true));
        }
        if (k == CellOp::weight_norm_plus) op.args.push_back(pick_column(b));
        if (k == CellOp::argmax_times) op.constant = float(r_.below(2));
        if (k == CellOp::kmax_rows) op.begin = 1 + r_.below(rows);
        break;
      }
      case CellOp::conv1d_narrow_rows:
      case CellOp::conv1d_wide_rows: {
        const int width = 1 + r_.below(std::min(rows, 3));
        op.args.push_back(pick(b, width, 1, true));
        break;
      }
      default:  // maxpool_rows
        op.begin = 1 + r_.below(std::min(rows, 3));
        op.end = 1 + r_.below(2);
        break;
    }
    return b.add(op);
  }

  // A matmul or affine the body computes and then drops (never used, never returned).
  int unreturned(Body& b) {
    const int x = pick_column(b);
    const int rows = size(b);
    const int op = r_.chance(0.5) ? b.add(make_op(CellOp::matmul, {weight(b, rows, b.at(x).rows), x}))
                                  : b.add(make_op(CellOp::affine, {body_param(b, rows, 1), weight(b, rows, b.at(x).rows), x}));
    b.hidden[size_t(op)] = true;
    return op;
  }

  CellSpec body() {
    Body b;
    // Aligned bodies mostly, most of them on the program's block, so that cells' shapes (and so
    // their parameters) meet.
    if (r_.chance(0.65)) b.block = r_.chance(0.7) ? shared_block_ : 1 + r_.below(4);
    // A tidy body returns every value it computes and reads nowhere else; the others drop some
    // (values never read, and matmuls and affines computed only to be dropped).
    const bool tidy = r_.chance(0.45);
    new_argument(b, size(b), 1);
    const int ops = 1 + r_.below(options_.max_body_ops);
    int last = -1;
    for (int k = 0; k < ops; ++k) {
      if (!tidy && r_.chance(0.15)) unreturned(b);
      last = body_op(b);
    }
    if (!tidy && r_.chance(0.15)) unreturned(b);
    // Outputs: the last op, then (tidy) every other value nothing reads, or up to two more computed
    // ones (maybe also read inside the body).
    b.cell.outputs.push_back(last);
    std::vector<int> readers(b.cell.body.size(), 0);
    for (const CellOp& op : b.cell.body)
      for (int a : op.args) ++readers[size_t(a)];
    std::vector<int> others;
    for (size_t i = 0; i < b.cell.body.size(); ++i)
      if (int(i) != last && !b.hidden[i] && is_computed(b.at(int(i)).kind) && (!tidy || readers[i] == 0)) others.push_back(int(i));
    if (tidy) b.cell.outputs.insert(b.cell.outputs.end(), others.begin(), others.end());
    const int more = tidy ? 0 : std::min<int>(r_.below(3), int(others.size()));
    for (int k = 0; k < more; ++k) {
      const int o = others[size_t(r_.below(int(others.size())))];
      if (std::find(b.cell.outputs.begin(), b.cell.outputs.end(), o) == b.cell.outputs.end()) b.cell.outputs.push_back(o);
    }
    if (options_.outputs_may_be_inputs && r_.chance(0.1)) b.cell.outputs.push_back(0);
    if (options_.outputs_may_be_inputs && r_.chance(0.1))
      for (size_t i = 0; i < b.cell.body.size(); ++i)
        if (b.at(int(i)).kind == CellOp::param) {
          b.cell.outputs.push_back(int(i));  // a parameter the body reads, returned as it is
          break;
        }
    return b.cell;
  }

  // ---- calls ----

  int value(CellOp op) { return push(spec_.values, std::move(op)); }

  int program_param(int rows, int cols, int variant) {
    CellOp op = make_op(CellOp::param);
    op.index = parameter(rows, cols, variant);
    op.rows = rows;
    op.cols = cols;
    return value(op);
  }
  int program_input(int rows, int cols) {
    CellOp op = make_op(CellOp::input);
    op.rows = rows;
    op.cols = cols;
    return value(op);
  }
  int program_lookup(int dim) {
    CellOp op = make_op(CellOp::lookup);
    op.index = table(dim);
    op.entry = r_.below(CellProgramSpec::kEntries);
    op.rows = dim;
    op.cols = 1;
    return value(op);
  }
  // An earlier program value of rows x cols that is not a leaf (a call's output or an op), or -1.
  int earlier(int rows, int cols) {
    std::vector<int> candidates;
    for (size_t i = 0; i < spec_.values.size(); ++i) {
      const CellOp& v = spec_.values[i];
      if (is_computed(v.kind) && v.rows == rows && v.cols == cols) candidates.push_back(int(i));
    }
    if (candidates.empty()) return -1;
    const size_t n = candidates.size();
    return r_.chance(0.6) ? candidates[n - 1] : candidates[size_t(r_.below(int(n)))];
  }
  // A column of `rows` rows cut from a longer value: an earlier one, a lookup or a parameter.
  int sliced(int rows) {
    int source = -1;
    std::vector<int> longer;
    for (size_t i = 0; i < spec_.values.size(); ++i)
      if (spec_.values[i].kind != CellOp::call && spec_.values[i].cols == 1 && spec_.values[i].rows > rows)
        longer.push_back(int(i));
    const int choice = r_.weighted({longer.empty() ? 0 : 40, 40, 20});
    const int extra = 1 + r_.below(3);
    if (choice == 0) source = longer[size_t(r_.below(int(longer.size())))];
    else if (choice == 1) source = program_lookup(rows + extra);
    else source = program_param(rows + extra, 1, r_.below(2));
    CellOp op = make_op(CellOp::slice, {source});
    op.begin = r_.below(spec_.values[size_t(source)].rows - rows + 1);
    op.end = op.begin + rows;
    return value(op);
  }

  int argument(int cell, size_t slot, const std::vector<int>& so_far) {
    const auto [rows, cols] = spec_.cells[size_t(cell)].inputs[slot];
    const bool column = cols == 1;
    // 0 shared parameter, 1 parameter per call, 2 input, 3 earlier output, 4 the same as another
    // argument, 5 lookup, 6 slice, 7 concat, 8 an op on an earlier output
    const int choice = column ? r_.weighted({8, 8, 14, 25, 5, 15, 15, 5, 5}) : r_.weighted({35, 35, 10, 15, 5, 0, 0, 0, 0});
    switch (choice) {
      case 0: {
        auto& variants = slot_variant_[size_t(cell)];
        if (variants.size() <= slot) variants.resize(slot + 1, -1);
        if (variants[slot] < 0) variants[slot] = r_.below(2);
        return program_param(rows, cols, variants[slot]);
      }
      case 1: {
        const int count = r_.chance(0.7) ? 2 : 3;
        return program_param(rows, cols, (calls_of_[size_t(cell)] + int(slot)) % count);
      }
      case 3: {
        const int e = earlier(rows, cols);
        if (e >= 0) return e;
        break;
      }
      case 4:
        for (size_t k = 0; k < so_far.size(); ++k) {
          const CellOp& other = spec_.values[size_t(so_far[k])];
          if (other.rows == rows && other.cols == cols) return so_far[k];
        }
        break;
      case 5: return program_lookup(rows);
      case 6: return sliced(rows);
      case 7:
        if (rows >= 2) {
          const int first = 1 + r_.below(rows - 1);
          int a = earlier(first, 1), c = earlier(rows - first, 1);
          if (a < 0) a = r_.chance(0.5) ? program_lookup(first) : program_input(first, 1);
          if (c < 0) c = r_.chance(0.5) ? program_lookup(rows - first) : program_input(rows - first, 1);
          return value(make_op(CellOp::concat, {a, c}));
        }
        break;
      case 8: {
        const int e = earlier(rows, cols);
        if (e >= 0) return value(make_op(r_.chance(0.5) ? CellOp::tanh : CellOp::sigmoid, {e}));
        break;
      }
      default: break;
    }
    return program_input(rows, cols);
  }

  void call(int cell) {
    std::vector<int> arguments;
    for (size_t slot = 0; slot < spec_.cells[size_t(cell)].inputs.size(); ++slot)
      arguments.push_back(argument(cell, slot, arguments));
    CellOp op = make_op(CellOp::call, arguments);
    op.index = cell;
    const int call = value(op);
    for (size_t k = 0; k < spec_.cells[size_t(cell)].outputs.size(); ++k) {
      const CellOp& out = spec_.cells[size_t(cell)].body[size_t(spec_.cells[size_t(cell)].outputs[k])];
      CellOp o = make_op(CellOp::call_output, {call});
      o.index = int(k);
      o.rows = out.rows;
      o.cols = out.cols;
      value(o);
    }
    ++calls_of_[size_t(cell)];
  }

  Rng r_;
  RandomCellOptions options_;
  CellProgramSpec spec_;
  std::vector<std::vector<int>> slot_variant_;  // per cell and argument: the shared parameter's variant
  std::vector<int> calls_of_;
  int shared_block_ = 1;
  std::vector<int> earlier_body_params_;  // parameters the bodies generated so far read
};

// Records op `op` on already recorded arguments.
Expr record_op(const CellOp& op, std::span<const Expr> a) {
  switch (op.kind) {
    case CellOp::matmul: return matmul(a[0], a[1]);
    case CellOp::affine: return affine(a);
    case CellOp::add: return a[0] + a[1];
    case CellOp::sub: return a[0] - a[1];
    case CellOp::cmult: return cmult(a[0], a[1]);
    case CellOp::max: return edb::max(a[0], a[1]);
    case CellOp::div: return div(a[0], cmult(a[1], a[1]) + 1.0f);
    case CellOp::scale: return a[0] * op.constant;
    case CellOp::add_const: return a[0] + op.constant;
    case CellOp::tanh: return edb::tanh(a[0]);
    case CellOp::sigmoid: return sigmoid(a[0]);
    case CellOp::relu: return relu(a[0]);
    case CellOp::exp_tanh: return edb::exp(edb::tanh(a[0]));
    case CellOp::sqrt_square: return edb::sqrt(cmult(a[0], a[0]) + 0.5f);
    case CellOp::abs: return edb::abs(a[0]);
    case CellOp::square: return edb::square(a[0]);
    case CellOp::cube_tanh: return edb::cube(edb::tanh(a[0]));
    case CellOp::softsign: return edb::softsign(a[0]);
    case CellOp::silu: return edb::silu(a[0]);
    case CellOp::elu: return edb::elu(a[0], op.constant);
    case CellOp::selu: return edb::selu(a[0]);
    case CellOp::log_sigmoid: return edb::log_sigmoid(a[0]);
    case CellOp::erf: return edb::erf(a[0]);
    case CellOp::sin_tanh: return edb::sin(edb::tanh(a[0]) * 4.0f);
    case CellOp::cos_tanh: return edb::cos(edb::tanh(a[0]) * 4.0f);
    case CellOp::sinh_tanh: return edb::sinh(edb::tanh(a[0]));
    case CellOp::cosh_tanh: return edb::cosh(edb::tanh(a[0]));
    case CellOp::tan_tanh: return edb::tan(edb::tanh(a[0]));
    case CellOp::asinh: return edb::asinh(a[0]);
    case CellOp::acosh_square: return edb::acosh(edb::square(a[0]) + 1.5f);
    case CellOp::atanh_tanh: return edb::atanh(edb::tanh(a[0]) * 0.5f);
    case CellOp::asin_tanh: return edb::asin(edb::tanh(a[0]) * 0.9f);
    case CellOp::acos_tanh: return edb::acos(edb::tanh(a[0]) * 0.9f);
    case CellOp::atan: return edb::atan(a[0]);
    case CellOp::pow: return edb::pow(edb::sigmoid(a[0]) + 0.5f, edb::tanh(a[1]) * 2.0f);
    case CellOp::constant_minus: return op.constant - a[0];
    case CellOp::minus_constant: return a[0] - op.constant;
    case CellOp::negate: return -a[0];
    case CellOp::divide_by_constant: return a[0] / op.constant;
    case CellOp::constant_times: return op.constant * a[0];
    case CellOp::constant_plus: return op.constant + a[0];
    case CellOp::slice: return slice(a[0], op.begin, op.end);
    case CellOp::concat: return concat(a);
    case CellOp::sum: return sum(a);
    case CellOp::softmax: return softmax(a[0]);
    case CellOp::sum_elements: return sum_elements(a[0]);
    case CellOp::logsumexp: return edb::logsumexp({a[0], a[1]});
    case CellOp::average: return edb::average({a[0], a[1]});
    case CellOp::pairwise_rank_loss: return edb::pairwise_rank_loss(a[0], a[1]);
    case CellOp::dot_product: return edb::dot_product(a[0], a[1]);
    case CellOp::squared_distance: return edb::squared_distance(a[0], a[1]);
    case CellOp::l1_distance: return edb::l1_distance(a[0], a[1]);
    case CellOp::huber_distance: return edb::huber_distance(a[0], a[1]);
    case CellOp::squared_norm: return edb::squared_norm(a[0]);
    case CellOp::sum_dim_rows: return edb::sum_dim(a[0], 0);
    case CellOp::mean_dim_rows: return edb::mean_dim(a[0], 0);
    case CellOp::logsumexp_dim_rows: return edb::logsumexp_dim(a[0], 0);
    case CellOp::hinge: return edb::hinge(a[0], 0);
    case CellOp::binary_log_loss: return edb::binary_log_loss(edb::sigmoid(a[0]), edb::sigmoid(a[1]));
    case CellOp::poisson_loss: return edb::poisson_loss(sum_elements(edb::tanh(a[0])), 2);
    case CellOp::pick: return edb::pick(a[0], 0);
    case CellOp::pick_neg_log_softmax: return edb::pick_neg_log_softmax(a[0], a[0].rows() - 1);
    case CellOp::transpose: return transpose(a[0]);
    case CellOp::select_rows_ends: return edb::select_rows(a[0], {a[0].rows() - 1, 0});
    case CellOp::std_dim_plus: return edb::std_dim(a[0] + a[1], 0);
    case CellOp::l2_norm_plus: return edb::l2_norm(a[0] + a[1]);
    case CellOp::layer_norm_plus: return edb::layer_norm(a[0] + a[1], a[2], a[3]);
    case CellOp::weight_norm_plus: return edb::weight_norm(a[0] + a[1], sum_elements(a[2]));
    case CellOp::argmax_times:
      return cmult(edb::argmax(a[1], op.constant != 0 ? ArgmaxGradient::straight_through : ArgmaxGradient::zero), a[0]);
    case CellOp::kmax_rows: return transpose(edb::kmax_pooling(transpose(a[0] + a[1] * 4.0f), op.begin));
    case CellOp::conv1d_narrow_rows: return transpose(edb::conv1d_narrow(transpose(a[0]), transpose(a[1])));
    case CellOp::conv1d_wide_rows: return transpose(edb::conv1d_wide(transpose(a[0]), transpose(a[1])));
    case CellOp::maxpool_rows: return transpose(edb::maxpool1d(transpose(a[0]), op.begin, op.end));
    case CellOp::scale_gradient: return edb::scale_gradient(a[0], op.constant);
    case CellOp::broadcast_scalar: {
      const Expr s = sum_elements(edb::tanh(a[1]));
      if (op.begin == 0) return a[0] + s;
      if (op.begin == 1) return s - a[0];
      if (op.begin == 2) return cmult(s, a[0]);
      return div(a[0], edb::square(s) + 1.0f);
    }
    default: break;
  }
  throw std::logic_error("random_cells: not an op");
}

}  // namespace

std::vector<float> input_values(uint64_t seed, uint64_t index, int rows, int cols) {
  Rng values(mix(seed, 7000 + index));
  std::vector<float> data(size_t(rows) * size_t(cols));
  for (float& x : data) x = float(values.unit() * 2.0 - 1.0);
  return data;
}

std::string parameter_name(const CellProgramSpec& spec, int index) {
  const ParameterSpec& p = spec.parameters[size_t(index)];
  return "P" + std::to_string(p.rows) + "x" + std::to_string(p.cols) + (p.variant ? "_" + std::to_string(p.variant) : "");
}

CellProgramSpec random_cell_program(uint64_t seed, const RandomCellOptions& options) {
  return Generator(seed, options).generate();
}

CellProgram::CellProgram(CellProgramSpec spec) : spec_(std::move(spec)) {
  model_ = std::make_unique<Model>("random_cells", spec_.seed + 1);
  for (size_t i = 0; i < spec_.parameters.size(); ++i)
    parameters_.push_back(model_->add_parameter(parameter_name(spec_, int(i)), spec_.parameters[i].rows, spec_.parameters[i].cols));
  for (size_t i = 0; i < spec_.table_dims.size(); ++i)
    tables_.push_back(model_->add_lookup("E" + std::to_string(spec_.table_dims[i]), CellProgramSpec::kEntries, spec_.table_dims[i]));
  cells_.reserve(spec_.cells.size());
  for (size_t c = 0; c < spec_.cells.size(); ++c) {
    cells_.emplace_back("cell" + std::to_string(c), spec_.cells[c].inputs, [this, c](Trace& t, std::span<const Expr> in) {
      const CellSpec& cell = spec_.cells[c];
      std::vector<Expr> values(cell.body.size());
      std::vector<Expr> args;
      for (size_t i = 0; i < cell.body.size(); ++i) {
        const CellOp& op = cell.body[i];
        if (op.removed) continue;
        if (op.kind == CellOp::argument) values[i] = in[size_t(op.index)];
        else if (op.kind == CellOp::param) values[i] = t.param(parameters_[size_t(op.index)]);
        else if (op.kind == CellOp::input)
          values[i] = t.input(op.rows, op.cols, input_values(spec_.seed, 100000 + c * 1000 + i, op.rows, op.cols));
        else {
          args.clear();
          for (int a : op.args) args.push_back(values[size_t(a)]);
          values[i] = record_op(op, args);
        }
      }
      std::vector<Expr> outputs;
      for (int o : cell.outputs) outputs.push_back(values[size_t(o)]);
      return outputs;
    });
  }
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const CellOp& v = spec_.values[i];
    if (v.removed || !is_computed(v.kind)) continue;
    std::string name = "v" + std::to_string(i) + " (";
    if (v.kind == CellOp::call_output)
      name += "output " + std::to_string(v.index) + " of a call of cell" + std::to_string(spec_.values[size_t(v.args[0])].index);
    else
      name += op_name(v.kind);
    compared_names_.push_back(name + ")");
  }
}

int CellProgram::call_count() const {
  int calls = 0;
  for (const CellOp& v : spec_.values) calls += !v.removed && v.kind == CellOp::call;
  return calls;
}

std::vector<Expr> CellProgram::record(Trace& t) const {
  std::vector<Expr> values(spec_.values.size()), compared, args;
  std::vector<std::vector<Expr>> outputs(spec_.values.size());
  for (size_t i = 0; i < spec_.values.size(); ++i) {
    const CellOp& v = spec_.values[i];
    if (v.removed) continue;
    args.clear();
    for (int a : v.args) args.push_back(values[size_t(a)]);
    switch (v.kind) {
      case CellOp::input: values[i] = t.input(v.rows, v.cols, input_values(spec_.seed, i, v.rows, v.cols)); break;
      case CellOp::param: values[i] = t.param(parameters_[size_t(v.index)]); break;
      case CellOp::lookup: values[i] = t.lookup(tables_[size_t(v.index)], v.entry); break;
      case CellOp::call: outputs[i] = cells_[size_t(v.index)](t, args); break;
      case CellOp::call_output: values[i] = outputs[size_t(v.args[0])][size_t(v.index)]; break;
      default: values[i] = record_op(v, args); break;
    }
    if (is_computed(v.kind)) compared.push_back(values[i]);
    if (int(i) == spec_.run_after) t.run();  // evaluates what is recorded so far; recording goes on
  }
  return compared;
}

}  // namespace edb::testing
