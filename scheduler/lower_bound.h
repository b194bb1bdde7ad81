// The lower bound (docs/design.md) on the number of batches of any schedule:
// LB = (#unbatchable nodes) + sum over types t of (max number of type-t nodes on any path).
// Precondition: types assigned for every node of the graph (kNoType for leaves).
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/schedule.h"

namespace edb::scheduler {

struct Analysis;

// Over nodes [input.begin, size); earlier nodes count as already evaluated.
int64_t lower_bound(const ScheduleInput& input);

// The bound Stats::lower_bound reports, comparable with Stats::batches: over the nodes the policies
// see (a cell call is one node, whether its body is copied or it is a single `call` node), each
// type's longest chain weighted by the batches one batch of it counts (a call's: its cell's
// batches; every other type's: 1). The same for every executor. `analysis` is built over `input`;
// `weights` is scratch.
int64_t weighted_lower_bound(const ScheduleInput& input, const Analysis& analysis, std::vector<uint32_t>& weights);

}  // namespace edb::scheduler
