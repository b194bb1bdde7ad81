// The table of contents of an evaluation. Each stage is a free function or a named policy/executor
// elsewhere; this file only sequences them, checks between them, times them and dumps them.
#include "runtime/driver.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>

#include "ir/files.h"
#include "ir/isa.h"
#include "jit/cached_compiler.h"
#include "memplan/layout.h"
#include "runtime/cell_lowering.h"
#include "runtime/cuda_executor.h"
#include "runtime/thread_pool.h"
#include "scheduler/lower_bound.h"


namespace edb::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// The search policy's schedules kept at most (fewer when EngineOptions::cache_entries is smaller):
// one is as large as its trace.
constexpr size_t kSearchSchedules = 64;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

std::string print_schedule(const TraceData& trace, const ir::SignatureTable& signatures) {
  std::ostringstream out;
  for (size_t b = 0; b < trace.schedule.batch_count(); ++b) {
    out << "batch " << b << " [" << signatures.name(trace.schedule.batch_type[b]) << "]:";
    for (ir::NodeId id : trace.schedule.batch(b)) out << " %" << id;
    out << '\n';
  }
  return out.str();
}

std::string print_plan(const TraceData& trace) {
  std::ostringstream out;
  out << "arena " << trace.plan.arena_floats << " floats\n";
  for (ir::NodeId id : trace.schedule.nodes) out << '%' << id << " @" << trace.plan.offset[id] << '\n';
  return out.str();
}

// The number in EDB_DUMP_DIR's file names: evaluations of this process, so that two engines'
// dumps never overwrite each other.
uint64_t next_dump_number() {
  static std::atomic<uint64_t> evaluations{0};
  return ++evaluations;
}

// One stage's dump: to stderr under a heading, or into DIR/STAGE-N.EXTENSION. A file that cannot
// be written is a warning, never a failed evaluation.
void emit_dump(const DumpFlags& dump, const char* stage, uint64_t number, const char* extension,
               const std::string& text) {
  if (dump.directory.empty()) {
    std::cerr << "== " << stage << '\n' << text;
    return;
  }
  const std::string path = dump.directory + "/" + stage + "-" + std::to_string(number) + "." + extension;
  if (const std::string why = ir::write_file(path, text); !why.empty()) std::cerr << "edbatch: EDB_DUMP_DIR: " << why << '\n';
}

}  // namespace

void TraceData::clear() {
  graph.clear();
  types.clear();
  schedule.clear();
  plan.offset.clear();
  plan.view.clear();
  plan.batch_views.clear();
  plan.arena_floats = 0;
  evaluated = 0;
  scheduled = 0;
  planned = 0;
  live_floats = 0;
  error = nullptr;
}

