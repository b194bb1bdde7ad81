// Plan: where each scheduled node's output lives in the arena. This first planner lays batches out
// in schedule order, each batch's outputs consecutive (constraint C1 of DESIGN.md); the PQ-tree
// planner that also makes operands consecutive comes later and produces the same Plan type.
// Precondition: the schedule passed scheduler::verify.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"
#include "scheduler/schedule.h"

namespace edb::memplan {

struct Plan {
  std::vector<int64_t> offset;  // per node, in floats; -1 for leaves and unplanned nodes
  int64_t arena_floats = 0;     // the arena must hold at least this many floats
};

// Extends `plan` (which covers nodes before the schedule's range) with the schedule's nodes,
// each batch's outputs consecutive, starting at the current end of the arena.
void plan_batch_order(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan);

// Checks every planned node lies inside the arena and no two planned nodes overlap (nothing is
// freed yet, so every planned buffer is live for the whole trace). Throws edb::InternalError.
void verify(const ir::Graph& graph, const Plan& plan);

}  // namespace edb::memplan
