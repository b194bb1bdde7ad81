// Plan: where each scheduled node's output lives in the arena. This first planner lays batches out
// in schedule order, each batch's outputs consecutive (constraint C1 of docs/design.md), except batches
// of views: a slice of a column vector is its input's rows and a reshape is its input's values,
// so they take no memory and no copy.
// The PQ-tree planner that also makes operands consecutive comes later, with the same Plan type.
// Precondition: the schedule passed scheduler::verify.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"
#include "scheduler/schedule.h"

namespace edb::memplan {

struct Plan {
  std::vector<int64_t> offset;  // per node, in floats; -1 for leaves and unplanned nodes
  std::vector<uint8_t> view;    // per node: 1 when the node aliases part of its argument
  int64_t arena_floats = 0;     // the arena must hold at least this many floats

  bool is_view(ir::NodeId id) const { return view[id] != 0; }
};

// Extends `plan` (which covers nodes before the schedule's range) with the schedule's nodes,
// each batch's outputs consecutive, starting at the current end of the arena.
void plan_batch_order(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan);

// Places the views of each scheduled cell call's outputs (never scheduled themselves; recorded
// right after their call, trace/cell.cpp) inside the call's frame. Both planners end with it.
void place_call_outputs(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan);

// Checks every planned node lies inside the arena, no two planned buffers overlap (nothing is
// freed yet, so every buffer is live for the whole trace), and every view lies inside its
// argument at the rows it names. Throws edb::InternalError.
void verify(const ir::Graph& graph, const Plan& plan);

}  // namespace edb::memplan
