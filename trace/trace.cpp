// Trace scopes, Expr, the op functions (shape-checked at record time) and Engine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "trace/inspect.h"
#include "trace/state.h"

namespace edb {

namespace detail {

namespace {

// The pool of trace states. Never freed (see TraceState); reuse keeps graphs' and arenas' capacity.
struct TracePool {
  std::mutex mutex;
  std::vector<std::unique_ptr<TraceState>> all;
  std::vector<TraceState*> free;
};

TracePool& pool() {
  static TracePool* p = new TracePool;  // intentionally leaked: Exprs may outlive static destructors
  return *p;
}

}  // namespace

TraceState* TraceState::acquire(EngineState* engine) {
  TracePool& p = pool();
  std::lock_guard lock(p.mutex);
  TraceState* state;
  if (p.free.empty()) {
    p.all.push_back(std::make_unique<TraceState>());
    state = p.all.back().get();
  } else {
    state = p.free.back();
    p.free.pop_back();
  }
  state->active = true;
  state->engine = engine;
  return state;
}

void TraceState::node_limit_error(int64_t limit) {
  throw UsageError("edb::Trace: the trace already holds " + std::to_string(limit) +
                   " nodes, EngineOptions::max_trace_nodes; evaluate it and record the rest in a new trace, "
                   "or raise the limit");
}

void TraceState::captured_value_error(const std::string& cell, const std::string& function, size_t argument) {
  throw UsageError("edb::Cell: cell '" + cell + "': the body reads a value recorded outside it (argument " +
                   std::to_string(argument) + " of " + function +
                   "); a body may use only its arguments, parameters and constants: pass the value to the cell "
                   "as an argument");
}

void TraceState::release() {
  engine->driver.drain(data);  // a queued execution still writes into this state's arena
  data.clear();
  cell_scope.clear();
  parameter_nodes.clear();
  filled_nodes.clear();
  tables.clear();
  backward_loss = ir::kNoNode;
  backward_leaves.clear();
  call_nodes = 0;
  renumbered.clear();
  // Under the pool's lock: another engine's release_all() reads every state's active and engine.
  TracePool& p = pool();
  std::lock_guard lock(p.mutex);
  // Between evaluations, once no other trace of the engine is alive: cell records over their
  // bound are dropped, and a signature table over its bound starts again, with the cell records
  // (their bodies' types, the compiled cells' keys) dropped first.
  if (std::none_of(p.all.begin(), p.all.end(), [&](const auto& other) {
        return other.get() != this && other->active && other->engine == engine;
      })) {
    const bool signatures_over = engine->driver.signatures_over_bound();
    bound_cell_records(*engine, signatures_over);
    if (signatures_over) engine->driver.reset_signatures();
  }
  ++generation;
  active = false;
  engine = nullptr;
  p.free.push_back(this);
}

void TraceState::release_all(EngineState* engine) {
  std::vector<TraceState*> owned;
  {
    TracePool& p = pool();
    std::lock_guard lock(p.mutex);
    for (const auto& state : p.all)
      if (state->active && state->engine == engine) owned.push_back(state.get());
  }
  for (TraceState* state : owned) state->release();
}

EngineState::EngineState(const EngineOptions& options) : driver(options) {
  const EngineOptions& chosen = driver.options();  // with the device auto resolves to
  const runtime::Capabilities can = driver.capabilities();
  lower_cells = can.lowers_cells && !chosen.check_finite;
  batch_backward_calls = lower_cells && can.node_batches && chosen.batched_backward;
  driver.cell_records.max_entries = chosen.cache_entries;
}

ir::NodeId TraceState::parameter_node(const ir::ParameterInfo& info) {
  for (const auto& [seen, node] : parameter_nodes)
    if (seen == info.uid) return node;
  ir::Attributes attrs;
  attrs.parameter = data.graph.add_parameter(info);
  const ir::NodeId id = add(ir::Op::parameter, {}, info.shape, attrs).node_id();
  parameter_nodes.emplace_back(info.uid, id);
  return id;
}

TraceState& TraceState::of(const Expr& e, const char* function) {
  if (!e.state_) throw UsageError(std::string(function) + ": the expression is empty (default-constructed)");
  const TraceState& s = *e.state_;
  const bool current = e.generation_ == s.generation ||
                       (e.generation_ == s.renumbered_generation && e.id_ < s.renumbered.size());
  if (!current || !s.active)
    throw UsageError(std::string(function) + ": the expression belongs to a trace that has finished");
  e.state_->settle();
  return *e.state_;
}

}  // namespace detail

using detail::TraceState;

// ---- Expr ----

int Expr::rows() const {
  const TraceState& state = TraceState::of(*this, "edb::Expr::rows()");
  return state.data.graph.node(state.id(*this)).shape.rows;
}
int Expr::cols() const {
  const TraceState& state = TraceState::of(*this, "edb::Expr::cols()");
  return state.data.graph.node(state.id(*this)).shape.cols;
}

Tensor Expr::value() const {
  TraceState& state = TraceState::of(*this, "edb::Expr::value()");
  const ir::NodeId id = state.id(*this);
  if (id >= state.data.evaluated) state.engine->driver.submit(state.data);
  state.engine->driver.wait(state.data);
  const ir::Shape shape = state.data.graph.node(id).shape;
  const float* v = state.data.values().in(id);
  return Tensor{shape.rows, shape.cols, std::vector<float>(v, v + shape.size())};
}

bool Expr::computed() const {
  const TraceState& state = TraceState::of(*this, "edb::Expr::computed()");
  return state.id(*this) < state.data.evaluated;
}

detail::EvaluatedTrace detail::evaluated_trace(const Expr& e) {
  TraceState& state = TraceState::of(e, "edb::detail::evaluated_trace()");
  if (state.data.evaluated < state.data.graph.size()) state.engine->driver.submit(state.data);
  state.engine->driver.wait(state.data);
  return {state.data.graph, state.data.schedule, state.engine->driver.signatures};
}

// ---- Trace ----

Trace::Trace(Engine& engine) : state_(TraceState::acquire(engine.state_.get())), generation_(state_->generation) {}

Trace::Trace(TraceState* state) : state_(state), generation_(state->generation) {}

Trace::~Trace() { finish(); }

void Trace::finish() {
  // The state may already have been released by the engine's destructor (and even reused).
  if (active()) state_->release();
  state_ = nullptr;
}

namespace {

TraceState& live(TraceState* state, uint32_t generation, const char* function) {
  if (!state || state->generation != generation || !state->active)
    throw UsageError(std::string(function) + ": the trace has finished (or its Engine was destroyed)");
  state->settle();
  return *state;
}

}  // namespace

Expr Trace::input(int rows, int cols, std::span<const float> values) {
  TraceState& s = live(state_, generation_, "edb::Trace::input()");
  if (rows <= 0 || cols <= 0 || int64_t(rows) * cols != int64_t(values.size()))
    throw UsageError("edb::Trace::input(): shape " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " does not match " + std::to_string(values.size()) + " values");
  ir::Attributes attrs;
  attrs.index = s.data.graph.add_constants(values);
  return s.add(ir::Op::input, {}, ir::Shape{rows, cols}, attrs);
}

Expr Trace::input(std::span<const float> column) { return input(int(column.size()), 1, column); }
Expr Trace::input(std::initializer_list<float> column) {
  return input(std::span<const float>(column.begin(), column.size()));
}

Expr Trace::param(Parameter parameter) {
  TraceState& s = live(state_, generation_, "edb::Trace::param()");
  if (!parameter.model_) throw UsageError("edb::Trace::param(): the parameter handle is empty");
  const uint64_t uid = parameter.model_->at(parameter.index_).uid;
  for (const auto& [seen, node] : s.parameter_nodes)
    if (seen == uid) return s.make(node);
  return s.make(s.parameter_node(parameter.model_->info(parameter.index_)));
}

Expr Trace::lookup(LookupTable table, int64_t entry) {
  TraceState& s = live(state_, generation_, "edb::Trace::lookup()");
  if (!table.model_) throw UsageError("edb::Trace::lookup(): the lookup table handle is empty");
  if (entry < 0 || entry >= table.entries())
    throw UsageError("edb::Trace::lookup(): entry " + std::to_string(entry) + " is outside table '" +
                     table.name() + "' of " + std::to_string(table.entries()) + " entries");
  ir::Attributes attrs;
  attrs.parameter = s.table_index(*table.model_, table.index_);
  attrs.index = entry;
  return s.add(ir::Op::lookup, {}, ir::Shape{table.dim(), 1}, attrs);
}

void Trace::run() {
  TraceState& s = live(state_, generation_, "edb::Trace::run()");
  s.engine->driver.submit(s.data);
}

bool Trace::active() const { return state_ && state_->generation == generation_ && state_->active; }
bool Trace::contains(const Expr& e) const {
  if (!active() || e.state_ != state_) return false;
  return e.generation_ == state_->generation ||
         (e.generation_ == state_->renumbered_generation && e.id_ < state_->renumbered.size());
}
size_t Trace::node_count() const { return active() ? state_->data.graph.size() : 0; }
std::string Trace::dump() const { return active() ? ir::print(state_->data.graph) : std::string(); }

// ---- ops ----

namespace {

constexpr size_t kInlineArgs = 8;

// Records `op` on `args`: checks they share one live trace, infers the shape, appends the node.
const std::string& function_name(ir::Op op) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (int i = 0; i < ir::kOpCount; ++i)
      n.push_back("edb::" + std::string(ir::op_name(static_cast<ir::Op>(i))) + "()");
    return n;
  }();
  return names[static_cast<size_t>(op)];
}