namespace {

// "nan" or "inf" / "-inf", and its place in a rows x cols value.
std::string describe_value(const float* values, int64_t at, ir::Shape shape) {
  const float v = values[at];
  const std::string what = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  return what + " at row " + std::to_string(at % shape.rows) + ", col " + std::to_string(at / shape.rows);
}

// The first non-finite float of n, or -1.
int64_t first_non_finite(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return -1;
}

// ", call 3 of cell 'lstm', its body node 2 of 9": the cell's calls in the trace and the body's
// operations counted from 1.
std::string call_text(uint32_t number, const std::string& cell, size_t node, size_t operations) {
  return ", call " + std::to_string(number) + " of cell '" + cell + "', its body node " + std::to_string(node) +
         " of " + std::to_string(operations);
}

// check_finite's error for node `id` (whose op and shape `n` gives: the body node's for a call)
// in batch `batch`, whose value holds a non-finite float at `at`; `context` says where in a call.
[[noreturn]] void non_finite(ir::NodeId id, const ir::Node& n, size_t batch, const std::string& context,
                             const float* value, int64_t at, const std::string& cause) {
  throw NumericError("edb: node %" + std::to_string(id) + " (" + std::string(ir::op_name(n.op)) + ", " +
                     std::to_string(n.shape.rows) + "x" + std::to_string(n.shape.cols) + ", batch " +
                     std::to_string(batch) + " of its evaluation" + context + ") produced " +
                     describe_value(value, at, n.shape) + cause +
                     " (EngineOptions::check_finite; Trace::dump() or EDB_DUMP=ir prints the recorded IR, "
                     "one line per node id)");
}

// Argument i of a node that failed, when it is a leaf of `graph` that already held a non-finite
// float (values computed before it were checked before it; leaves were not): what to say of it,
// naming it with `name`; "" otherwise.
std::string leaf_cause(size_t i, const ir::Graph& graph, ir::NodeId arg, const std::string& name) {
  const float* leaf = graph.leaf_data(arg);
  const ir::Node& a = graph.node(arg);
  const int64_t bad = leaf ? first_non_finite(leaf, a.shape.size()) : -1;
  if (bad < 0) return "";
  return "; its argument " + std::to_string(i + 1) + " (" + std::string(ir::op_name(a.op)) + name + ") already held " +
         describe_value(leaf, bad, a.shape);
}

constexpr const char* kFiniteArguments = "; its arguments were finite";

// The first value of call `id`'s body that is not finite, as check_finite's error: the call's node
// id, the body node's op and shape, which call of its cell in the trace and which body node.
void check_call(const Values& values, ir::NodeId id, size_t batch) {
  const ir::Graph& graph = values.graph;
  const auto& cell = static_cast<const CallCell&>(graph.cell(graph.node(id).attrs.index));
  for (uint32_t o = 0; o < cell.frame_at.size(); ++o) {
    if (cell.frame_at[o] < 0) continue;  // not kept: a lowered cell's value no one reads
    const ir::Node& n = cell.body.node(cell.first + o);
    const float* value = values.frame(id, cell.frame_at[o]);
    const int64_t at = first_non_finite(value, n.shape.size());
    if (at < 0) continue;
    uint32_t number = 0;
    for (ir::NodeId c = 0; c <= id; ++c)
      number += graph.node(c).op == ir::Op::call && graph.cell(graph.node(c).attrs.index).key == cell.key;
    // A leaf of the trace passed as an argument, or a leaf of the body (a parameter, a constant).
    std::string cause;
    const auto body_args = cell.body.args(n);
    for (size_t i = 0; i < body_args.size() && cause.empty(); ++i) {
      const auto placeholder = std::find(cell.placeholders.begin(), cell.placeholders.end(), body_args[i]);
      if (placeholder != cell.placeholders.end()) {
        const ir::NodeId arg = graph.args(id)[size_t(placeholder - cell.placeholders.begin())];
        cause = leaf_cause(i, graph, arg, " %" + std::to_string(arg));
      } else if (body_args[i] < cell.first) {
        cause = leaf_cause(i, cell.body, body_args[i], " of the cell's body");
      }
    }
    non_finite(id, n, batch, call_text(number, cell.name, o + 1, cell.frame_at.size()), value, at,
               cause.empty() ? kFiniteArguments : cause);
  }
}

}  // namespace

void check_finite(TraceData& trace) {
  const Values values = trace.values();
  const ir::Graph& graph = trace.graph;
  for (size_t b = 0; b < trace.schedule.batch_count(); ++b) {
    for (ir::NodeId id : trace.schedule.batch(b)) {
      if (trace.plan.is_view(id)) continue;  // its values are checked where they live
      const ir::Node& n = graph.node(id);
      if (n.op == ir::Op::call) {
        check_call(values, id, b);
        continue;
      }
      const int64_t at = first_non_finite(values.in(id), n.shape.size());
      if (at < 0) continue;
      std::string cause;
      const auto args = graph.args(n);
      for (size_t i = 0; i < args.size() && cause.empty(); ++i)
        cause = leaf_cause(i, graph, args[i], " %" + std::to_string(args[i]));
      non_finite(id, n, b, "", values.in(id), at, cause.empty() ? kFiniteArguments : cause);
    }
  }
}

