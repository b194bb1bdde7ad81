// The random DAG generator: shapes are compatible by construction (every argument is chosen among
// earlier nodes of the shape it needs, or recorded as a fresh input when there is none).
#include "tests/support/random_graph.h"

#include <algorithm>
#include <functional>
#include <span>

#include "tests/support/rng.h"

namespace edb::testing {

namespace {

int size_index(int size) {
  const auto& sizes = RandomGraphModel::kSizes;
  const auto it = std::find(sizes.begin(), sizes.end(), size);
  return it == sizes.end() ? -1 : static_cast<int>(it - sizes.begin());
}

bool is_size(int rows) { return size_index(rows) >= 0; }

enum class Kind {
  affine1, affine2, matmul, matvec, add, sub, cmult, scale, add_const, tanh, sigmoid, relu, sum,
  concat, slice, softmax, log_softmax, pick, lookup, reshape, exp, log, div, max, min, sum_elements,
  mean_elements, transpose, sqrt, abs, square, cube, softsign, silu, elu, selu, log_sigmoid, erf, sin, cos,
  sinh, cosh, round, ceil, floor, tan, asinh, acosh, atanh, asin, acos, atan, pow, logsumexp, logsumexp_dim, sum_dim, mean_dim,
  std_dim, average, dot_product, squared_norm, l2_norm, squared_distance, l1_distance, huber_distance, hinge,
  binary_log_loss, pairwise_rank_loss, poisson_loss, select_rows, select_cols, pick_row, layer_norm, weight_norm, argmax, kmax_pooling,
  conv1d_narrow, conv1d_wide, maxpool1d, broadcast, concat_cols, scale_gradient, count
};

// Row splits whose totals are sizes, for concat.
const std::vector<std::vector<int>> kConcatParts = {
    {2, 2}, {2, 3}, {3, 2}, {3, 5}, {5, 3}, {4, 4}, {1, 3}, {2, 2, 4}, {3, 3, 2}, {4, 2, 2}, {3, 1, 4}};

struct Node {
  Expr expr;
  int rows = 0, cols = 0;
  bool is_op = false;
  int uses = 0;
  const char* op = "input";
};

class Recorder {
 public:
  Recorder(Trace& trace, const RandomGraphModel& model, const RandomGraphOptions& options)
      : trace_(trace), model_(model), options_(options) {}

  void record_instance(Rng& structure, Rng& values, int ops) {
    previous_begin_ = instance_begin_;
    instance_begin_ = nodes_.size();
    s_ = &structure;
    v_ = &values;
    // Two inputs up front, so that early ops share leaves.
    input(size(), 1);
    input(size(), 1);
    for (int i = 0; i < ops; ++i) {
      if (options_.cell_calls > 0 && s_->chance(options_.cell_calls)) call_cell();
      record_op(static_cast<Kind>(s_->below(int(Kind::count))));
    }
  }

  // A cell body: `inputs` are the placeholders (or, with cells off, the call's arguments); records
  // `ops` ops and returns up to three sinks (always the last op) as the outputs.
  std::vector<Expr> record_body(Rng& structure, Rng& values, std::span<const Expr> inputs, int ops) {
    s_ = &structure;
    v_ = &values;
    for (const Expr& e : inputs) nodes_.push_back({e, e.rows(), e.cols(), false, 0, "input"});
    for (int i = 0; i < ops; ++i) record_op(static_cast<Kind>(s_->below(int(Kind::count))));
    std::vector<Expr> outputs;
    for (size_t i = nodes_.size(); i-- > 0 && outputs.size() < 3;)
      if (nodes_[i].is_op && nodes_[i].uses == 0) outputs.insert(outputs.begin(), nodes_[i].expr);
    return outputs;
  }

  const std::vector<Node>& nodes() const { return nodes_; }
  int cell_calls() const { return cell_calls_; }

 private:
  int size() { return RandomGraphModel::kSizes[size_t(s_->below(int(RandomGraphModel::kSizes.size())))]; }

  size_t add(Expr e, const char* op) {
    nodes_.push_back({e, e.rows(), e.cols(), true, 0, op});
    return nodes_.size() - 1;
  }