Expr record(ir::Op op, std::span<const Expr> args, const ir::Attributes& attrs = {}) {
  const std::string& function = function_name(op);
  if (args.empty()) throw UsageError(function + ": needs at least one argument");
  TraceState& s = TraceState::of(args[0], function.c_str());
  ir::NodeId ids_inline[kInlineArgs];
  ir::Shape shapes_inline[kInlineArgs];
  std::vector<ir::NodeId> ids_heap;
  std::vector<ir::Shape> shapes_heap;
  ir::NodeId* ids = ids_inline;
  ir::Shape* shapes = shapes_inline;
  if (args.size() > kInlineArgs) {
    ids_heap.resize(args.size());
    shapes_heap.resize(args.size());
    ids = ids_heap.data();
    shapes = shapes_heap.data();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (TraceState& other = TraceState::of(args[i], function.c_str()); &other != &s) {
      // A cell body records in a scope of its own: a value from outside was captured.
      if (!s.cell_scope.empty() || !other.cell_scope.empty())
        TraceState::captured_value_error(!s.cell_scope.empty() ? s.cell_scope : other.cell_scope, function, i + 1);
      throw UsageError(function + ": argument " + std::to_string(i + 1) +
                       " belongs to a different trace than argument 1");
    }
    ids[i] = s.id(args[i]);
    shapes[i] = s.data.graph.node(ids[i]).shape;
  }
  const ir::Shape shape = ir::infer_shape(op, std::span(shapes, args.size()), attrs);
  return s.add(op, std::span(ids, args.size()), shape, attrs);
}

