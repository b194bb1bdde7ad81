// The public API of edbatch: Model (parameters), Trace (a recording scope), Expr and the ops,
// Cell, Engine (policy, executor, device, threads, memplan, cache directory). Users include only
// this (it includes errors.h, stats.h, version.h); it exposes no LLVM, CUDA or Eigen.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "edbatch/errors.h"
#include "edbatch/stats.h"
#include "edbatch/version.h"

namespace edb {

class Model;
class Trace;
class Engine;
class Cell;
class Optimizer;
namespace detail {
struct ModelState;
struct TraceState;
struct EngineState;
struct InstanceRunner;  // edb::run_instances (edbatch/program.h)
}  // namespace detail

// A dense column-major matrix returned by Expr::value(); vectors are rows x 1.
struct Tensor {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;
  float operator()(int row, int col = 0) const { return data[size_t(col) * rows + row]; }
  float scalar() const;  // the only value of a 1x1 tensor; UsageError otherwise
};

// A handle to a matrix parameter of a Model. Cheap to copy; valid while its Model lives.
class Parameter {
 public:
  Parameter() = default;
  const std::string& name() const;
  int rows() const;
  int cols() const;
  // Column-major, for initialisation and inspection. Writes through the span are seen by every
  // trace evaluated after them, a span kept across evaluations too: compiled cells then compare
  // the values they packed with the parameter's before each use (a read of the whole parameter
  // per batch of calls) and pack them again if any changed. Model::load and Optimizer::step need
  // no such check, and neither does read(), for inspection alone.
  std::span<float> values() const;
  // The same values, read-only: taking them marks nothing, so compiled cells check nothing more.
  std::span<const float> read() const;
  bool valid() const { return model_ != nullptr; }
  friend bool operator==(const Parameter& a, const Parameter& b) {
    return a.model_ == b.model_ && a.index_ == b.index_;
  }

 private:
  friend class Model;
  friend class Trace;
  friend class Optimizer;
  Parameter(detail::ModelState* model, uint32_t index) : model_(model), index_(index) {}
  detail::ModelState* model_ = nullptr;
  uint32_t index_ = 0;
};

// A lookup table: `entries` vectors of `dim` rows (an embedding). Lookup returns one of them.
class LookupTable {
 public:
  LookupTable() = default;
  const std::string& name() const;
  int dim() const;
  int entries() const;
  std::span<float> values() const;  // entry e is values()[e*dim, (e+1)*dim)
  bool valid() const { return model_ != nullptr; }
  friend bool operator==(const LookupTable& a, const LookupTable& b) {
    return a.model_ == b.model_ && a.index_ == b.index_;
  }

 private:
  friend class Model;
  friend class Trace;
  friend class Optimizer;
  LookupTable(detail::ModelState* model, uint32_t index) : model_(model), index_(index) {}
  detail::ModelState* model_ = nullptr;
  uint32_t index_ = 0;
};

// Named parameters with seeded initialisation, saved to and loaded from a checksummed file.
class Model {
 public:
  explicit Model(std::string name = "model", uint64_t seed = 1);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Glorot-uniform initialised; names are unique within a model.
  Parameter add_parameter(const std::string& name, int rows, int cols);
  // Uniform in [-scale, scale] with scale = sqrt(3 / dim).
  LookupTable add_lookup(const std::string& name, int entries, int dim);

  Parameter parameter(const std::string& name) const;  // UsageError when absent
  LookupTable lookup(const std::string& name) const;
  std::vector<Parameter> parameters() const;  // in the order they were added
  std::vector<LookupTable> lookups() const;
  const std::string& name() const;
  size_t parameter_count() const;  // parameters and lookup tables
  int64_t value_count() const;     // floats over all of them

  // Binary file: magic, format version, entries (name, kind, shape, values), checksum.
  void save(const std::string& path) const;
  // Loads values into this model's parameters: every name must exist with the same shape.
  void load(const std::string& path);