DumpFlags DumpFlags::from_environment() {
  DumpFlags flags;
  const char* value = std::getenv("EDB_DUMP");
  if (!value) return flags;
  // Comma-separated stage names; an unknown one is an error rather than silently nothing.
  const std::string s = value;
  for (size_t begin = 0; begin <= s.size();) {
    const size_t comma = std::min(s.find(',', begin), s.size());
    const std::string word = s.substr(begin, comma - begin);
    begin = comma + 1;
    if (word.empty()) continue;
    const bool all = word == "all";
    if (all || word == "ir") flags.ir = true;
    if (all || word == "schedule") flags.schedule = true;
    if (all || word == "batches") flags.batches = true;
    if (all || word == "plan") flags.plan = true;
    if (!all && word != "ir" && word != "schedule" && word != "batches" && word != "plan")
      throw UsageError("edb::Engine: EDB_DUMP names '" + word +
                       "'; expected a comma-separated list of ir, schedule, batches, plan or all");
  }
  if (const char* directory = std::getenv("EDB_DUMP_DIR"); directory && *directory && flags.any()) {
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error || !std::filesystem::is_directory(directory))
      throw UsageError(std::string("edb::Engine: EDB_DUMP_DIR '") + directory + "' is not a directory that can be created" +
                       (error ? ": " + error.message() : std::string()));
    flags.directory = directory;
  }
  return flags;
}

ExecutionQueue::ExecutionQueue(Executor& executor, bool check_finite, ThreadPool* pool)
    : executor_(executor), check_finite_(check_finite), pool_(pool), thread_([this] { loop(); }) {}

ExecutionQueue::~ExecutionQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ExecutionQueue::push(TraceData& trace) {
  {
    std::lock_guard lock(mutex_);
    trace.pending = true;
    queue_.push_back(Entry{&trace});
  }
  changed_.notify_all();
}

void ExecutionQueue::parallel_for(int count, const std::function<void(int)>& task) {
  std::atomic<bool> done{false};
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Entry{nullptr, count, &task, &done, &error});
  }
  changed_.notify_all();
  if (pool_) pool_->assist([&] { return done.load(std::memory_order_acquire); });
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done.load(std::memory_order_acquire); });
  }
  if (error) std::rethrow_exception(error);
}

void ExecutionQueue::wait(TraceData& trace) {
  if (pool_) pool_->assist([&] { return !trace.pending.load(std::memory_order_acquire); });
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !trace.pending; });
}

Stats ExecutionQueue::take_stats() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty(); });
  return std::exchange(stats_, Stats{});
}

void ExecutionQueue::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    const Entry entry = queue_.front();
    lock.unlock();
    if (!entry.trace) {  // the caller's parallel_for: it assists, so the pool has both threads
      try {
        if (pool_) pool_->parallel_for(entry.count, *entry.task);
        else for (int i = 0; i < entry.count; ++i) (*entry.task)(i);
      } catch (...) {
        *entry.error = std::current_exception();
      }
      lock.lock();
      entry.done->store(true, std::memory_order_release);
      queue_.pop_front();
      changed_.notify_all();
      if (pool_) pool_->release();
      continue;
    }
    TraceData& trace = *entry.trace;
    Stats stats;
    std::exception_ptr error;
    const auto start = Clock::now();
    try {
      executor_.execute(trace.schedule, trace.values(), stats);
      if (check_finite_) check_finite(trace);
    } catch (...) {
      error = std::current_exception();
    }
    stats.time.execute_ms += elapsed_ms(start);
    lock.lock();
    stats_ += stats;
    trace.error = error;
    trace.pending = false;
    queue_.pop_front();
    changed_.notify_all();
    if (pool_) pool_->release();
  }
}