  size_t input(int rows, int cols) {
    std::vector<float> data(size_t(rows) * size_t(cols));
    for (float& x : data) x = float(v_->unit() * 2.0 - 1.0);
    nodes_.push_back({trace_.input(rows, cols, data), rows, cols, false, 0, "input"});
    return nodes_.size() - 1;
  }

  // An earlier node satisfying `fits` (mostly of this instance, favouring recent ones), or a new
  // input of rows x cols when none does. Draws the same count of numbers either way. Only exact-
  // shape picks reach into the previous instance, so instances of one template keep their shapes.
  size_t pick(const std::function<bool(const Node&)>& fits, int rows, int cols, bool exact_shape = false) {
    const bool cross = s_->chance(options_.cross_instance) && exact_shape;
    const bool recent = s_->chance(0.5);
    const uint64_t draw = s_->next();
    candidates_.clear();
    if (cross)
      for (size_t i = previous_begin_; i < instance_begin_; ++i)
        if (fits(nodes_[i])) candidates_.push_back(i);
    if (candidates_.empty())
      for (size_t i = instance_begin_; i < nodes_.size(); ++i)
        if (fits(nodes_[i])) candidates_.push_back(i);
    if (candidates_.empty()) return input(rows, cols);
    const size_t n = candidates_.size(), window = std::min<size_t>(n, 3);
    return recent ? candidates_[n - 1 - draw % window] : candidates_[draw % n];
  }
  size_t pick_shape(int rows, int cols) {
    return pick([=](const Node& n) { return n.rows == rows && n.cols == cols; }, rows, cols, true);
  }
  size_t pick_any() {
    const int rows = size();
    return pick([](const Node&) { return true; }, rows, 1);
  }
  size_t pick_vector() {  // a column whose rows a weight can take
    const int rows = size();
    return pick([](const Node& n) { return n.cols == 1 && is_size(n.rows); }, rows, 1);
  }
  Expr use(size_t i) {
    ++nodes_[i].uses;
    return nodes_[i].expr;
  }
  Expr param(Parameter p) { return trace_.param(p); }

  // A call of one of the model's cells on arguments of its declared shapes; each output is a node.
  void call_cell() {
    const int index = s_->below(RandomGraphModel::kCells);
    std::vector<Expr> arguments;
    for (const auto& [rows, cols] : model_.cell_inputs(index)) arguments.push_back(use(pick_shape(rows, cols)));
    const Cell& cell = model_.cell(index);
    for (const Expr& out : cell(trace_, arguments)) add(out, cell.name().c_str());
    ++cell_calls_;
  }