Expr record1(ir::Op op, const Expr& x, const ir::Attributes& attrs = {}) {
  return record(op, std::span(&x, 1), attrs);
}

Expr record2(ir::Op op, const Expr& a, const Expr& b) {
  const Expr args[2] = {a, b};
  return record(op, args);
}

// An elementwise op of two arguments with DyNet's broadcasting: where the shapes differ, a
// dimension of 1 in one argument stretches to the other's (a 1x1 scales or shifts a matrix, a
// column repeats across the columns, a row down the rows). A stretch is recorded as a product
// with a constant of ones (ones(R x 1) x, x ones(1 x C)), so batching, every executor and the
// backward pass (the stretched argument's gradient summed over the dimension it was stretched
// along) are matmul's. Any other mismatch is the op's own error, naming both shapes.
Expr record_elementwise2(ir::Op op, const Expr& a, const Expr& b) {
  const std::string& function = function_name(op);
  TraceState& s = TraceState::of(a, function.c_str());
  if (&TraceState::of(b, function.c_str()) != &s || (a.rows() == b.rows() && a.cols() == b.cols())) return record2(op, a, b);
  const int rows = std::max(a.rows(), b.rows()), cols = std::max(a.cols(), b.cols());
  auto fits = [&](const Expr& x) { return (x.rows() == rows || x.rows() == 1) && (x.cols() == cols || x.cols() == 1); };
  if (!fits(a) || !fits(b)) return record2(op, a, b);
  auto stretch = [&](Expr x) {
    if (x.rows() != rows) x = matmul(detail::filled(s, rows, 1, 1.0f), x);
    if (x.cols() != cols) x = matmul(x, detail::filled(s, 1, cols, 1.0f));
    return x;
  };
  return record2(op, stretch(a), stretch(b));
}

ir::Attributes constant_attr(float constant) {
  ir::Attributes attrs;
  attrs.constant = constant;
  return attrs;
}

}  // namespace