 private:
  friend class Optimizer;
  friend void save_training(const Model& model, const Optimizer& optimizer, const std::string& path);
  std::unique_ptr<detail::ModelState> state_;
};

// Which policy, executor and device evaluate traces. Unknown names are a UsageError.
struct EngineOptions {
  std::string policy = "greedy";     // sequential, depth, agenda, greedy, fsm (Q-learned), learned
                                     // (imitates search), search (searches each new trace shape)
  std::string executor = "jit";  // jit (batches of cell calls, and elementwise batches, run by
                                 // kernels LLVM compiles at run time for this CPU; the rest as
                                 // batched), batched (Eigen, one call per batch: the baseline),
                                 // or reference: the unbatched node-by-node oracle
  std::string device = "cpu";        // cpu, cuda (a UsageError naming why when no GPU is usable),
                                     // or auto (cuda when usable, else cpu, saying why once)
  int threads = 1;  // 0: every core; 2 or more: execution overlaps recording, batches split across them
  // Check the IR, schedule and plan between stages, and start each evaluation's new values as
  // NaN, so that one a kernel leaves unwritten shows (tests turn it on).
  bool verify = false;
  bool check_finite = false;  // after each evaluation, look for NaN and infinity in every value
                              // computed; the first one found is a NumericError naming its node
  // The jit executor: a backward pass records one call of a cell's backward body per forward
  // batch of its calls (a batch call, whose members' gradients are read where they lie), and one
  // node per forward batch of the ops whose rules run by batch (a batch node: the loss's and an
  // MLP's gradients); false: one backward call and its output views per call and one node per
  // node's rule, as other executors record it.
  bool batched_backward = true;
  int64_t max_trace_nodes = 0;  // a trace recording more nodes is a UsageError (0: only the IR's
                                // own limit, 2^31; below 0: refused): a guard against runaway recording
  bool cells = true;    // false: a Cell call records its body inline, node by node, as if there
                        // were no cell (the baseline cells are measured against)
  bool memplan = false; // true: lay values out with the PQ-tree planner so batched operands sit in
                        // place (memplan/layout.h); false: each batch's outputs in schedule order
  std::string policy_file;              // fsm, learned: a table saved by save_policy(), loaded at start
  std::string policy_encoding = "base"; // fsm state: "base" (set of ready types) or "sort"
  int64_t search_budget_ms = 200;       // search: time to search one trace shape (its schedule is
                                        // then cached by the trace's structure)
  std::string cache_directory;  // where compiled kernels are kept across processes (executors
                                // that compile: jit); empty: $EDB_CACHE_DIR, else ~/.cache/edbatch
  // Entries each of the engine's in-memory caches keeps (Stats::caches): the jit executor's kernels
  // by batch structure, its compiled cells and the search policy's schedules (least recently used
  // out first), cell records and bodies expanded over calls (dropped together when over), and 16
  // times as many batching signatures (the table starts again, between evaluations, once no trace
  // holds its types, dropping the cell records). At least 1; docs/edb-run.md lists every cache.
  int64_t cache_entries = 1024;
};

// Learning a policy from recorded traces: fsm by tabular n-step Q-learning (docs/design.md); learned by
// imitating a schedule search of each trace, a quarter of the traces held out to report on.
struct PolicyTraining {
  int episodes = 1000;             // fsm: Q-learning episodes at most
  uint64_t seed = 1;
  int64_t search_budget_ms = 2000; // learned: search time per training trace
};

// Counts are batches once cells expand, over the traces trained on (for learned: those fitted).
struct PolicyProgress {
  int episode = 0;           // fsm: episodes run; learned: traces searched
  int episodes = 0;
  int64_t batches = 0;       // fsm: the last rollout; learned: the table's
  int64_t best_batches = 0;  // the kept table's
  int64_t lower_bound = 0;
  int64_t greedy_batches = 0;  // the greedy policy's
  bool beats_greedy = false;   // best_batches < greedy_batches; when false every gain fell back
  bool greedy_fallback = false;  // learned: the table lost to or only tied greedy, so it runs greedy exactly
  int64_t states = 0;          // states (fsm) or (type, feature) scores (learned) the table keeps
  double fallback_rate = 0;    // of the kept table's decisions on the training traces, those left to greedy
  int64_t heldout_traces = 0;  // learned: traces not fitted on, and their batches, greedy's and bound
  int64_t heldout_batches = 0, heldout_greedy_batches = 0, heldout_lower_bound = 0;
  std::string stop_reason;     // why training stopped (set in the final progress)
};

class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const;
  const Stats& stats() const;  // summed over every evaluation since construction or reset
  void reset_stats();
  size_t signature_count() const;  // distinct batching signatures seen

  // policies "fsm" and "learned" only. Learns from traces that were recorded but not evaluated
  // (their graphs are read, not run); keeps the table that needs the fewest batches, never more
  // than greedy. save_policy() warns on stderr when the table learned nothing (all greedy).
  PolicyProgress train_policy(std::span<Trace* const> traces, const PolicyTraining& training = {},
                              const std::function<void(const PolicyProgress&)>& progress = nullptr);
  void save_policy(const std::string& path);

