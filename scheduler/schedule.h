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

struct Schedule {
  std::vector<ir::NodeId> nodes;         // members of every batch, batch after batch
  std::vector<uint32_t> batch_begin{0};  // batch b is nodes[batch_begin[b], batch_begin[b+1])
  std::vector<ir::TypeId> batch_type;

  size_t batch_count() const { return batch_type.size(); }
  std::span<const ir::NodeId> batch(size_t b) const {
    return {nodes.data() + batch_begin[b], batch_begin[b + 1] - batch_begin[b]};
  }
  void add_batch(ir::TypeId type, std::span<const ir::NodeId> members);
  void clear();
};

struct Analysis;

// Which nodes to schedule: [begin, graph.size()). Earlier nodes are already evaluated.
struct ScheduleInput {
  const ir::Graph& graph;
  std::span<const ir::TypeId> types;  // one per node, kNoType for leaves
  ir::NodeId begin = 0;
  const Analysis* analysis = nullptr;  // local types and chain ranks, when the caller has them
  const ir::SignatureTable* signatures = nullptr;  // names of the types (the learned policy needs them)
};

// A batching policy: a named type chosen by name, never by an integer code.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual void schedule(const ScheduleInput& input, Schedule& out) = 0;
};

// One node per batch in recording order: the unbatched baseline.
class SequentialPolicy final : public Policy {
 public:
  std::string_view name() const override { return "sequential"; }
  void schedule(const ScheduleInput& input, Schedule& out) override;
};

// The names make_policy() accepts, in the order --help lists them.
std::vector<std::string> policy_names();
// UsageError naming the accepted policies when `name` is unknown.
std::unique_ptr<Policy> make_policy(std::string_view name);

// Checks the contract: every non-leaf node of the range exactly once, after its arguments, one
// signature per batch. Throws edb::InternalError naming the first violation.
void verify(const ScheduleInput& input, const Schedule& schedule);

}  // namespace edb::scheduler