Expr matmul(const Expr& a, const Expr& b) { return record2(ir::Op::matmul, a, b); }
Expr affine(std::span<const Expr> xs) { return record(ir::Op::affine, xs); }
Expr affine(std::initializer_list<Expr> xs) { return affine(std::span(xs.begin(), xs.size())); }
Expr matvec(const Expr& matrix, const Expr& vector) { return record2(ir::Op::matvec, matrix, vector); }
Expr operator+(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::add, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::sub, a, b); }
Expr cmult(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::cmult, a, b); }
Expr operator*(const Expr& x, float c) { return record1(ir::Op::scale, x, constant_attr(c)); }
Expr operator*(float c, const Expr& x) { return x * c; }
Expr operator+(const Expr& x, float c) { return record1(ir::Op::add_const, x, constant_attr(c)); }
Expr operator+(float c, const Expr& x) { return x + c; }
Expr operator-(const Expr& x, float c) { return x + (-c); }
Expr operator-(float c, const Expr& x) { return x * -1.0f + c; }
Expr operator-(const Expr& x) { return x * -1.0f; }
Expr operator/(const Expr& x, float c) {
  if (c == 0.0f) throw UsageError("edb::operator/(Expr, float): division by zero");
  return x * (1.0f / c);
}
Expr tanh(const Expr& x) { return record1(ir::Op::tanh, x); }
Expr sigmoid(const Expr& x) { return record1(ir::Op::sigmoid, x); }
Expr relu(const Expr& x) { return record1(ir::Op::relu, x); }
Expr sum(std::span<const Expr> xs) { return record(ir::Op::sum, xs); }
Expr sum(std::initializer_list<Expr> xs) { return sum(std::span(xs.begin(), xs.size())); }
Expr concat(std::span<const Expr> xs) { return record(ir::Op::concat, xs); }
Expr concat(std::initializer_list<Expr> xs) { return concat(std::span(xs.begin(), xs.size())); }
Expr softmax(const Expr& x) { return record1(ir::Op::softmax, x); }
Expr log_softmax(const Expr& x) { return record1(ir::Op::log_softmax, x); }

Expr exp(const Expr& x) { return record1(ir::Op::exp, x); }
Expr log(const Expr& x) { return record1(ir::Op::log, x); }
Expr sqrt(const Expr& x) { return record1(ir::Op::sqrt, x); }
Expr abs(const Expr& x) { return record1(ir::Op::abs, x); }
Expr square(const Expr& x) { return record1(ir::Op::square, x); }
Expr cube(const Expr& x) { return record1(ir::Op::cube, x); }
Expr softsign(const Expr& x) { return record1(ir::Op::softsign, x); }
Expr silu(const Expr& x) { return record1(ir::Op::silu, x); }
Expr elu(const Expr& x, float alpha) {
  if (!std::isfinite(alpha))
    throw UsageError("edb::elu(): alpha is " + std::to_string(alpha) + "; expected a finite number");
  return record1(ir::Op::elu, x, constant_attr(alpha));
}
Expr selu(const Expr& x) { return record1(ir::Op::selu, x); }
Expr log_sigmoid(const Expr& x) { return record1(ir::Op::log_sigmoid, x); }
Expr erf(const Expr& x) { return record1(ir::Op::erf, x); }
Expr sin(const Expr& x) { return record1(ir::Op::sin, x); }
Expr cos(const Expr& x) { return record1(ir::Op::cos, x); }
Expr sinh(const Expr& x) { return record1(ir::Op::sinh, x); }
Expr cosh(const Expr& x) { return record1(ir::Op::cosh, x); }
Expr round(const Expr& x) { return record1(ir::Op::round, x); }
Expr ceil(const Expr& x) { return record1(ir::Op::ceil, x); }
Expr floor(const Expr& x) { return record1(ir::Op::floor, x); }
Expr tan(const Expr& x) { return record1(ir::Op::tan, x); }
Expr asinh(const Expr& x) { return record1(ir::Op::asinh, x); }
Expr acosh(const Expr& x) { return record1(ir::Op::acosh, x); }
Expr atanh(const Expr& x) { return record1(ir::Op::atanh, x); }
Expr asin(const Expr& x) { return record1(ir::Op::asin, x); }
Expr acos(const Expr& x) { return record1(ir::Op::acos, x); }
Expr atan(const Expr& x) { return record1(ir::Op::atan, x); }
Expr pow(const Expr& x, const Expr& y) { return record_elementwise2(ir::Op::pow, x, y); }
Expr div(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::div, a, b); }
Expr max(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::max, a, b); }
Expr min(const Expr& a, const Expr& b) { return record_elementwise2(ir::Op::min, a, b); }
Expr sum_elements(const Expr& x) { return record1(ir::Op::sum_elements, x); }
Expr scale_gradient(const Expr& x, float scale) { return record1(ir::Op::scale_gradient, x, constant_attr(scale)); }
Expr nobackprop(const Expr& x) { return scale_gradient(x, 0.0f); }
Expr flip_gradient(const Expr& x) { return scale_gradient(x, -1.0f); }
Expr mean_elements(const Expr& x) { return record1(ir::Op::mean_elements, x); }
Expr transpose(const Expr& x) { return record1(ir::Op::transpose, x); }