 private:
  friend class Trace;
  friend class Optimizer;  // Optimizer::step(gradients, engine) runs on the engine's threads
  std::unique_ptr<detail::EngineState> state_;
};

// A node of a trace. Cheap to copy. Using an Expr after its Trace has finished is a UsageError.
class Expr {
 public:
  Expr() = default;
  int rows() const;
  int cols() const;
  // Evaluates everything recorded so far (if not yet evaluated) and returns this node's value.
  Tensor value() const;
  float scalar() const { return value().scalar(); }
  // Its value is computed, or being computed: value() would evaluate nothing new, at most wait.
  bool computed() const;
  bool valid() const { return state_ != nullptr; }
  uint32_t node_id() const { return id_; }

 private:
  friend class Trace;
  friend struct detail::TraceState;
  friend struct detail::InstanceRunner;
  Expr(detail::TraceState* state, uint32_t generation, uint32_t id)
      : state_(state), generation_(generation), id_(id) {}
  detail::TraceState* state_ = nullptr;
  uint32_t generation_ = 0;
  uint32_t id_ = 0;
};

// The gradients Trace::backward() computed: the loss's derivative with respect to every parameter
// it depends on (dense), and to every lookup-table entry it read (sparse: only those rows).
struct Gradients {
  struct Dense {
    Parameter parameter;
    Tensor gradient;  // the parameter's shape
  };
  struct Rows {
    LookupTable table;
    std::vector<int64_t> entries;  // ascending, each once
    std::vector<float> gradients;  // entry entries[i]'s gradient at [i * dim, (i + 1) * dim)
  };
  float loss = 0;  // the loss's value
  std::vector<Dense> parameters;
  std::vector<Rows> tables;

  const Tensor* of(const Parameter& parameter) const;  // null when the loss does not depend on it
  const Rows* of(const LookupTable& table) const;      // null when the loss read no entry of it
  void add(const Gradients& other);  // sums another batch's gradients (and losses) into these
};

// A recording scope. Ops record into its graph; nothing runs until run() or Expr::value().
// Destroying (or finish()ing) the trace ends it, and so does destroying its Engine (then using
// the trace is a UsageError). One thread records into a trace at a time.
class Trace {
 public:
  explicit Trace(Engine& engine);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  Expr input(int rows, int cols, std::span<const float> values);  // column-major values
  Expr input(std::span<const float> column);
  Expr input(std::initializer_list<float> column);
  Expr param(Parameter parameter);  // the same node for every use within this trace
  Expr lookup(LookupTable table, int64_t entry);

  // Starts evaluating every node recorded since the last run. With threads >= 2 the execution
  // continues in the background while the caller records more (in this trace or the next);
  // Expr::value() waits for it.
  void run();
  // Records the backward pass of `loss` (1x1) into this trace and evaluates it with the engine's
  // policy, executor and device: every gradient node is batched and planned like the forward ones,
  // and each weight's gradient over all its uses is one matrix product. Differentiates the ops of
  // the op list; gradients flow to parameters and lookup tables (inputs are constants).
  Gradients backward(const Expr& loss);
  // The same, into `gradients`, whose storage is reused: a training loop that keeps one Gradients
  // across its steps allocates (and faults in) its gradients' memory once, not every step.
  // backward(loss, g) is record_backward(loss) and then gradients(g).
  void backward(const Expr& loss, Gradients& gradients);
  // backward() in two halves, for a loop that overlaps steps: record_backward() records the
  // backward pass of `loss`, batches it (with the forward pass, unless that ran) and lays out its
  // memory, evaluating nothing; run() then evaluates both, in the background with threads >= 2, while the caller
  // records the next step in another trace. gradients() waits for the evaluation (starting it if
  // run() was not called) and writes the gradients of the last backward pass recorded here.
  void record_backward(const Expr& loss);
  void gradients(Gradients& gradients);
  void finish();   // ends the trace; its Exprs become invalid
  bool active() const;         // not finished, and its Engine still lives
  bool contains(const Expr& e) const;  // `e` was recorded in this trace, which is active
  size_t node_count() const;   // 0 once finished
  std::string dump() const;    // the recorded IR, one node per line ("" once finished)

