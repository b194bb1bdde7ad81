// The frontier with ED-Batch's typewise counts: for a ready type a, F_a (its ready nodes) and TF_a
// (unexecuted type-a nodes with no unexecuted type-a ancestor). TF_a is counted as F_a plus the
// unexecuted type-a nodes of the lowest unexecuted same-type chain rank, all of which are in TF_a,
// which keeps the counts linear in graph size. The greedy and learned policies both walk this.
// Precondition: an Analysis built for the same input.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/frontier.h"
#include "scheduler/type_chains.h"

namespace edb::scheduler {

class TypewiseFrontier {
 public:
  // Reuses buffers. Without `count_ranks` it is the plain frontier (no TF_a: frontier_count and
  // the greedy choice must not be called), for callers that never ask greedy.
  void reset(const ScheduleInput& input, const Analysis& analysis, bool count_ranks = true);

  bool done() const { return frontier_.done(); }
  const std::vector<uint32_t>& ready_types() const { return frontier_.ready_types(); }
  uint64_t ready_count(uint32_t type) const { return frontier_.ready(type).size(); }
  const std::vector<ir::NodeId>& ready(uint32_t type) const { return frontier_.ready(type); }
  uint64_t frontier_count(uint32_t type);  // |TF_type| (advances the type's lowest rank lazily)
  // Types whose every node is alone of its type on any path (chain length 1): the per-instance
  // loss sums, the output layers.
  bool single_rank(uint32_t type) const { return analysis_->chains.longest[type] == 1; }
  // The ready type maximising |F_a| / |TF_a|; ties to the larger |F_a|, then the lower type.
  uint32_t greedy_choice() { return greedy_among(ready_types()); }
  uint32_t greedy_among(const std::vector<uint32_t>& types);  // the same rule over ready `types`
  void run(uint32_t type, Schedule& out) {  // all ready nodes of `type` as one batch
    run(type, out, [](ir::NodeId, uint32_t) {});
  }
  // The same, calling on_ready(node, type) for each node that becomes ready.
  template <typename OnReady>
  void run(uint32_t type, Schedule& out, OnReady&& on_ready);

 private:
  const ScheduleInput* input_ = nullptr;
  const Analysis* analysis_ = nullptr;
  Frontier frontier_;
  // Per type, unexecuted and ready nodes at each chain rank (1-based), in one flat array:
  // type t's ranks live at [rank_base_[t], rank_base_[t] + longest[t]).
  std::vector<uint32_t> rank_base_, unexecuted_, ready_at_, lowest_;
  bool count_ranks_ = true;
};

template <typename OnReady>
void TypewiseFrontier::run(uint32_t type, Schedule& out, OnReady&& on_ready) {
  if (!count_ranks_) {
    frontier_.run(type, out, on_ready);
    return;
  }
  const TypeChains& chains = analysis_->chains;
  const ir::NodeId begin = input_->begin;
  const size_t before = out.nodes.size();
  frontier_.run(type, out, [&](ir::NodeId id, uint32_t t) {
    const uint32_t r = chains.rank[id - begin];
    if (r > 0) ++ready_at_[rank_base_[t] + r - 1];
    on_ready(id, t);
  });
  for (size_t i = before; i < out.nodes.size(); ++i) {
    const uint32_t r = chains.rank[out.nodes[i] - begin];
    if (r == 0) continue;
    const uint32_t at = rank_base_[type] + r - 1;
    --unexecuted_[at];
    --ready_at_[at];
  }
}

}  // namespace edb::scheduler