Driver::Driver(const EngineOptions& options)
    : options_(options),
      policy_(scheduler::make_policy(options.policy)),
      dump_(DumpFlags::from_environment()) {
  fsm_ = dynamic_cast<scheduler::FsmPolicy*>(policy_.get());
  learned_ = dynamic_cast<scheduler::ImitationPolicy*>(policy_.get());
  try {
    ir::selected_isa();  // a bad EDB_ISA is refused here, not at the first kernel
  } catch (const UsageError& e) {
    throw UsageError(std::string("edb::Engine: ") + e.what());
  }
  if (options.cache_entries < 1)
    throw UsageError("edb::Engine: cache_entries must be at least 1, got " + std::to_string(options.cache_entries));
  if (options.max_trace_nodes < 0)
    throw UsageError("edb::Engine: max_trace_nodes must be 0 (no limit but the IR's) or more, got " +
                     std::to_string(options.max_trace_nodes));
  if ((search_ = dynamic_cast<scheduler::SearchPolicy*>(policy_.get()))) {
    if (options.search_budget_ms < 1)
      throw UsageError("edb::Engine: search_budget_ms must be at least 1, got " + std::to_string(options.search_budget_ms));
    search_->set_budget(std::chrono::milliseconds(options.search_budget_ms));
    search_->set_capacity(std::min<size_t>(size_t(options.cache_entries), kSearchSchedules));
  }
  if (fsm_) {
    *fsm_ = scheduler::FsmPolicy(scheduler::FsmPolicy::parse_encoding(options.policy_encoding));
    if (!options.policy_file.empty()) fsm_->load(options.policy_file);
  } else if (learned_) {
    if (!options.policy_file.empty()) learned_->load(options.policy_file);
  } else if (!options.policy_file.empty()) {
    throw UsageError("edb::Engine: a policy file is for the fsm and learned policies, not '" + options.policy + "'");
  }
  // Two or more threads: one executes in the background while the caller records and schedules
  // the next trace; the executor's own pool gets the rest, and the caller too while it waits for
  // an execution. The device (cpu, cuda, or auto: cuda when usable) picks the executor;
  // options().device then says which one runs.
  // threads = 0: every core (the reference executor runs on one thread only); options() says how
  // many that was.
  const bool one_thread = !executor_capabilities(options.executor).value_or(Capabilities{}).threads;
  if (options_.threads == 0) options_.threads = one_thread ? 1 : int(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options_.threads;
  const bool pipelined = threads >= 2 && !one_thread;
  // More threads than cores only take turns on them: said once per process.
  static std::atomic<bool> warned_threads{false};
  if (const unsigned cores = std::thread::hardware_concurrency();
      cores > 0 && threads > 0 && unsigned(threads) > cores && !warned_threads.exchange(true))
    std::cerr << "edbatch: " << threads << " threads on a machine with " << cores
              << " cores: they take turns, which is slower than " << cores << " threads\n";
  executor_ = make_device_executor(options.device, options.executor, pipelined ? threads - 1 : threads,
                                   options.cache_directory, options_.device);
  executor_->set_cache_entries(size_t(options.cache_entries));
  ThreadPool* pool = pipelined ? executor_->thread_pool() : nullptr;
  if (pool) pool->lend(1);
  if (pipelined) queue_ = std::make_unique<ExecutionQueue>(*executor_, options.check_finite, pool);
}

Driver::~Driver() = default;

void Driver::drain(TraceData& trace) {
  if (queue_) queue_->wait(trace);
}

void Driver::parallel_for(int count, const std::function<void(int)>& task) {
  if (queue_) return queue_->parallel_for(count, task);
  for (int i = 0; i < count; ++i) task(i);
}

void Driver::wait(TraceData& trace) {
  if (queue_) queue_->wait(trace);
  // Sticky: once an execution failed, the trace's values are not to be trusted again.
  if (trace.error) std::rethrow_exception(trace.error);
}

const Stats& Driver::stats() {
  if (queue_) stats_ += queue_->take_stats();  // waits for every execution: the caches are still
  CacheSizes& caches = stats_.caches;
  caches = CacheSizes{};
  caches.signatures = CacheSize{int64_t(signatures.size()), int64_t(signatures.bytes()), int64_t(max_signatures()), 0,
                                signatures.forgotten()};
  if (search_) caches.search_schedules = search_->sizes();
  if (jit::CachedCompiler* compiler = jit::find_shared_compiler(options_.cache_directory))
    jit::compiler_cache_sizes(*compiler, caches.linked_kernels, caches.kernel_memory);
  caches.cell_records = cell_records;
  executor_->cache_sizes(caches);
  return stats_;
}

void Driver::forget_cells() {
  if (queue_) stats_ += queue_->take_stats();  // waits for every execution
  executor_->forget_cells();
}

void Driver::reset_signatures() {
  signatures.reset();
  if (search_) search_->clear();
}

void Driver::reset_stats() {
  if (queue_) queue_->take_stats();
  stats_ = Stats{};
}

PolicyProgress Driver::train_policy(std::span<TraceData* const> traces, const PolicyTraining& training,
                                   const std::function<void(const PolicyProgress&)>& progress) {
  if (!fsm_ && !learned_)
    throw UsageError("edb::Engine::train_policy(): the engine's policy is '" + options_.policy + "', not fsm or learned");
  std::vector<scheduler::ScheduleInput> inputs;
  for (TraceData* trace : traces) {
    if (trace->evaluated != 0)
      throw UsageError("edb::Engine::train_policy(): a trace was already evaluated; record traces and train before running them");
    inputs.push_back({trace->graph, trace->types, 0, nullptr, &signatures});
  }
  if (learned_) return train_learned(inputs, training, progress);
  scheduler::FsmTraining options;
  options.episodes = training.episodes;
  options.seed = training.seed;
  auto convert = [this](const scheduler::FsmProgress& p) {
    PolicyProgress out;
    out.episode = p.episode;
    out.episodes = p.episodes;
    out.batches = p.batches;
    out.best_batches = p.best_batches;
    out.lower_bound = p.lower_bound;
    out.greedy_batches = p.greedy_batches;
    out.beats_greedy = p.best_batches < p.greedy_batches;
    out.states = int64_t(fsm_->state_count());
    out.fallback_rate = p.decisions > 0 ? double(p.fallbacks) / double(p.decisions) : 0.0;
    out.stop_reason = p.stop_reason;
    return out;
  };
  const scheduler::FsmProgress result = fsm_->train(inputs, options, [&](const scheduler::FsmProgress& p) {
    if (progress) progress(convert(p));
  });
  return convert(result);
}

PolicyProgress Driver::train_learned(std::span<const scheduler::ScheduleInput> inputs, const PolicyTraining& training,
                                    const std::function<void(const PolicyProgress&)>& progress) {
  if (training.search_budget_ms < 1)
    throw UsageError("edb::Engine::train_policy(): search_budget_ms must be at least 1, got " +
                     std::to_string(training.search_budget_ms));
  scheduler::ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(training.search_budget_ms);
  const scheduler::LearnedReport r = learned_->train(inputs, options, [&](int done, int total) {
    if (!progress) return;
    PolicyProgress p;
    p.episode = done;
    p.episodes = total;
    progress(p);
  });
  PolicyProgress out;
  out.episode = out.episodes = int(r.traces);
  out.batches = out.best_batches = r.batches;
  out.lower_bound = r.lower_bound;
  out.greedy_batches = r.greedy_batches;
  out.beats_greedy = r.beats_greedy;
  out.greedy_fallback = r.greedy_fallback;
  out.states = r.states;
  out.fallback_rate = r.decisions > 0 ? double(r.fallbacks) / double(r.decisions) : 0.0;
  out.heldout_traces = r.heldout_traces;
  out.heldout_batches = r.heldout_batches;
  out.heldout_greedy_batches = r.heldout_greedy_batches;
  out.heldout_lower_bound = r.heldout_lower_bound;
  out.stop_reason = r.stop_reason;
  if (progress) progress(out);
  return out;
}

void Driver::save_policy(const std::string& path) {
  if (learned_) return learned_->save(path);
  if (!fsm_) throw UsageError("edb::Engine::save_policy(): the engine's policy is '" + options_.policy + "', not fsm or learned");
  fsm_->save(path);
}

void Driver::schedule(TraceData& trace) {
  wait(trace);  // its previous execution must finish before the schedule, plan and arena change
  const ir::NodeId begin = std::max(trace.evaluated, trace.scheduled);
  if (begin == trace.graph.size()) return;
  // Nodes scheduled before and not yet run keep their batches; the new ones' batches follow them
  // (the policy sees the earlier nodes as evaluated, which they are by the time these run).
  const bool more = trace.scheduled > trace.evaluated;
  scheduler::Schedule& schedule = more ? more_ : trace.schedule;
  if (options_.verify) ir::verify(trace.graph);
  const uint64_t dump_number = dump_.any() ? next_dump_number() : 0;
  if (dump_.ir) emit_dump(dump_, "ir", dump_number, "txt", ir::print(trace.graph));

  auto start = Clock::now();
  if (trace.types.size() != trace.graph.size()) signatures.assign(trace.graph, begin, trace.types);
  scheduler::ScheduleInput input{trace.graph, trace.types, begin, &analysis_, &signatures};
  // Local types and same-type chains, the way the policy reads them: its analysis, and the bound's.
  analysis_.build(input, policy_->chains());
  auto decisions_so_far = [&] { return fsm_ ? fsm_->decisions() : learned_ ? learned_->decisions() : 0; };
  auto unseen_so_far = [&] { return fsm_ ? fsm_->unseen() : learned_ ? learned_->unseen() : 0; };
  const int64_t decisions = decisions_so_far(), unseen = unseen_so_far();
  policy_->schedule(input, schedule);
  stats_.policy_decisions += decisions_so_far() - decisions;
  stats_.policy_unseen += unseen_so_far() - unseen;
  stats_.time.schedule_ms += elapsed_ms(start);
  // Over the trace with each call one node weighted by its cell's batches: the same bound whichever
  // executor and policy run the trace.
  stats_.lower_bound += scheduler::weighted_lower_bound(input, analysis_, type_weights_);
  if (more) trace.schedule.append(more_);
  trace.scheduled = static_cast<ir::NodeId>(trace.graph.size());
  if (options_.verify) {  // all that runs next: the batches scheduled before too
    const scheduler::ScheduleInput pending{trace.graph, trace.types, trace.evaluated, nullptr, &signatures};
    scheduler::verify(pending, trace.schedule);
  }
  if (dump_.batches) emit_dump(dump_, "batches", dump_number, "txt", print_schedule(trace, signatures));
  if (dump_.schedule) emit_dump(dump_, "schedule", dump_number, "dot", scheduler::to_dot(trace.graph, trace.schedule, signatures));
  dump_number_ = dump_number;
}

void Driver::prepare(TraceData& trace) {
  schedule(trace);
  if (trace.planned == trace.scheduled) return;
  auto start = Clock::now();
  if (trace.planned > trace.evaluated) {
    // Batches planned before and not yet run are planned again with those scheduled after them,
    // from where the values of earlier evaluations end.
    trace.plan.arena_floats = trace.live_floats;
    std::fill(trace.plan.offset.begin() + trace.evaluated, trace.plan.offset.end(), -1);
    std::fill(trace.plan.view.begin() + trace.evaluated, trace.plan.view.end(), 0);
  } else {
    trace.live_floats = trace.plan.arena_floats;  // values of earlier evaluations of this trace
  }
  const int64_t live = trace.live_floats;
  if (options_.memplan) layout_planner_.plan(trace.graph, trace.schedule, trace.plan);
  else memplan::plan_batch_order(trace.graph, trace.schedule, trace.plan);
  trace.arena.reserve(size_t(trace.plan.arena_floats), size_t(live));
  trace.planned = trace.scheduled;
  stats_.time.plan_ms += elapsed_ms(start);
  if (options_.verify) {
    memplan::verify(trace.graph, trace.plan);
    // The new values' memory starts as NaN rather than what the last trace there left: a kernel
    // that leaves a value unwritten (a piece of a cut batch, a member) then shows as NaN, never as
    // a stale value that happens to be right (a test running one program twice).
    std::fill(trace.arena.data() + live, trace.arena.data() + trace.plan.arena_floats,
              std::numeric_limits<float>::quiet_NaN());
  }
  if (dump_.plan) emit_dump(dump_, "plan", dump_number_, "txt", print_plan(trace));
}

void Driver::submit(TraceData& trace) {
  prepare(trace);  // waits for the trace's previous execution
  if (trace.evaluated == trace.graph.size()) return;

  for (size_t b = 0; b < trace.schedule.batch_count(); ++b) {
    const auto members = trace.schedule.batch(b);  // one signature: the same flops each
    stats_.flops += ir::node_flops(trace.graph, members[0]) * static_cast<int64_t>(members.size());
    const StatsWeight weight = stats_weight(trace.graph, members[0], trace.schedule.node_by_node);
    stats_.nodes += weight.nodes * static_cast<int64_t>(members.size());
    stats_.batches += weight.batches;  // the schedule's, whatever runs it
  }
  trace.evaluated = static_cast<ir::NodeId>(trace.graph.size());

  if (queue_) return queue_->push(trace);
  const auto start = Clock::now();
  try {
    executor_->execute(trace.schedule, trace.values(), stats_);
    if (options_.check_finite) check_finite(trace);
  } catch (...) {
    trace.error = std::current_exception();
    throw;
  }
  stats_.time.execute_ms += elapsed_ms(start);
}

}  // namespace edb::runtime