 private:
  friend class Engine;
  friend class Cell;
  friend struct detail::InstanceRunner;
  explicit Trace(detail::TraceState* state);  // a scope on a state acquired by the caller
  void record_backward(const Expr& loss, const char* function);  // errors name `function`
  detail::TraceState* state_;
  uint32_t generation_;  // the state's generation while this trace owns it
};

// A static subgraph (an LSTM step, a TreeLSTM node) declared once and called many times. Each
// call is one node of the dynamic graph for the batching policies, and calls of one cell batch
// together; inside, the cell runs its own schedule of fewest batches, found once (per engine) when
// it is first called. The body records with the usual ops on the trace and inputs it is given; it
// must not depend on anything but those inputs, parameters and constants (it is recorded once).
class Cell {
 public:
  using Body = std::function<std::vector<Expr>(Trace& trace, std::span<const Expr> inputs)>;
  // `inputs`: the (rows, cols) of each argument a call passes.
  Cell(std::string name, std::vector<std::pair<int, int>> inputs, Body body);

  // Records one call on arguments of the declared shapes; returns the body's outputs in order.
  std::vector<Expr> operator()(Trace& trace, std::span<const Expr> arguments) const;
  std::vector<Expr> operator()(Trace& trace, std::initializer_list<Expr> arguments) const;
  // The same, writing the outputs into `outputs` (exactly as many as the body returns, else a
  // UsageError) without allocating: for loops that record millions of calls.
  void operator()(Trace& trace, std::span<const Expr> arguments, std::span<Expr> outputs) const;
  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }  // process-unique

 private:
  // Records a call; the outputs go to `vector` when it is not null, else into `span`.
  void record(Trace& trace, std::span<const Expr> arguments, std::vector<Expr>* vector, std::span<Expr> span) const;
  std::string name_;
  std::vector<std::pair<int, int>> inputs_;
  Body body_;
  uint64_t id_;
};

