// Executors run a verified Schedule with a Plan on a device. The reference executor is the oracle:
// unbatched, node by node, plain Eigen; every other executor and backend is tested against it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edbatch/stats.h"
#include "ir/ir.h"
#include "memplan/plan.h"
#include "scheduler/schedule.h"

namespace edb::runtime {

// Where every node's value lives: leaves in the graph (inputs) or the model (parameters),
// everything else in the arena at the plan's offset.
struct Values {
  const ir::Graph& graph;
  const memplan::Plan& plan;
  float* arena;

  const float* in(ir::NodeId id) const {
    const int64_t offset = plan.offset[id];  // -1 for leaves, which live outside the arena
    return offset >= 0 ? arena + offset : graph.leaf_data(id);
  }
  float* out(ir::NodeId id) const { return arena + plan.offset[id]; }
  // Row `at` of the frame of call node `call` (planned), wherever its cell lays it out
  // (ir::CellBody::frame_blocks).
  float* frame(ir::NodeId call, int64_t at) const { return arena + memplan::frame_row(graph, plan, call, at); }
  // Row `at` of node `id`'s value, a column read in place (ir::Op::matmul_nt_rows): a row of its
  // frame where `id` is a call, else `at` floats into it.
  const float* row(ir::NodeId id, int64_t at) const {
    return graph.node(id).op == ir::Op::call ? frame(id, at) : in(id) + at;
  }
};

// What one member of a batch counts for in Stats (nodes, batches): a single-node cell call as its
// cell's operations and batches (node by node: as many batches as operations), as if the call had
// copied the body into the trace (its outputs' views are never scheduled); every other node as one.
struct StatsWeight {
  int64_t nodes = 1;
  int64_t batches = 1;
};
inline StatsWeight stats_weight(const ir::Graph& graph, ir::NodeId member, bool node_by_node) {
  const ir::Node& n = graph.node(member);
  if (n.op == ir::Op::call) {
    const ir::CellBody& cell = graph.cell(n.attrs.index);
    return {cell.operations, node_by_node ? cell.operations : cell.batches};
  }
  return {};
}

class ThreadPool;  // runtime/thread_pool.h

// What an executor can do, so that the engine decides by what it can do, never by its name. Every
// executor runs batches of `call` nodes (a cell call as one node), at least through
// runtime/call_expansion.h.
struct Capabilities {
  bool lowers_cells = false;  // compiles a cell's body into one kernel per batch of calls
  bool threads = true;        // splits work across a thread pool (false: one thread only)
  // Runs batch nodes (ir::NodeBatch, ir::CallBatch: a backward pass recorded by batch, with
  // weights' contractions read in place), so that a trace may record them where cells lower.
  bool node_batches = false;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;
  virtual Capabilities capabilities() const = 0;
  // Runs every batch of `schedule`; adds kernel calls and bytes gathered to `stats` (the driver
  // counts nodes and batches from the schedule, the same whichever executor runs it).
  virtual void execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) = 0;
  // EngineOptions::cache_entries: the most entries each of the executor's caches keeps.
  virtual void set_cache_entries(size_t entries) { (void)entries; }
  // The sizes of its caches (Stats::caches), between executions.
  virtual void cache_sizes(CacheSizes& sizes) const { (void)sizes; }
  // Between executions, when the engine drops its cell records: forgets what it keeps by cell
  // (compiled cells, expanded bodies), whose keys point into those records.
  virtual void forget_cells() {}
  // The pool its kernels split across (null: it has none), for the driver to lend it the
  // pipelined caller while that waits (runtime/driver.h).
  virtual ThreadPool* thread_pool() { return nullptr; }
};

class CallExpansion;  // runtime/call_expansion.h

class ReferenceExecutor final : public Executor {
 public:
  ReferenceExecutor();
  ~ReferenceExecutor() override;
  std::string_view name() const override { return "reference"; }
  static constexpr Capabilities kCapabilities{.lowers_cells = false, .threads = false, .node_batches = false};
  Capabilities capabilities() const override { return kCapabilities; }
  void execute(const scheduler::Schedule& schedule, const Values& values, Stats& stats) override;
  void set_cache_entries(size_t entries) override;
  void cache_sizes(CacheSizes& sizes) const override;
  void forget_cells() override;

 private:
  std::unique_ptr<CallExpansion> calls_;  // a cell call: its body, node by node
};

// Computes one node from its arguments with plain Eigen (shared with tests and later executors'
// fallbacks, so there is one definition of what each op means).
void evaluate_node(const Values& values, ir::NodeId id);

std::vector<std::string> executor_names();
// The capabilities of the CPU executor `name` before one is made; nullopt when there is none
// (make_executor says so).
std::optional<Capabilities> executor_capabilities(std::string_view name);
// UsageError naming the accepted executors when `name` is unknown. `cache_directory` is the kernel
// cache of executors that compile kernels (empty: jit::KernelCache::default_directory()).
std::unique_ptr<Executor> make_executor(std::string_view name, int threads,
                                        const std::string& cache_directory = {});

}  // namespace edb::runtime