Expr argmax(const Expr& x, ArgmaxGradient gradient) {
  if (gradient != ArgmaxGradient::zero && gradient != ArgmaxGradient::straight_through)
    throw UsageError("edb::argmax(): gradient is " + std::to_string(int(gradient)) +
                     "; expected ArgmaxGradient::zero or ArgmaxGradient::straight_through");
  return record1(ir::Op::argmax, x, constant_attr(gradient == ArgmaxGradient::straight_through ? 1.0f : 0.0f));
}

Expr kmax_pooling(const Expr& x, int k) {
  TraceState::of(x, "edb::kmax_pooling()");
  if (k < 1 || k > x.cols())
    throw UsageError("edb::kmax_pooling(): k is " + std::to_string(k) + " but x is " + std::to_string(x.rows()) +
                     "x" + std::to_string(x.cols()) + "; expected 1 <= k <= " + std::to_string(x.cols()) +
                     " (x's columns)");
  ir::Attributes attrs;
  attrs.target = ir::Shape{x.rows(), k};
  return record1(ir::Op::kmax_pooling, x, attrs);
}

namespace {

// splitmix64: a well-mixed 64-bit value of its argument (a counter), for dropout's masks.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void check_probability(const char* function, float p) {
  if (!(p >= 0.0f && p < 1.0f)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", double(p));
    throw UsageError(std::string(function) + ": p is " + text + "; expected a probability with 0 <= p < 1");
  }
}

// The random numbers of a mask or of noise: the seed and the node id the input is about to take
// choose them, so a trace recorded again with the same seed draws the same values.
struct Draws {
  uint64_t stream;
  Draws(const TraceState& s, uint64_t seed) : stream(mix(seed ^ mix(uint64_t(s.data.graph.size())))) {}
  float uniform(size_t i) const { return float(mix(stream + i) >> 40) * 0x1.0p-24f; }  // [0, 1) in steps of 2^-24
};

// x times an input of x's shape: the mask of the dropout functions, or x plus one (noise).
Expr with_input(TraceState& s, const Expr& x, const std::vector<float>& values, ir::Op op) {
  ir::Attributes attrs;
  attrs.index = s.data.graph.add_constants(values);
  const Expr m = s.add(ir::Op::input, {}, s.data.graph.node(x.node_id()).shape, attrs);
  return record2(op, x, m);
}

}  // namespace

Expr dropout(const Expr& x, float p, const DropoutMode& mode) {
  TraceState& s = TraceState::of(x, "edb::dropout()");
  check_probability("edb::dropout()", p);
  if (!mode.training || p == 0.0f) return x;
  const Draws draws(s, mode.seed);
  const float kept = 1.0f / (1.0f - p);
  std::vector<float> mask(size_t(x.rows()) * size_t(x.cols()));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = draws.uniform(i) < p ? 0.0f : kept;
  return with_input(s, x, mask, ir::Op::cmult);
}

Expr dropout_dim(const Expr& x, int dim, float p, const DropoutMode& mode) {
  TraceState& s = TraceState::of(x, "edb::dropout_dim()");
  if (dim != 0 && dim != 1)
    throw UsageError("edb::dropout_dim(): dim is " + std::to_string(dim) +
                     "; expected 0 (one draw per column) or 1 (one per row)");
  check_probability("edb::dropout_dim()", p);
  if (!mode.training || p == 0.0f) return x;
  const Draws draws(s, mode.seed);
  const float kept = 1.0f / (1.0f - p);
  const int rows = x.rows(), cols = x.cols();
  std::vector<float> mask(size_t(rows) * size_t(cols));
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r)
      mask[size_t(c) * size_t(rows) + size_t(r)] = draws.uniform(size_t(dim == 0 ? c : r)) < p ? 0.0f : kept;
  return with_input(s, x, mask, ir::Op::cmult);
}

