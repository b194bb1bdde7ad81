// Weight gradients: the contraction of a batch of matmul_nt / matmul_nt_rows members, and its blocks
// run early on the pool's waiting threads (runtime/weight_gradients.h).
#include "runtime/weight_gradients.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "edbatch/errors.h"
#include "runtime/batch_context.h"
#include "runtime/outer_products.h"
#include "scheduler/schedule.h"

namespace edb::runtime {

namespace {

// With two or more threads, a weight's gradient over many uses that no earlier block started is
// cut by uses: each piece packs and multiplies its own uses into its own partial sum, so no piece
// waits for panels another packs (cut by output columns, every panel's packing ran on one thread
// while the others waited, and each panel was a hand-off), and the partial sums are added in piece
// order. More pieces than two threads: a thread the OS has not scheduled leaves the pieces it has
// not started to the others.
constexpr int64_t kMinUsesPerPiece = OuterProducts::kDepth;
constexpr int64_t kMaxUsePieces = 4;

// A block's batch when it waits for one that runs only with the contraction itself.
constexpr int32_t kAtItsBatch = INT32_MAX;

using Split = std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>;

// Column tiles whole, on this thread.
const Split& whole() {
  static const Split split = [](int64_t tiles, const std::function<void(int64_t, int64_t)>& body) { body(0, tiles); };
  return split;
}

// A member's factors: a dy and an x column per use, each pair's arguments (matmul_nt, every
// column of them) or columns at rows of them (matmul_nt_rows).
struct Factors {
  ir::Shape a, b;   // each pair's (columns of a matmul_nt_rows: rows x 1)
  size_t pairs = 0;
  size_t uses() const { return pairs * size_t(a.cols); }
};

Factors factors_of(const ir::Graph& graph, ir::NodeId member) {
  const ir::Node& n = graph.node(member);
  const size_t pairs = n.arg_count / 2;
  if (n.op == ir::Op::matmul_nt_rows) return {{n.shape.rows, 1}, {n.shape.cols, 1}, pairs};
  const auto args = graph.args(member);
  return {graph.node(args[0]).shape, graph.node(args[1]).shape, pairs};
}

// The columns of `member`'s uses [begin, end) (pair after pair, a pair's columns in order) into
// a and b at those uses.
void fill_columns(const Values& values, ir::NodeId member, const Factors& f, size_t begin, size_t end, const float** a,
                  const float** b) {
  const ir::Graph& graph = values.graph;
  const ir::Node& n = graph.node(member);
  const auto args = graph.args(member);
  if (n.op == ir::Op::matmul_nt_rows) {
    const auto rows = graph.rows(n.attrs.index, 2 * f.pairs);
    // values.row reads each factor's node (a call's rows lie in its frame): the nodes lie anywhere
    // in the trace, long out of cache, and are fetched a few pairs ahead (the waits on them were
    // nearly all of this loop's time).
    constexpr size_t kAhead = 8;
    for (size_t i = begin; i < end; ++i) {
      if (i + kAhead < end) {
        __builtin_prefetch(&graph.node(args[2 * (i + kAhead)]));
        __builtin_prefetch(&graph.node(args[2 * (i + kAhead) + 1]));
      }
      a[i] = values.row(args[2 * i], rows[2 * i]);
      b[i] = values.row(args[2 * i + 1], rows[2 * i + 1]);
    }
    return;
  }
  const size_t columns = size_t(f.a.cols);
  for (size_t u = begin; u < end; ++u) {
    const size_t i = u / columns, j = u % columns;
    a[u] = values.in(args[2 * i]) + int64_t(j) * f.a.rows;
    b[u] = values.in(args[2 * i + 1]) + int64_t(j) * f.b.rows;
  }
}

bool is_contraction(ir::Op op) { return op == ir::Op::matmul_nt || op == ir::Op::matmul_nt_rows; }

}  // namespace

// ---- blocks run early ----

void WeightGradients::start(const scheduler::Schedule& schedule, const Values& values, ThreadPool& pool) {
  contractions_.clear();
  pool_ = nullptr;
  next_event_ = SIZE_MAX;
  if (pool.size() < 2 || schedule.nodes.empty()) return;
  const ir::Graph& graph = values.graph;
  bool any = false;
  for (size_t b = 0; b < schedule.batch_count() && !any; ++b) any = is_contraction(graph.node(schedule.batch(b)[0]).op);
  if (!any) return;
  // The batch that writes each node: a view of a call's output (never scheduled) is its call's;
  // a leaf, and a node below the schedule (an earlier evaluation's), are there from the start.
  base_ = *std::min_element(schedule.nodes.begin(), schedule.nodes.end());
  batch_of_.assign(graph.size() - base_, -1);
  for (size_t b = 0; b < schedule.batch_count(); ++b)
    for (ir::NodeId id : schedule.batch(b)) batch_of_[id - base_] = int32_t(b);
  auto producer = [&](ir::NodeId n) -> int32_t {
    for (int step = 0; step < 8; ++step) {
      if (n < base_) return -1;
      if (const int32_t b = batch_of_[n - base_]; b >= 0) return b;
      if (ir::has_flag(graph.node(n).op, ir::kLeaf)) return -1;
      if (graph.args(n).empty()) break;
      n = graph.args(n)[0];
    }
    return kAtItsBatch;
  };
  for (size_t batch = 0; batch < schedule.batch_count(); ++batch) {
    if (!is_contraction(graph.node(schedule.batch(batch)[0]).op)) continue;
    for (ir::NodeId member : schedule.batch(batch)) {
      const Factors f = factors_of(graph, member);
      auto c = std::make_unique<Contraction>();
      c->node = member;
      c->rows = f.a.rows;
      c->cols = f.b.rows;
      c->uses = int64_t(f.uses());
      c->a.resize(f.uses());
      c->b.resize(f.uses());
      const OuterProducts whole_product{c->rows, c->cols, c->a, c->b};
      if (c->uses == 0 || !whole_product.adds_by_blocks()) continue;
      c->depth = whole_product.depth();
      c->blocks = int32_t((c->uses + c->depth - 1) / c->depth);
      // Block j waits for the batches of its uses and of every block before it (they run in order).
      const auto args = graph.args(member);
      const int64_t per_pair = f.a.cols;
      int32_t waits = -1;
      c->ready_after.resize(size_t(c->blocks));
      for (int32_t j = 0; j < c->blocks; ++j) {
        // The pairs whose columns the block holds (a pair of matrices spans columns of two blocks).
        const int64_t end = std::min(c->uses, (j + 1) * c->depth);
        for (int64_t pair = j * c->depth / per_pair; pair <= (end - 1) / per_pair; ++pair)
          waits = std::max({waits, producer(args[size_t(2 * pair)]), producer(args[size_t(2 * pair + 1)])});
        c->ready_after[size_t(j)] = waits >= int32_t(batch) ? kAtItsBatch : waits;
      }
      // Nothing to start before its batch (but its blocks in order there, for the test switch).
      if (c->ready_after[0] == kAtItsBatch && !run_none_ahead.load(std::memory_order_relaxed)) continue;
      c->a_shape = f.a;
      c->b_shape = f.b;
      c->pairs = f.pairs;
      c->out = values.out(member);
      if (run_none_ahead.load(std::memory_order_relaxed)) std::fill(c->ready_after.begin(), c->ready_after.end(), kAtItsBatch);
      int32_t ready = 0;
      while (ready < c->blocks && c->ready_after[size_t(ready)] < 0) ++ready;
      c->ready.store(ready);
      if (ready < c->blocks) next_event_ = std::min(next_event_, size_t(c->ready_after[size_t(ready)]));
      contractions_.push_back(std::move(c));
    }
  }
  if (contractions_.empty()) return;
  values_ = &values;
  pool_ = &pool;
  pool.offer(this);
}

std::atomic<bool> WeightGradients::wait_for_a_taker{false};
std::atomic<bool> WeightGradients::run_none_ahead{false};

void WeightGradients::ran(size_t b) {
  if (b < next_event_ || !pool_) return;
  next_event_ = SIZE_MAX;
  bool more = false;
  for (const auto& c : contractions_) {
    int32_t ready = c->ready.load(std::memory_order_relaxed);  // written by this thread only
    const int32_t before = ready;
    while (ready < c->blocks && c->ready_after[size_t(ready)] <= int32_t(b)) ++ready;
    if (ready != before) {
      c->ready.store(ready, std::memory_order_release);
      more = true;
    }
    if (ready < c->blocks && c->ready_after[size_t(ready)] != kAtItsBatch)
      next_event_ = std::min(next_event_, size_t(c->ready_after[size_t(ready)]));
  }
  if (!more) return;
  pool_->release();
  if (wait_for_a_taker.load(std::memory_order_relaxed)) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (available() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
}

int64_t WeightGradients::stop() {
  if (!pool_) return 0;
  pool_->offer(nullptr);
  pool_ = nullptr;
  return early_.exchange(0);
}

bool WeightGradients::claim(Contraction& c, int32_t& j) {
  j = c.claimed.load(std::memory_order_acquire);
  return c.claimable(j) && c.claimed.compare_exchange_strong(j, j + 1, std::memory_order_acq_rel);
}

int64_t WeightGradients::Contraction::panel_floats() const {
  const size_t first = size_t(std::min(uses, depth));
  return std::max<int64_t>(1, OuterProducts{rows, cols, std::span(a.data(), first), std::span(b.data(), first)}.scratch_floats());
}

void WeightGradients::run_block(Contraction& c, int32_t j, float* panels, const Split& split) {
  const int64_t begin = int64_t(j) * c.depth, count = std::min(c.uses, begin + c.depth) - begin;
  // The block's columns, where its uses lie, by whichever thread runs it (one block of a weight at a
  // time: a pair's entries that two blocks share are written by both, alike).
  fill_columns(*values_, c.node, Factors{c.a_shape, c.b_shape, c.pairs}, size_t(begin), size_t(begin + count), c.a.data(),
               c.b.data());
  const OuterProducts block{c.rows, c.cols, std::span(c.a.data() + begin, size_t(count)),
                            std::span(c.b.data() + begin, size_t(count))};
  try {
    if (j == 0) block.compute(c.out, panels, split);
    else block.accumulate(c.out, panels, split);
  } catch (...) {
    if (!c.error) c.error = std::current_exception();  // blocks run one after another: no race
  }
  c.done.store(j + 1, std::memory_order_release);
}

bool WeightGradients::available() const {
  for (const auto& c : contractions_)
    if (c->claimable(c->claimed.load(std::memory_order_acquire))) return true;
  return false;
}

bool WeightGradients::run_one() {
  for (const auto& c : contractions_) {
    int32_t j = 0;
    if (!claim(*c, j)) continue;
    thread_local std::vector<float> panels;
    panels.resize(size_t(c->panel_floats()));
    run_block(*c, j, panels.data(), whole());
    early_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool WeightGradients::finish(const BatchContext& batch, int64_t k) {
  if (!pool_) return false;
  const ir::NodeId member = batch.members[size_t(k)];
  Contraction* found = nullptr;
  for (const auto& c : contractions_)
    if (c->node == member) found = c.get();
  if (!found) return false;
  Contraction& c = *found;
  c.ready.store(c.blocks, std::memory_order_release);  // every batch before this one ran
  float* panels = batch.scratch.allocate(size_t(c.panel_floats()));
  const Split split = [&](int64_t tiles, const std::function<void(int64_t, int64_t)>& body) {
    batch.split(tiles, kMinRowsPerTask / OuterProducts::tile_cols(), body);
  };
  for (;;) {
    int32_t j = 0;
    if (claim(c, j)) {
      run_block(c, j, panels, split);
      continue;
    }
    if (c.done.load(std::memory_order_acquire) == c.blocks) break;
    // Its next block is another thread's: meanwhile another contraction's, or a short wait.
    if (!run_one()) cpu_pause();
  }
  if (c.error) std::rethrow_exception(c.error);
  return true;
}

// ---- the batch ----

// sum_i a_i b_i^T per member: a weight's gradient over all its uses, one contraction whose
// reduction runs over every pair's columns, read where they lie (runtime/outer_products.h): whole
// arguments (matmul_nt), or columns at rows of them (matmul_nt_rows, Values::row).
void run_matmul_nt(const BatchContext& c, WeightGradients* early) {
  const ir::Graph& graph = c.values.graph;
  // Members run one after another, so one set of column pointers and panels serves them all (a
  // batch of thousands of single outer products would otherwise take scratch for each). A
  // batch's members have one signature: the first member's shapes.
  const Factors first = factors_of(graph, c.members[0]);
  const size_t columns = first.uses();
  const float** a = c.scratch.allocate_pointers(columns);
  const float** b = c.scratch.allocate_pointers(columns);
  // Cut by uses with two or more threads (kMaxUsePieces): piece 0 sums into the output, the others
  // into partial sums of their own; each packs its own panels.
  const int64_t pieces =
      c.pool.size() == 1 ? 1 : std::clamp<int64_t>(int64_t(columns) / kMinUsesPerPiece, 1, kMaxUsePieces);
  auto piece_of = [&](int64_t i) {
    const size_t begin = columns * size_t(i) / size_t(pieces), end = columns * size_t(i + 1) / size_t(pieces);
    return OuterProducts{first.a.rows, first.b.rows, std::span(a + begin, end - begin), std::span(b + begin, end - begin)};
  };
  const int64_t size = first.a.rows * first.b.rows;
  float* panels[kMaxUsePieces];
  float* sums[kMaxUsePieces] = {};
  for (int64_t i = 0; i < pieces; ++i) {
    panels[i] = c.scratch.allocate(size_t(std::max<int64_t>(1, piece_of(i).scratch_floats())));
    if (i > 0) sums[i] = c.scratch.allocate(size_t(size));
  }
  for (int64_t k = 0; k < c.n(); ++k) {
    const Factors f = factors_of(graph, c.members[size_t(k)]);
    if (!(f.a == first.a) || !(f.b == first.b))
      throw InternalError("run_matmul_nt: member " + std::to_string(k) + " of a batch has other shapes than the first");
    c.stats.kernel_calls += 1;
    if (early && early->finish(c, k)) continue;
    fill_columns(c.values, c.members[size_t(k)], f, 0, columns, a, b);
    if (pieces == 1) {
      piece_of(0).compute(c.output(k).data(), panels[0], [&](int64_t tiles, const std::function<void(int64_t, int64_t)>& body) {
        c.split(tiles, kMinRowsPerTask / OuterProducts::tile_cols(), body);
      });
      continue;
    }
    sums[0] = c.output(k).data();
    const std::function<void(int)> piece = [&](int i) { piece_of(i).compute(sums[i], panels[i], whole()); };
    c.pool.parallel_for(int(pieces), piece);
    c.split(size, kMinElementsPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t i = 1; i < pieces; ++i)
        for (int64_t e = begin; e < end; ++e) sums[0][e] += sums[i][e];
    });
  }
}

}  // namespace edb::runtime
