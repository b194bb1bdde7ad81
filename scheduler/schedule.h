// Schedule: an ordered list of batches, each a list of node ids of one signature; and the policies
// that produce one from a Graph plus its node types. Every non-leaf node in the scheduled range
// appears exactly once, after all its arguments. Leaves are never scheduled.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"
#include "ir/signature.h"

namespace edb::scheduler {

struct CellSchedule;

struct Schedule {
  std::vector<ir::NodeId> nodes;         // members of every batch, batch after batch
  std::vector<uint32_t> batch_begin{0};  // batch b is nodes[batch_begin[b], batch_begin[b+1])
  std::vector<ir::TypeId> batch_type;
  // The unbatched baseline's (SequentialPolicy): a batch of one cell call runs its body node by
  // node too, not in the cell's batches, and counts as many batches as the body has operations.
  bool node_by_node = false;

  size_t batch_count() const { return batch_type.size(); }
  std::span<const ir::NodeId> batch(size_t b) const {
    return {nodes.data() + batch_begin[b], batch_begin[b + 1] - batch_begin[b]};
  }
  void add_batch(ir::TypeId type, std::span<const ir::NodeId> members);
  // Appends another schedule's batches after these.
  void append(const Schedule& other);
  void clear();
};

struct Analysis;

// A cell's schedule (edb::Cell): its body's batches, found once per cell (exact.h), whose members
// are offsets into the body's operations.
struct CellSchedule {
  Schedule batches;  // members are offsets into the body's operations
  std::string name;  // the cell's, printable on one line (compiled kernels are named by it)
};

// Which way the analysis's same-type chain pass runs (type_chains.h): ranks from the sources, or
// heights towards the sinks. A policy says which it reads (Policy::chains()), so a trace pays for
// one pass, never both.
enum class ChainDirection : uint8_t { ranks, heights };

// Which nodes to schedule: [begin, graph.size()). Earlier nodes are already evaluated.
struct ScheduleInput {
  const ir::Graph& graph;
  std::span<const ir::TypeId> types;  // one per node, kNoType for leaves
  ir::NodeId begin = 0;
  const Analysis* analysis = nullptr;  // local types and chains, when the caller has them
  const ir::SignatureTable* signatures = nullptr;  // names of the types (the learned policy needs them)
};

// The type the policies see for node `id`: its own, nothing for a view of a cell call's output.
inline ir::TypeId scheduled_type(const ScheduleInput& input, ir::NodeId id) {
  const ir::TypeId type = input.types[id];
  return type == ir::kCallOutput ? ir::kNoType : type;
}

// An argument as the policies see it: a view of a cell call's output is its call.
inline ir::NodeId scheduled_argument(const ScheduleInput& input, ir::NodeId arg) {
  while (input.types[arg] == ir::kCallOutput) arg = input.graph.args(arg)[0];  // a slice, or a reshape of one
  return arg;
}

// Calls f(argument) for each argument of scheduled node `id` as the policies see it; an argument
// may repeat.
template <typename F>
void for_each_argument(const ScheduleInput& input, ir::NodeId id, F&& f) {
  for (ir::NodeId arg : input.graph.args(id)) f(scheduled_argument(input, arg));
}

// How many batches the schedule runs: a batch of calls counts its cell's batches.
int64_t expanded_batch_count(const ScheduleInput& input, const Schedule& schedule);

// A batching policy: a named type chosen by name, never by an integer code.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual void schedule(const ScheduleInput& input, Schedule& out) = 0;
  // The chains to build the input's Analysis with; given the other way, a policy builds its own.
  virtual ChainDirection chains() const { return ChainDirection::ranks; }
  // Whether it batches at all: false for the unbatched baseline, which runs one node per batch.
  virtual bool batches() const { return true; }
};

// One node per batch in recording order: the unbatched baseline.
class SequentialPolicy final : public Policy {
 public:
  std::string_view name() const override { return "sequential"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;
  bool batches() const override { return false; }
};

// The names make_policy() accepts, in the order --help lists them.
std::vector<std::string> policy_names();
// UsageError naming the accepted policies when `name` is unknown.
std::unique_ptr<Policy> make_policy(std::string_view name);

// Checks the contract: every non-leaf node of the range exactly once, after its arguments, one
// signature per batch. Throws edb::InternalError naming the first violation.
void verify(const ScheduleInput& input, const Schedule& schedule);

// "What was batched" as a graphviz dot picture: each batch a filled cluster (one colour per batch
// type, the signature as its tooltip), each node labelled "%id op" and its shape, an edge from every
// argument to its user. Leaves (inputs, parameters) stand outside the clusters in grey; non-leaf
// nodes the schedule does not hold (evaluated earlier) are dashed. Throws edb::InternalError for a
// member outside the graph or in two batches.
std::string to_dot(const ir::Graph& graph, const Schedule& schedule, const ir::SignatureTable& signatures);

}  // namespace edb::scheduler