  void record_op(Kind kind) {
    switch (kind) {
      case Kind::affine1: {
        const int rows = size();
        const size_t x = pick_vector();
        const Parameter w = model_.weight(rows, nodes_[x].rows, s_->below(2));
        add(affine({param(model_.bias(rows)), param(w), use(x)}), "affine");
        return;
      }
      case Kind::affine2: {
        const int rows = size();
        const size_t x1 = pick_vector(), x2 = pick_vector();
        const Parameter w1 = model_.weight(rows, nodes_[x1].rows, s_->below(2));
        const Parameter w2 = model_.weight(rows, nodes_[x2].rows, s_->below(2));
        add(affine({param(model_.bias(rows)), param(w1), use(x1), param(w2), use(x2)}), "affine");
        return;
      }
      case Kind::matmul: {
        const int rows = size(), fallback_rows = size(), fallback_cols = s_->chance(0.5) ? 1 : size();
        const size_t b = pick([](const Node& n) { return is_size(n.rows); }, fallback_rows, fallback_cols);
        const Parameter w = model_.weight(rows, nodes_[b].rows, s_->below(2));
        add(matmul(param(w), use(b)), "matmul");
        return;
      }
      case Kind::matvec: {
        const int fallback_rows = size(), fallback_cols = size();
        const size_t m = pick([](const Node& n) { return n.cols > 1; }, fallback_rows, fallback_cols);
        const size_t x = pick_shape(nodes_[m].cols, 1);
        add(matvec(use(m), use(x)), "matvec");
        return;
      }
      case Kind::add:
      case Kind::sub:
      case Kind::cmult: {
        const size_t a = pick_any();
        const size_t b = pick_shape(nodes_[a].rows, nodes_[a].cols);
        if (kind == Kind::add) add(use(a) + use(b), "add");
        else if (kind == Kind::sub) add(use(a) - use(b), "sub");
        else add(cmult(use(a), use(b)), "cmult");
        return;
      }
      case Kind::scale: {
        static constexpr float kScales[] = {0.5f, -1.5f, 2.0f};
        const float c = kScales[s_->below(3)];
        add(use(pick_any()) * c, "scale");
        return;
      }
      case Kind::add_const: {
        static constexpr float kConstants[] = {0.25f, -1.0f, 1.5f};
        const float c = kConstants[s_->below(3)];
        add(use(pick_any()) + c, "add_const");
        return;
      }
      case Kind::tanh: add(edb::tanh(use(pick_any())), "tanh"); return;
      case Kind::sigmoid: add(sigmoid(use(pick_any())), "sigmoid"); return;
      case Kind::relu: add(relu(use(pick_any())), "relu"); return;
      case Kind::softmax: add(softmax(use(pick_any())), "softmax"); return;
      case Kind::log_softmax: add(log_softmax(use(pick_any())), "log_softmax"); return;
      case Kind::sum: {
        const int count = 2 + s_->below(3);
        const size_t first = pick_any();
        std::vector<Expr> terms{use(first)};
        for (int i = 1; i < count; ++i) terms.push_back(use(pick_shape(nodes_[first].rows, nodes_[first].cols)));
        add(sum(terms), "sum");
        return;
      }
      case Kind::concat: {
        const std::vector<int>& parts = kConcatParts[size_t(s_->below(int(kConcatParts.size())))];
        const int cols = s_->chance(0.75) ? 1 : size();
        std::vector<Expr> pieces;
        for (int rows : parts) pieces.push_back(use(pick_shape(rows, cols)));
        add(concat(pieces), "concat");
        return;
      }
      case Kind::slice: {
        const size_t x = pick([](const Node& n) { return n.rows >= 2; }, 8, 1);
        const int rows = nodes_[x].rows;
        std::vector<int> lengths{1};
        for (int s : RandomGraphModel::kSizes)
          if (s < rows) lengths.push_back(s);
        const int length = lengths[size_t(s_->below(int(lengths.size())))];
        const int begin = s_->below(rows - length + 1);
        add(slice(use(x), begin, begin + length), "slice");
        return;
      }
      case Kind::pick: {
        const int fallback_rows = size();
        const size_t x = pick([](const Node& n) { return n.cols == 1 && n.rows >= 2; }, fallback_rows, 1);
        add(pick_neg_log_softmax(use(x), v_->below(nodes_[x].rows)), "pick_neg_log_softmax");
        return;
      }
      case Kind::lookup:
        add(trace_.lookup(model_.table(size()), v_->below(RandomGraphModel::kLookupEntries)), "lookup");
        return;
      case Kind::reshape: {
        // The same values with rows and columns swapped, or as one column.
        const size_t x = pick_any();
        const int rows = nodes_[x].rows, cols = nodes_[x].cols;
        if (s_->chance(0.5)) add(reshape(use(x), cols, rows), "reshape");
        else add(reshape(use(x), rows * cols, 1), "reshape");
        return;
      }
      // exp of tanh (exp multiplies its argument's relative error by |x|: a large x would differ
      // between executors by more than the tolerance), log and div of x^2 + 1 (never near 0).
      case Kind::exp: add(edb::exp(edb::tanh(use(pick_any()))), "exp"); return;
      case Kind::log: {
        const Expr x = use(pick_any());
        add(edb::log(cmult(x, x) + 1.0f), "log");
        return;
      }
      case Kind::div:
      case Kind::max:
      case Kind::min: {
        const size_t a = pick_any();
        const Expr x = use(a), y = use(pick_shape(nodes_[a].rows, nodes_[a].cols));
        if (kind == Kind::div) add(div(x, cmult(y, y) + 1.0f), "div");
        else if (kind == Kind::max) add(edb::max(x, y), "max");
        else add(edb::min(x, y), "min");
        return;
      }
      case Kind::broadcast: {
        // An elementwise op of two shapes (DyNet's broadcasting): a 1x1, a column or a row against
        // a value of the full shape, on either side.
        const size_t a = pick_any();
        const int rows = nodes_[a].rows, cols = nodes_[a].cols, form = s_->below(3);
        const Expr x = use(a), y = use(pick_shape(form == 1 ? rows : 1, form == 2 ? cols : 1));
        const bool swap = s_->chance(0.5);
        const Expr l = swap ? y : x, r = swap ? x : y;
        switch (s_->below(4)) {
          case 0: add(l + r, "add, broadcast"); break;
          case 1: add(l - r, "sub, broadcast"); break;
          case 2: add(cmult(l, r), "cmult, broadcast"); break;
          default: add(div(l, cmult(r, r) + 1.0f), "div, broadcast"); break;
        }
        return;
      }
      case Kind::concat_cols: {
        const size_t a = pick_any();
        const int rows = nodes_[a].rows, more = 1 + s_->below(2);
        std::vector<Expr> parts{use(a)};
        for (int i = 0; i < more; ++i) {
          const int cols = 1 + s_->below(2);
          parts.push_back(use(pick([=](const Node& n) { return n.rows == rows; }, rows, cols)));
        }
        add(concat_cols(parts), "concat_cols");
        return;
      }
      case Kind::scale_gradient: {  // the gradient stopped, flipped or halved on its way back
        const Expr x = use(pick_any());
        const int form = s_->below(3);
        add(form == 0 ? nobackprop(x) : form == 1 ? flip_gradient(x) : scale_gradient(x, 0.5f), "scale_gradient");
        return;
      }
      case Kind::sum_elements: add(sum_elements(use(pick_any())), "sum_elements"); return;
      case Kind::mean_elements: add(mean_elements(use(pick_any())), "mean_elements"); return;
      case Kind::transpose: add(transpose(use(pick_any())), "transpose"); return;
      // sqrt of x^2 + 0.5 (never near 0, where its slope is infinite), cube of tanh (as exp).
      case Kind::sqrt: add(edb::sqrt(edb::square(use(pick_any())) + 0.5f), "sqrt"); return;
      case Kind::abs: add(edb::abs(use(pick_any())), "abs"); return;
      case Kind::square: add(edb::square(use(pick_any())), "square"); return;
      case Kind::cube: add(edb::cube(edb::tanh(use(pick_any()))), "cube"); return;
      case Kind::softsign: add(edb::softsign(use(pick_any())), "softsign"); return;
      case Kind::silu: add(edb::silu(use(pick_any())), "silu"); return;
      case Kind::elu: {
        static constexpr float kAlphas[] = {1.0f, 0.5f};
        add(edb::elu(use(pick_any()), kAlphas[s_->below(2)]), "elu");
        return;
      }
      case Kind::selu: add(edb::selu(use(pick_any())), "selu"); return;
      case Kind::log_sigmoid: add(edb::log_sigmoid(use(pick_any())), "log_sigmoid"); return;
      case Kind::erf: add(edb::erf(use(pick_any())), "erf"); return;
      // sin and cos of 4 tanh(x): a large x's rounding would move the phase past the tolerance;
      // sinh and cosh of tanh, as exp.
      case Kind::sin: add(edb::sin(edb::tanh(use(pick_any())) * 4.0f), "sin"); return;
      case Kind::cos: add(edb::cos(edb::tanh(use(pick_any())) * 4.0f), "cos"); return;
      case Kind::sinh: add(edb::sinh(edb::tanh(use(pick_any()))), "sinh"); return;
      case Kind::cosh: add(edb::cosh(edb::tanh(use(pick_any()))), "cosh"); return;
      // round, ceil and floor of a fresh input times 4 (exact): a computed value, rounded a little
      // differently by each executor, could land on either side of a jump.
      case Kind::round:
      case Kind::ceil:
      case Kind::floor: {
        const Expr x = use(input(size(), 1)) * 4.0f;
        if (kind == Kind::round) add(edb::round(x), "round");
        else if (kind == Kind::ceil) add(edb::ceil(x), "ceil");
        else add(edb::floor(x), "floor");
        return;
      }
      // tan of tanh (|x| < 1, away from its poles), acosh of x^2 + 1.5 (away from 1, where its slope
      // is infinite), atanh of tanh(x) / 2 (inside (-1, 1)), pow of a base in [0.5, 1.5] to an
      // exponent in [-2, 2] (x^y of larger values would differ between executors past the tolerance).
      case Kind::tan: add(edb::tan(edb::tanh(use(pick_any()))), "tan"); return;
      case Kind::asinh: add(edb::asinh(use(pick_any())), "asinh"); return;
      case Kind::acosh: add(edb::acosh(edb::square(use(pick_any())) + 1.5f), "acosh"); return;
      case Kind::atanh: add(edb::atanh(edb::tanh(use(pick_any())) * 0.5f), "atanh"); return;
      // asin and acos of tanh(x) * 0.9 (inside (-1, 1), away from the ends where their slopes are
      // infinite), atan of x.
      case Kind::asin: add(edb::asin(edb::tanh(use(pick_any())) * 0.9f), "asin"); return;
      case Kind::acos: add(edb::acos(edb::tanh(use(pick_any())) * 0.9f), "acos"); return;
      case Kind::atan: add(edb::atan(use(pick_any())), "atan"); return;
      case Kind::pow: {
        const size_t a = pick_any();
        const Expr x = use(a), y = use(pick_shape(nodes_[a].rows, nodes_[a].cols));
        add(edb::pow(edb::sigmoid(x) + 0.5f, edb::tanh(y) * 2.0f), "pow");
        return;
      }
      // Issue 46's reductions, distances and losses. std_dim and l2_norm of x plus a fresh input
      // (never all equal, never all 0: no infinite slope of sqrt at 0), std_dim over a dimension of
      // two or more.
      case Kind::logsumexp:
      case Kind::average:
      case Kind::dot_product:
      case Kind::squared_distance:
      case Kind::l1_distance:
      case Kind::huber_distance:
      case Kind::binary_log_loss:
      case Kind::pairwise_rank_loss: {
        const size_t a = pick_any();
        const Expr x = use(a), y = use(pick_shape(nodes_[a].rows, nodes_[a].cols));
        if (kind == Kind::logsumexp) add(edb::logsumexp({x, y}), "logsumexp");
        else if (kind == Kind::average) add(edb::average({x, y}), "average");
        else if (kind == Kind::dot_product) add(edb::dot_product(x, y), "dot_product");
        else if (kind == Kind::squared_distance) add(edb::squared_distance(x, y), "squared_distance");
        else if (kind == Kind::l1_distance) add(edb::l1_distance(x, y), "l1_distance");
        else if (kind == Kind::huber_distance) add(edb::huber_distance(x, y, 0.5f), "huber_distance");
        // x in [sigmoid(-3), sigmoid(3)]: log(1 - x) of a sigmoid near 1 magnifies each executor's
        // last-bit differences in the sigmoid without bound.
        else if (kind == Kind::binary_log_loss)
          add(edb::binary_log_loss(edb::sigmoid(edb::tanh(x) * 3.0f), edb::sigmoid(y)), "binary_log_loss");
        else add(edb::pairwise_rank_loss(x, y, 0.5f), "pairwise_rank_loss");
        return;
      }
      case Kind::logsumexp_dim:
      case Kind::sum_dim:
      case Kind::mean_dim: {
        const int dim = s_->below(2);
        const Expr x = use(pick_any());
        if (kind == Kind::logsumexp_dim) add(edb::logsumexp_dim(x, dim), "logsumexp_dim");
        else if (kind == Kind::sum_dim) add(edb::sum_dim(x, dim), "sum_dim");
        else add(edb::mean_dim(x, dim), "mean_dim");
        return;
      }
      case Kind::std_dim:
      case Kind::l2_norm: {
        const size_t a = pick_any();
        const int rows = nodes_[a].rows, cols = nodes_[a].cols;
        const Expr x = use(a) + use(input(rows, cols));
        if (kind == Kind::l2_norm) add(edb::l2_norm(x), "l2_norm");
        else if (rows > 1 || cols > 1) add(edb::std_dim(x, rows > 1 ? 0 : 1), "std_dim");
        else add(edb::sum_dim(x, 0), "sum_dim");
        return;
      }
      case Kind::squared_norm: add(edb::squared_norm(use(pick_any())), "squared_norm"); return;
      case Kind::hinge: {
        const size_t x = pick_vector();
        add(edb::hinge(use(x), s_->below(nodes_[x].rows), 0.5f), "hinge");
        return;
      }
      case Kind::poisson_loss: add(edb::poisson_loss(sum_elements(edb::tanh(use(pick_any()))), 3), "poisson_loss"); return;
      // Selections, and layer_norm and weight_norm of x plus a fresh input (never all equal, never
      // all 0, where std and the norm have infinite slopes).
      case Kind::select_rows:
      case Kind::select_cols:
      case Kind::pick_row: {
        const size_t a = pick_any();
        const int rows = nodes_[a].rows, cols = nodes_[a].cols;
        std::vector<int> chosen(size_t(1 + s_->below(3)));
        for (int& i : chosen) i = s_->below(kind == Kind::select_cols ? cols : rows);
        if (kind == Kind::select_rows) add(edb::select_rows(use(a), chosen), "select_rows");
        else if (kind == Kind::select_cols) add(edb::select_cols(use(a), chosen), "select_cols");
        else add(edb::pick(use(a), chosen[0]), "pick");
        return;
      }
      case Kind::layer_norm: {
        const size_t a = pick_vector();
        const int rows = nodes_[a].rows;
        const Expr x = use(a) + use(input(rows, 1));
        add(edb::layer_norm(x, use(pick_shape(rows, 1)), use(pick_shape(rows, 1))), "layer_norm");
        return;
      }
      case Kind::weight_norm: {
        const size_t a = pick_any();
        const Expr w = use(a) + use(input(nodes_[a].rows, nodes_[a].cols));
        add(edb::weight_norm(w, sum_elements(edb::tanh(use(pick_any())))), "weight_norm");
        return;
      }
      // Issue 46's selections by value, of x plus 4 times a fresh input (values spread, so no
      // executor's last-bit difference turns a near tie the other way); argmax times x, with
      // either gradient.
      case Kind::argmax: {
        const size_t a = pick_any();
        const Expr x = use(a);
        const Expr spread = x + use(input(nodes_[a].rows, nodes_[a].cols)) * 4.0f;
        const ArgmaxGradient gradient = s_->chance(0.5) ? ArgmaxGradient::zero : ArgmaxGradient::straight_through;
        add(edb::cmult(edb::argmax(spread, gradient), x), "argmax");
        return;
      }
      case Kind::kmax_pooling: {  // over a matrix's rows, or a column's transpose (a row)
        const size_t a = pick_any();
        const Expr x = nodes_[a].cols > 1 ? use(a) : transpose(use(a));
        const Expr spread = x + use(input(x.rows(), x.cols())) * 4.0f;
        add(edb::kmax_pooling(spread, 1 + s_->below(x.cols())), "kmax_pooling");
        return;
      }
      // conv1d and maxpool1d over a matrix's columns, or a column's transpose (a row); the filter
      // of conv1d has as many rows and 1 to 3 columns (narrow: at most x's).
      case Kind::conv1d_narrow:
      case Kind::conv1d_wide:
      case Kind::maxpool1d: {
        const size_t a = pick_any();
        const Expr x = nodes_[a].cols > 1 ? use(a) : transpose(use(a));
        const int width = 1 + s_->below(std::min(x.cols(), 3));
        if (kind == Kind::maxpool1d) {
          add(edb::maxpool1d(x, width, 1 + s_->below(2)), "maxpool1d");
          return;
        }
        const Expr f = x.rows() == 1 ? transpose(use(pick_shape(width, 1))) : use(pick_shape(x.rows(), width));
        if (kind == Kind::conv1d_narrow) add(edb::conv1d_narrow(x, f), "conv1d_narrow");
        else add(edb::conv1d_wide(x, f), "conv1d_wide");
        return;
      }
      case Kind::count: break;
    }
  }