Expr block_dropout(const Expr& x, float p, const DropoutMode& mode) {
  TraceState& s = TraceState::of(x, "edb::block_dropout()");
  check_probability("edb::block_dropout()", p);
  if (!mode.training || p == 0.0f) return x;
  const float value = Draws(s, mode.seed).uniform(0) < p ? 0.0f : 1.0f / (1.0f - p);
  return with_input(s, x, std::vector<float>(size_t(x.rows()) * size_t(x.cols()), value), ir::Op::cmult);
}

Expr noise(const Expr& x, float stddev, const DropoutMode& mode) {
  TraceState& s = TraceState::of(x, "edb::noise()");
  if (!(stddev >= 0.0f) || !std::isfinite(stddev))
    throw UsageError("edb::noise(): stddev is " + std::to_string(stddev) + "; expected a finite number, 0 or more");
  if (!mode.training || stddev == 0.0f) return x;
  // Box-Muller: two uniform draws per value, 1 - u in (0, 1] so the log is finite.
  const Draws draws(s, mode.seed);
  std::vector<float> values(size_t(x.rows()) * size_t(x.cols()));
  for (size_t i = 0; i < values.size(); ++i) {
    const double u = 1.0 - double(draws.uniform(2 * i)), v = double(draws.uniform(2 * i + 1));
    values[i] = float(stddev * std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }
  return with_input(s, x, values, ir::Op::add);
}

Expr slice(const Expr& x, int begin_row, int end_row) {
  ir::Attributes attrs;
  attrs.begin = begin_row;
  attrs.end = end_row;
  return record1(ir::Op::slice, x, attrs);
}

Expr reshape(const Expr& x, int rows, int cols) {
  ir::Attributes attrs;
  attrs.target = ir::Shape{rows, cols};
  return record1(ir::Op::reshape, x, attrs);
}

Expr pick_neg_log_softmax(const Expr& x, int64_t label) {
  ir::Attributes attrs;
  attrs.index = label;
  return record1(ir::Op::pick_neg_log_softmax, x, attrs);
}

// ---- Engine ----

Engine::Engine(EngineOptions options) : state_(std::make_unique<detail::EngineState>(options)) {}
Engine::~Engine() { TraceState::release_all(state_.get()); }
const EngineOptions& Engine::options() const { return state_->driver.options(); }
const Stats& Engine::stats() const { return state_->driver.stats(); }
void Engine::reset_stats() { state_->driver.reset_stats(); }
size_t Engine::signature_count() const { return state_->driver.signatures.size(); }

PolicyProgress Engine::train_policy(std::span<Trace* const> traces, const PolicyTraining& training,
                                    const std::function<void(const PolicyProgress&)>& progress) {
  std::vector<runtime::TraceData*> data;
  for (Trace* trace : traces) {
    TraceState& s = live(trace->state_, trace->generation_, "edb::Engine::train_policy()");
    if (s.engine != state_.get()) throw UsageError("edb::Engine::train_policy(): a trace belongs to another engine");
    data.push_back(&s.data);
  }
  return state_->driver.train_policy(data, training, progress);
}

void Engine::save_policy(const std::string& path) { state_->driver.save_policy(path); }

namespace {

// Every counter and time of `o`, times `sign`, added to `s`.
void accumulate(Stats& s, const Stats& o, int sign) {
  s.nodes += sign * o.nodes;
  s.batches += sign * o.batches;
  s.lower_bound += sign * o.lower_bound;
  s.kernel_calls += sign * o.kernel_calls;
  s.bytes_gathered += sign * o.bytes_gathered;
  s.early_gradient_blocks += sign * o.early_gradient_blocks;
  s.side_by_side_batches += sign * o.side_by_side_batches;
  s.kernels_compiled += sign * o.kernels_compiled;
  s.cache_hits += sign * o.cache_hits;
  s.flops += sign * o.flops;
  s.policy_decisions += sign * o.policy_decisions;
  s.policy_unseen += sign * o.policy_unseen;
  s.time.schedule_ms += sign * o.time.schedule_ms;
  s.time.plan_ms += sign * o.time.plan_ms;
  s.time.compile_ms += sign * o.time.compile_ms;
  s.time.execute_ms += sign * o.time.execute_ms;
  s.time.record_backward_ms += sign * o.time.record_backward_ms;
}

}  // namespace

Stats& Stats::operator+=(const Stats& o) {
  accumulate(*this, o, 1);
  return *this;
}

Stats& Stats::operator-=(const Stats& o) {
  accumulate(*this, o, -1);
  return *this;
}

}  // namespace edb