// Ops. Shapes are checked when an op is recorded; a mismatch throws UsageError naming the op and
// both shapes. All arguments must come from the same trace.
// The elementwise ops of two arguments (+, -, cmult, div, max, min, pow) broadcast as DyNet's do:
// where the shapes differ, a dimension of 1 in either argument stretches to the other's (a 1x1
// scales a matrix, a rows x 1 column repeats across the columns, a 1 x cols row down the rows).
Expr matmul(const Expr& a, const Expr& b);
Expr affine(std::initializer_list<Expr> b_w1_x1_w2_x2);  // b + W1 x1 + W2 x2 + ...
Expr affine(std::span<const Expr> b_w1_x1_w2_x2);
Expr matvec(const Expr& matrix, const Expr& vector);  // per-instance matrix
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr cmult(const Expr& a, const Expr& b);  // elementwise product
Expr operator*(const Expr& x, float constant);
Expr operator*(float constant, const Expr& x);
Expr operator+(const Expr& x, float constant);
Expr operator+(float constant, const Expr& x);
Expr operator-(const Expr& x, float constant);  // x + (-constant)
Expr operator-(float constant, const Expr& x);  // x * -1 + constant
Expr operator-(const Expr& x);                  // x * -1
Expr operator/(const Expr& x, float constant);  // x * (1 / constant); UsageError for 0
Expr tanh(const Expr& x);
Expr sigmoid(const Expr& x);
Expr relu(const Expr& x);
Expr sum(std::span<const Expr> xs);
Expr sum(std::initializer_list<Expr> xs);
Expr concat(std::span<const Expr> xs);
Expr concat(std::initializer_list<Expr> xs);
// The arguments' columns side by side (DyNet's concatenate_cols): every argument has as many rows;
// rows x (the sum of their cols). A reshape of their concat (column-major: the same values).
Expr concat_cols(std::span<const Expr> xs);
Expr concat_cols(std::initializer_list<Expr> xs);
Expr slice(const Expr& x, int begin_row, int end_row);  // rows [begin_row, end_row)
Expr reshape(const Expr& x, int rows, int cols);        // the same values (column-major), rows x cols
Expr softmax(const Expr& x);
Expr log_softmax(const Expr& x);
Expr pick_neg_log_softmax(const Expr& x, int64_t label);  // -log softmax(x)[label], 1x1
Expr exp(const Expr& x);
Expr log(const Expr& x);                   // natural log: NaN below 0, -inf at 0
Expr div(const Expr& a, const Expr& b);    // elementwise a / b
Expr max(const Expr& a, const Expr& b);    // elementwise; a NaN in either gives NaN
Expr min(const Expr& a, const Expr& b);
// Unary elementwise ops (DyNet's names); docs/guide.md gives each one's derivative.
Expr sqrt(const Expr& x);                  // NaN below 0; its gradient is infinite at 0
Expr abs(const Expr& x);                   // gradient sign(x), 0 at 0
Expr square(const Expr& x);                // x * x
Expr cube(const Expr& x);                  // x * x * x
Expr softsign(const Expr& x);              // x / (1 + |x|)
Expr silu(const Expr& x);                  // x * sigmoid(x) (swish)
Expr elu(const Expr& x, float alpha = 1.0f);  // x above 0, else alpha (e^x - 1)
Expr selu(const Expr& x);                  // 1.0507010 elu(x, 1.6732632): DyNet's and the paper's constants
Expr log_sigmoid(const Expr& x);           // log(sigmoid(x)), without overflow
Expr erf(const Expr& x);
Expr sin(const Expr& x);                   // sin and cos: radians (the jit's within 2e-7 for |x| <= 8192)
Expr cos(const Expr& x);
Expr sinh(const Expr& x);
Expr cosh(const Expr& x);
Expr round(const Expr& x);                 // half away from zero; round, ceil, floor: gradient 0
Expr ceil(const Expr& x);
Expr floor(const Expr& x);
Expr tan(const Expr& x);                   // radians; as sin and cos, the jit's accurate for |x| < 8192
Expr asinh(const Expr& x);
Expr acosh(const Expr& x);                 // NaN below 1; its gradient is infinite at 1
Expr atanh(const Expr& x);                 // NaN outside [-1, 1], -inf and inf at -1 and 1
Expr asin(const Expr& x);                  // NaN outside [-1, 1]; its gradient is infinite at -1 and 1
Expr acos(const Expr& x);                  // NaN outside [-1, 1]; its gradient is infinite at -1 and 1
Expr atan(const Expr& x);
// x^y elementwise, x and y of one shape, as libm's powf: NaN where x < 0 and y is not whole.
// Gradients y x^(y-1) for x and x^y log(x) for y (NaN at x <= 0: y's only exists above 0).
Expr pow(const Expr& x, const Expr& y);
Expr sum_elements(const Expr& x);          // the sum of all of x's values, 1x1
Expr mean_elements(const Expr& x);         // their mean, 1x1
Expr transpose(const Expr& x);             // rows x cols -> cols x rows
// DyNet's gradient control: x itself, whose gradient the backward pass scales by `scale` (finite):
// nobackprop sends none back (a frozen embedding, a stopped path), flip_gradient sends it negated
// (domain-adversarial training). No copy where the memory plan can view x.
Expr scale_gradient(const Expr& x, float scale);
Expr nobackprop(const Expr& x);     // scale_gradient(x, 0)
Expr flip_gradient(const Expr& x);  // scale_gradient(x, -1)

// Reductions, distances and losses of DyNet's (issue 46), each recorded as batched ops (the
// elementwise ones fuse under the jit executor); docs/guide.md lists which ops and derivatives.
// `dim` 0 reduces over the rows (rows x cols -> 1 x cols), 1 over the columns (-> rows x 1).
Expr logsumexp(std::span<const Expr> xs);  // log(sum_i e^x_i) elementwise, the x_i of one shape
Expr logsumexp(std::initializer_list<Expr> xs);
Expr logsumexp_dim(const Expr& x, int dim);
Expr sum_dim(const Expr& x, int dim);
Expr mean_dim(const Expr& x, int dim);
Expr std_dim(const Expr& x, int dim);      // the population's: the mean square deviation's root
Expr average(std::span<const Expr> xs);    // the elementwise mean, the x_i of one shape
Expr average(std::initializer_list<Expr> xs);
Expr dot_product(const Expr& a, const Expr& b);       // sum_i a_i b_i, 1x1, a and b of one shape
Expr squared_norm(const Expr& x);                     // sum_i x_i^2, 1x1
Expr l2_norm(const Expr& x);                          // its root; the gradient is NaN at x = 0
Expr squared_distance(const Expr& a, const Expr& b);  // sum_i (a_i - b_i)^2, 1x1
Expr l1_distance(const Expr& a, const Expr& b);       // sum_i |a_i - b_i|, 1x1
// sum_i of |d_i|^2 where |d_i| < c, else c (2 |d_i| - c), d = a - b (DyNet's); c > 0.
Expr huber_distance(const Expr& a, const Expr& b, float c = 1.345f);
// sum over rows i != index of max(0, margin - x[index] + x[i]), 1x1; x a column.
Expr hinge(const Expr& x, int64_t index, float margin = 1.0f);
// -sum_i (y_i log x_i + (1 - y_i) log(1 - x_i)), 1x1: x probabilities in (0, 1), y targets.
Expr binary_log_loss(const Expr& x, const Expr& y);
Expr pairwise_rank_loss(const Expr& x, const Expr& y, float margin = 1.0f);  // max(0, margin - x + y) elementwise
// -log Poisson(count; lambda) = lambda - count log(lambda) + log(count!), lambda = e^log_lambda; 1x1.
Expr poisson_loss(const Expr& log_lambda, unsigned count);
// Rows (columns) of x in the order given, repeats allowed: a product with a constant selection matrix.
Expr select_rows(const Expr& x, std::span<const int> rows);
Expr select_rows(const Expr& x, std::initializer_list<int> rows);
Expr select_cols(const Expr& x, std::span<const int> cols);
Expr select_cols(const Expr& x, std::initializer_list<int> cols);
Expr pick(const Expr& x, int index);  // row `index` of x, 1 x cols (of a column, its element, 1x1)
// g (x - mean) / (std + 1e-8) + b over x's rows (DyNet's); x, g, b columns of one shape. NaN
// gradients where all of x's values are equal (std's infinite slope at 0).
Expr layer_norm(const Expr& x, const Expr& g, const Expr& b);
Expr weight_norm(const Expr& w, const Expr& g);  // w g / ||w||, g 1x1 (Salimans and Kingma's)