  Trace& trace_;
  const RandomGraphModel& model_;
  const RandomGraphOptions& options_;
  Rng* s_ = nullptr;  // structure: ops, shapes, constants, which nodes are reused
  Rng* v_ = nullptr;  // data: input values, lookup entries, labels
  std::vector<Node> nodes_;
  std::vector<size_t> candidates_;
  size_t instance_begin_ = 0, previous_begin_ = 0;
  int cell_calls_ = 0;
};

}  // namespace

RandomGraphModel::RandomGraphModel() : model_("random_graph", 11) {
  for (int rows : kSizes) {
    for (int cols : kSizes)
      for (int variant = 0; variant < 2; ++variant)
        weights_.push_back(model_.add_parameter(
            "W" + std::to_string(rows) + "x" + std::to_string(cols) + "_" + std::to_string(variant), rows, cols));
    biases_.push_back(model_.add_parameter("b" + std::to_string(rows), rows, 1));
    tables_.push_back(model_.add_lookup("E" + std::to_string(rows), kLookupEntries, rows));
  }
  // Cells: declared shapes and body size from the cell's own seed; the body draws its ops, and the
  // values of any constants it records, from fixed seeds, so every call records the same body.
  cells_.reserve(kCells);  // no reallocation: nodes name their op by a cell's name().c_str()
  for (int index = 0; index < kCells; ++index) {
    Rng declared(mix(0xce11, uint64_t(index)));
    std::vector<std::pair<int, int>> inputs;
    const int count = 1 + declared.below(3);
    for (int i = 0; i < count; ++i) {
      const int rows = kSizes[size_t(declared.below(int(kSizes.size())))];
      const int cols = declared.chance(0.8) ? 1 : kSizes[size_t(declared.below(int(kSizes.size())))];
      inputs.push_back({rows, cols});
    }
    const int ops = 2 + declared.below(6);
    cell_inputs_.push_back(inputs);
    cells_.emplace_back("cell_" + std::to_string(index), inputs,
                        [this, index, ops](Trace& trace, std::span<const Expr> in) {
                          static const RandomGraphOptions kBodyOptions;
                          Rng structure(mix(0xce11, 1000 + uint64_t(index)));
                          Rng values(mix(0xce11, 2000 + uint64_t(index)));
                          Recorder body(trace, *this, kBodyOptions);
                          return body.record_body(structure, values, in, ops);
                        });
  }
}

Parameter RandomGraphModel::weight(int rows, int cols, int variant) const {
  return weights_[(size_t(size_index(rows)) * kSizes.size() + size_t(size_index(cols))) * 2 + size_t(variant)];
}
Parameter RandomGraphModel::bias(int rows) const { return biases_[size_t(size_index(rows))]; }
LookupTable RandomGraphModel::table(int dim) const { return tables_[size_t(size_index(dim))]; }

RandomGraph record_random_graph(Trace& trace, const RandomGraphModel& model, uint64_t seed,
                                const RandomGraphOptions& options) {
  Rng graph_rng(mix(seed, 0));
  RandomGraph result;
  result.instances = options.min_instances + graph_rng.below(options.max_instances - options.min_instances + 1);
  Recorder recorder(trace, model, options);
  for (int i = 0; i < result.instances; ++i) {
    // Five in eight instances share template 1, two in eight template 2, one in eight is unique.
    const int shape = graph_rng.below(8);
    Rng structure(mix(seed, shape < 5 ? 1 : shape < 7 ? 2 : 1000 + uint64_t(i)));
    Rng values(mix(seed, 2000 + uint64_t(i)));
    const int ops = options.min_ops + structure.below(options.max_ops - options.min_ops + 1);
    recorder.record_instance(structure, values, ops);
  }
  result.cell_calls = recorder.cell_calls();
  int op_index = 0;
  for (const Node& n : recorder.nodes()) {
    if (!n.is_op) continue;
    ++result.op_nodes;
    const bool sink = n.uses == 0;
    result.sinks += sink ? 1 : 0;
    if (sink || op_index % options.compare_every == 0) {
      result.compared.push_back(n.expr);
      result.ops.push_back(n.op);
    }
    ++op_index;
  }
  return result;
}

}  // namespace edb::testing
