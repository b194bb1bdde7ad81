// The driver: evaluates the not-yet-evaluated part of a trace's graph, stage by stage
// (types -> schedule -> plan -> execute), with EDB_DUMP printing each stage's output. With two or
// more threads, execution runs on a background thread (an ExecutionQueue) so the caller can record
// and schedule the next trace meanwhile; reading a value waits for its trace.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edbatch/edbatch.h"
#include "ir/ir.h"
#include "ir/signature.h"
#include "memplan/layout.h"
#include "memplan/plan.h"
#include "runtime/arena.h"
#include "runtime/executor.h"
#include "scheduler/fsm.h"
#include "scheduler/imitation.h"
#include "scheduler/search.h"
#include "scheduler/schedule.h"
#include "scheduler/type_chains.h"

namespace edb::runtime {

// Everything one trace owns between evaluations. Reused across traces, so memory is too.
struct TraceData {
  ir::Graph graph;
  std::vector<ir::TypeId> types;  // per node; the trace interns them as it records
  scheduler::Schedule schedule;
  memplan::Plan plan;
  Arena arena;
  ir::NodeId evaluated = 0;  // nodes [0, evaluated) have values (once `pending` clears)
  // Nodes [evaluated, scheduled) are batched in `schedule` (Driver::schedule) but not yet run; the
  // next submit runs them with whatever was recorded after them (batched then).
  ir::NodeId scheduled = 0;
  // Nodes [evaluated, planned) have their places in the arena (Driver::prepare), after the
  // `live_floats` that earlier evaluations' values take.
  ir::NodeId planned = 0;
  int64_t live_floats = 0;
  // An execution is queued or running: set under the queue's lock, read by an assisting waiter
  // without it.
  std::atomic<bool> pending{false};
  std::exception_ptr error;  // what an execution threw; every later wait rethrows it

  void clear();
  Values values() { return Values{graph, plan, arena.data()}; }
};

// EngineOptions::check_finite: throws NumericError naming the first node of the trace's schedule,
// in execution order, whose values hold a NaN or an infinity.
void check_finite(TraceData& trace);

// Which stages EDB_DUMP asks to print ("ir,schedule,batches,plan" or "all"), and where: stderr,
// or with EDB_DUMP_DIR one file per stage and evaluation in that directory. The schedule is the
// graphviz picture (batches as coloured clusters), `batches` the same batches as text lines.
struct DumpFlags {
  bool ir = false;
  bool schedule = false;  // the graph with its batches as clusters (graphviz dot)
  bool batches = false;   // the batches as text, one line each
  bool plan = false;
  std::string directory;  // empty: stderr
  bool any() const { return ir || schedule || batches || plan; }
  // UsageError when EDB_DUMP names an unknown stage or EDB_DUMP_DIR a directory that cannot be
  // created.
  static DumpFlags from_environment();
};

// Executions in submission order on one background thread. With the executor's pool, a caller
// waiting for a trace runs pieces of the executing batches meanwhile (ThreadPool::assist), so two
// threads keep two cores busy both while the caller records and while it waits.
class ExecutionQueue {
 public:
  ExecutionQueue(Executor& executor, bool check_finite, ThreadPool* pool);
  ~ExecutionQueue();
  void push(TraceData& trace);
  void wait(TraceData& trace);  // until the trace's queued execution is done
  Stats take_stats();           // waits for everything queued, then hands over the counters
  // Runs task(i) for i in [0, count) across the pool after everything queued before, the caller
  // taking part; returns when all are done, rethrowing a task's exception.
  void parallel_for(int count, const std::function<void(int)>& task);

