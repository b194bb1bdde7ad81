// Same-type chain ranks: for each scheduled node, the most nodes of its own type on any path that
// ends at it (1 when it has no ancestor of its type). The lower bound sums, per type, the longest
// chain; the greedy and learned policies use ranks to count a type's frontier in linear time.
// Precondition: LocalTypes built for the same input.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/frontier.h"

namespace edb::scheduler {

struct TypeChains {
  std::vector<uint32_t> rank;     // per node in range (index id - begin); 0 for leaves
  std::vector<uint32_t> longest;  // per local type
  int64_t unbatchable = 0;        // nodes whose op is kUnbatchable (not in any chain)
};

// One pass in topological order over a dense row of per-type counts per node (a vector max per
// edge), so the cost is nodes x types / vector width.
TypeChains type_chains(const ScheduleInput& input, const LocalTypes& types);

}  // namespace edb::scheduler
