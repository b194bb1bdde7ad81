// DESIGN.md's lower bound on the number of batches of any schedule:
// LB = (#unbatchable nodes) + sum over types t of (max number of type-t nodes on any path).
// Precondition: types assigned for every node of the graph (kNoType for leaves).
#pragma once

#include <cstdint>

#include "scheduler/schedule.h"

namespace edb::scheduler {

// Over nodes [input.begin, size); earlier nodes count as already evaluated.
int64_t lower_bound(const ScheduleInput& input);

}  // namespace edb::scheduler
