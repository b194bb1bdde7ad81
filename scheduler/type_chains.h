// Same-type chains: for each scheduled node, the most nodes of its own type on any path that ends
// at it (its rank: the typewise counts of greedy) or that starts at it (its height: the tight
// frontier of the learned policy and the search); one pass either way, and either gives each type's
// longest chain, which the lower bound sums. Precondition: LocalTypes built for the same input.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/frontier.h"

namespace edb::scheduler {

class TypeChains {
 public:
  // One pass in (reverse, for heights) topological order over a row of per-type counts per node (a
  // vector max per edge), so the cost is nodes x types / vector width. A row lives only until the
  // last node that reads it has, so the rows in use stay few and in cache. Reuses this object's
  // buffers.
  void build(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
             ChainDirection direction = ChainDirection::ranks);

  ChainDirection direction = ChainDirection::ranks;
  // Per node in range (index id - begin), the one `direction` asks for (the other is empty); 0 for
  // leaves and unbatchable nodes.
  std::vector<uint32_t> rank;
  std::vector<uint32_t> height;
  std::vector<uint32_t> longest;  // per local type
  int64_t unbatchable = 0;        // nodes whose op is kUnbatchable (not in any chain)

  int64_t lower_bound() const;  // unbatchable + sum of longest

 private:
  template <bool kHeights, typename Count>
  void fill(const ScheduleInput& input, const LocalTypes& types, const Dependencies& dependencies,
            std::vector<Count>& rows);
  std::vector<uint16_t> rows16_;
  std::vector<uint32_t> rows32_;
  std::vector<uint32_t> row_of_;      // per node: its row while live
  std::vector<uint32_t> unread_;      // per node: consumers that have not read its row yet
  std::vector<uint32_t> free_rows_;
};

// The analyses every policy may use, computed once per evaluation by the driver, the chains the
// way the policy reads them.
struct Analysis {
  LocalTypes types;
  Dependencies dependencies;
  TypeChains chains;
  void build(const ScheduleInput& input, ChainDirection direction = ChainDirection::ranks) {
    types.build(input);
    dependencies.build(input, types);
    chains.build(input, types, dependencies, direction);
  }
};

}  // namespace edb::scheduler
