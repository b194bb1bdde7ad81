// Plan: where each scheduled node's output lives in the arena. This first planner lays batches out
// in schedule order, each batch's outputs consecutive (constraint C1 of docs/design.md), except batches
// of views: a slice of a column vector is its input's rows and a reshape is its input's values,
// so they take no memory and no copy.
// The PQ-tree planner that also makes operands consecutive comes later, with the same Plan type.
// Precondition: the schedule passed scheduler::verify.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/ir.h"
#include "scheduler/schedule.h"

namespace edb::memplan {

struct Plan {
  std::vector<int64_t> offset;  // per node, in floats; -1 for leaves and unplanned nodes
  std::vector<uint8_t> view;    // per node: 1 when the node aliases part of its argument
  int64_t arena_floats = 0;     // the arena must hold at least this many floats
  // Per call node of a cell whose batches of calls lay their frames out batch by batch
  // (ir::CellBody::frame_blocks): where its batch's frames begin, and how many calls the batch
  // holds. Sized by the first such batch; meaningless for other nodes.
  struct Frames {
    int64_t first = -1;
    int64_t calls = 0;
  };
  std::vector<Frames> frames;

  bool is_view(ir::NodeId id) const { return view[id] != 0; }
};

// Where view `id` (a slice of a column or a reshape, planned as a view) starts: its argument's
// offset plus the slice's first row; a slice of a call whose cell lays frames out batch by batch
// lies where the cell's locate() puts that row of that call's frame.
int64_t view_at(const ir::Graph& graph, const Plan& plan, ir::NodeId id);

// Records, for a planned batch of calls (`calls`, their offsets assigned, consecutive), where
// their frames lie (Plan::frames), if their cell lays frames out batch by batch. Both planners
// call it before placing views.
void place_call_frames(const ir::Graph& graph, std::span<const ir::NodeId> calls, Plan& plan);

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