 private:
  // A queued evaluation, or (trace null) a parallel_for of the caller's.
  struct Entry {
    TraceData* trace = nullptr;
    int count = 0;
    const std::function<void(int)>* task = nullptr;
    std::atomic<bool>* done = nullptr;
    std::exception_ptr* error = nullptr;
  };
  void loop();
  Executor& executor_;
  bool check_finite_;
  ThreadPool* pool_;  // null: waiters sleep
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> queue_;
  Stats stats_;
  bool stop_ = false;
  std::thread thread_;
};

class Driver {
 public:
  explicit Driver(const EngineOptions& options);
  ~Driver();
  // Starts evaluating what the trace recorded since its last evaluation; with a queue the
  // execution may still run when this returns.
  void submit(TraceData& trace);
  // The first stage of submit: batches what the trace recorded since it was last scheduled, after
  // the batches scheduled before (waits for the trace's execution first). A backward pass records
  // in the order of the forward's batches (trace/backward.cpp), so the forward pass is scheduled,
  // not run, before it: both then run in one evaluation.
  void schedule(TraceData& trace);
  // The first two stages of submit: schedule(), then the memory plan of every batch not yet run
  // (those planned before again, when more were scheduled after them), growing the arena.
  // Trace::record_backward() prepares both passes, so a training step's plan is made while the
  // step before runs.
  void prepare(TraceData& trace);
  void wait(TraceData& trace);  // then rethrows the trace's execution error, if any
  // Waits for the trace's queued execution and never throws: for releasing a trace, whose
  // error (if any) its reader has seen or no longer wants.
  void drain(TraceData& trace);
  void evaluate(TraceData& trace) {
    submit(trace);
    wait(trace);
  }
  // Runs task(i) for i in [0, count) on the engine's threads (after every queued evaluation, with
  // the caller taking part), or on the caller alone when the engine has one thread; rethrows a
  // task's exception. For work beside evaluations, such as an optimizer's update.
  void parallel_for(int count, const std::function<void(int)>& task);

  const EngineOptions& options() const { return options_; }
  // What the executor it runs can do (on the device options().device names).
  Capabilities capabilities() const { return executor_->capabilities(); }
  const Stats& stats();  // waits for queued executions
  // Trace::record_backward's recording time (Stats::time.record_backward_ms), on the recording
  // thread; an execution may update the other counters meanwhile.
  void add_record_backward_ms(double ms) { stats_.time.record_backward_ms += ms; }
  // The learned policies' training and file (UsageError unless the policy is "fsm" or "learned").
  PolicyProgress train_policy(std::span<TraceData* const> traces, const PolicyTraining& training,
                              const std::function<void(const PolicyProgress&)>& progress);
  void save_policy(const std::string& path);
  void reset_stats();
  ir::SignatureTable signatures;
  // The signature table's bound (16 x EngineOptions::cache_entries types): when it is over, the
  // caller resets it between evaluations, once no trace and no cell holds its types.
  bool signatures_over_bound() const { return signatures.size() > max_signatures(); }
  size_t max_signatures() const { return size_t(options_.cache_entries) * 16; }
  // Forgets every signature, and the search policy's schedules, which name types. Only between
  // evaluations, when no trace and no cell holds a type of the table.
  void reset_signatures();
  // The engine's cell records (trace/), as Stats::caches.cell_records reports them; trace/ keeps
  // it current. When the engine drops them, forget_cells() has the executor drop what it keeps
  // by cell (after every queued execution).
  CacheSize cell_records;
  void forget_cells();

 private:
  EngineOptions options_;
  std::unique_ptr<scheduler::Policy> policy_;
  scheduler::FsmPolicy* fsm_ = nullptr;  // policy_ when it is the Q-learned one
  scheduler::ImitationPolicy* learned_ = nullptr;  // policy_ when it imitates search
  scheduler::SearchPolicy* search_ = nullptr;      // policy_ when it searches each trace shape
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ExecutionQueue> queue_;  // null: execute on the caller's thread
  DumpFlags dump_;
  uint64_t dump_number_ = 0;     // the last schedule's, which its plan's dump shares
  scheduler::Schedule more_;     // batches scheduled after others that have not run yet
  scheduler::Analysis analysis_;
  std::vector<uint32_t> type_weights_; // per local type, for the lower bound (kept between traces)
  memplan::LayoutPlanner layout_planner_;
  Stats stats_;

  PolicyProgress train_learned(std::span<const scheduler::ScheduleInput> inputs, const PolicyTraining& training,
                               const std::function<void(const PolicyProgress&)>& progress);
};

}  // namespace edb::runtime