// Selections of DyNet's (issue 46), ops of their own. A NaN ranks above every number, and of
// equal values the earlier row (column) is taken. Neither lowers into a compiled cell: a cell
// body using them runs by expansion (its body's batches over the calls).
// argmax's gradient, which has no derivative (it is piecewise constant): zero, or dy passed to x
// as is (straight-through, as DyNet's straight_through_gradient).
enum class ArgmaxGradient { zero, straight_through };
// Per column of x, 1 at its largest value (the first at ties) and 0 elsewhere: x's shape.
Expr argmax(const Expr& x, ArgmaxGradient gradient = ArgmaxGradient::zero);
// In each row of x (rows x cols), its k largest values in their column order: rows x k, 1 <= k <=
// cols. The gradient goes to the positions taken, 0 elsewhere.
Expr kmax_pooling(const Expr& x, int k);
// 1-D convolutions and max pooling over columns (DyNet's), each row of x (d x n) on its own,
// recorded as batched ops (docs/guide.md says which). f is d x m: each row filtered by its own.
// Narrow: y[i][j] = sum_k x[i][j + k] f[i][k], d x (n - m + 1), m <= n; wide: the same over x
// padded with m - 1 columns of zeros on each side, d x (n + m - 1).
Expr conv1d_narrow(const Expr& x, const Expr& f);
Expr conv1d_wide(const Expr& x, const Expr& f);
// Column j of the result: the maximum over x's columns j stride .. j stride + window - 1, per row;
// d x ((n - window) / stride + 1). The gradient goes to the column that won, the first at ties.
Expr maxpool1d(const Expr& x, int window, int stride);

// Dropout's mode, chosen by the caller (one value for a trace, typically): inference, or training
// with a seed. The same seed and the same recorded trace give the same masks.
struct DropoutMode {
  bool training = false;
  uint64_t seed = 0;
};
// At inference x itself (no node is recorded). In training each value is zeroed with probability
// p and the others scaled by 1 / (1 - p): recorded as cmult(x, mask) with the mask an input drawn
// now from the seed and the mask's node id, so its gradient is the same mask. 0 <= p < 1.
// Inside a Cell body the mask is drawn when the body is recorded: once per engine with
// EngineOptions::cells on (every call shares it), at each call with cells off. Apply dropout to a
// call's arguments or outputs, outside the body, for masks that do not depend on that option.
Expr dropout(const Expr& x, float p, const DropoutMode& mode);
// DyNet's variants, the same way (x itself at inference; a mask or noise drawn from the seed and
// recorded as an input): dropout_dim draws one value per column (dim 0: whole columns dropped)
// or per row (dim 1); block_dropout one for all of x; noise adds Gaussian noise of stddev.
Expr dropout_dim(const Expr& x, int dim, float p, const DropoutMode& mode);
Expr block_dropout(const Expr& x, float p, const DropoutMode& mode);
Expr noise(const Expr& x, float stddev, const DropoutMode& mode);

}  // namespace edb
