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
  // Views of batch calls' members' values (ir::CallBatch: slices and reshapes of its frames, typed
  // as call outputs, never scheduled), in recording order: their recorder lists them here, as they
  // lie anywhere after their batch call, and place_call_outputs places them.
  std::vector<ir::NodeId> batch_views;

  bool is_view(ir::NodeId id) const { return view[id] != 0; }
};

// A slice of a column and a reshape may alias their argument (when it is planned): the rows
// [view_offset, + size) of it. Both planners, and a cell's frame laid out as an expansion plans
// it (runtime/cell_lowering.cpp), follow this rule.
inline bool viewable(const ir::Node& n) {
  return (n.op == ir::Op::slice && n.shape.cols == 1) || n.op == ir::Op::reshape || n.op == ir::Op::scale_gradient;
}
inline int64_t view_offset(const ir::Node& n) { return n.op == ir::Op::slice ? n.attrs.begin : 0; }

// Where row `at` of the frame of call node `call` (planned) lies in the arena: `at` floats past
// the call's offset, or, where its cell lays a batch's frames out batch by batch, where the
// cell's locate() puts that row of that call among its batch's frames (Plan::frames).
int64_t frame_row(const ir::Graph& graph, const Plan& plan, ir::NodeId call, int64_t at);

// Where view `id` (planned as a view) starts: its argument's offset plus view_offset, or for a
// slice of a call, frame_row of its first row.
int64_t view_at(const ir::Graph& graph, const Plan& plan, ir::NodeId id);

// Records, for a planned batch of calls (`calls`, their offsets assigned, consecutive), where
// their frames lie (Plan::frames), if their cell lays frames out batch by batch. Both planners
// call it before placing views.
void place_call_frames(const ir::Graph& graph, std::span<const ir::NodeId> calls, Plan& plan);

// Extends `plan` (which covers nodes before the schedule's range) with the schedule's nodes,
// each batch's outputs consecutive, starting at the current end of the arena.
void plan_batch_order(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan);

// Places the views of each scheduled cell call's outputs (never scheduled themselves; recorded
// right after their call, trace/cell.cpp) inside the call's frame, and the batch calls' views
// (Plan::batch_views) whose batch call is placed. Both planners end with it.
void place_call_outputs(const ir::Graph& graph, const scheduler::Schedule& schedule, Plan& plan);

// Checks every planned node lies inside the arena, no two planned buffers overlap (nothing is
// freed yet, so every buffer is live for the whole trace), and every view lies inside its
// argument at the rows it names. Throws edb::InternalError.
void verify(const ir::Graph& graph, const Plan& plan);

}  // namespace edb::memplan
