// A cell a call node names (CallCell): its body laid out as a call of it lies (its leaves, then its
// operations contiguously), its frame, and, where the body lowers (runtime/cell_lowerer.h), its
// program's slots in the frame. Running the program is runtime/cell_kernels.cpp's.
#include "runtime/cell_lowering.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string_view>

#include "edbatch/errors.h"
#include "runtime/cell_lowerer.h"

namespace edb::runtime {

namespace {

// With EDB_EXPLAIN_CELLS set (not 0): a cell the jit does not compile says so on stderr, once a
// layout, with CallCell::why_not: its batches of calls run by expansion, correct but slower, and
// nothing else tells a user which of their cells does.
void explain_expansion(const CallCell& cell) {
  const char* explain = std::getenv("EDB_EXPLAIN_CELLS");
  if (!explain || !*explain || std::string_view(explain) == "0") return;
  std::fprintf(stderr, "edbatch: cell '%s' is not compiled (its batches of calls run by expansion): %s\n",
               cell.name.c_str(), cell.why_not.c_str());
}

// Lays out `cell` (its copy of the body already made) for the jit: the program of its body and
// a frame of what the program stores; false, with the reason in cell.why_not, when the body does
// not lower or an output is not a value of its own (a view or a concat of others).
bool lower_into(CallCell& cell, std::span<const ir::NodeId> to, std::span<const int64_t> argument_of,
                std::span<const uint32_t> output_offsets, bool for_backward) {
  const ir::Graph& copy = cell.body;
  const uint32_t count = uint32_t(copy.size() - cell.first);
  // Every slice of a column is a view: the frame keeps no copy of rows it can read in place.
  memplan::Plan plan;
  plan.offset.assign(copy.size(), -1);
  plan.view.assign(copy.size(), 0);
  for (ir::NodeId id = cell.first; id < copy.size(); ++id)
    plan.view[id] = copy.node(id).op == ir::Op::slice && copy.node(id).shape.cols == 1;
  try {
    cell.lowering = lowering::Lowerer(copy, plan, cell.first, count, cell.name, output_offsets, for_backward).lower();
  } catch (const lowering::Unsupported& unsupported) {
    cell.why_not = unsupported.why;
    return false;
  }
  // Each call slot: an argument of the call, a constant of the body, or a place in the frame.
  std::vector<int64_t> frame_of(count, -1);
  int64_t frame = 0;
  for (const CellLowering::Reference& ref : cell.lowering.call_slots) {
    CallCell::Slot slot;
    if (ref.argument < 0) {
      slot.kind = CallCell::Slot::frame;
      slot.at = frame;
      frame_of[ref.offset] = slot.at;
      frame += ref.padded_floats ? ref.padded_floats : copy.node(cell.first + ref.offset).shape.size();
    } else {
      const ir::NodeId arg = copy.args(cell.first + ref.offset)[size_t(ref.argument)];
      // Leaves come first in the copy, in the body's order.
      ir::NodeId original = 0;
      while (to[original] != arg) ++original;
      if (argument_of[original] >= 0) {
        slot.kind = CallCell::Slot::argument;
        slot.at = argument_of[original];
      } else {
        slot.kind = CallCell::Slot::fixed;
        slot.constant = copy.leaf_data(arg);
      }
    }
    cell.slots.push_back(slot);
  }
  // A view lies in its source's place (the program stores the source when the view is read).
  for (uint32_t o = 0; o < count; ++o) {
    const ir::Node& n = copy.node(cell.first + o);
    if (!plan.view[cell.first + o] || frame_of[o] >= 0) continue;
    const ir::NodeId source = copy.args(n)[0];
    if (source >= cell.first && frame_of[source - cell.first] >= 0) frame_of[o] = frame_of[source - cell.first] + n.attrs.begin;
  }
  for (uint32_t o : output_offsets)
    if (o != UINT32_MAX && frame_of[o] < 0) {
      cell.why_not = "output %" + std::to_string(o) + " is not a value of its own (a view or a concat of others)";
      cell.slots.clear();
      return false;
    }
  for (const CellLowering::Reference& ref : cell.lowering.shared_slots)
    cell.shared.push_back(copy.leaf_data(copy.args(cell.first + ref.offset)[size_t(ref.argument)]));
  cell.frame_at = std::move(frame_of);
  cell.frame_floats = frame;
  return true;
}

}  // namespace

namespace {

// The frame of a cell that runs by expansion (runtime/call_expansion.h), laid out as the
// expansion's plan lays out one call (memplan::plan_batch_order): the body's batches in order,
// each one block of its members' values, but for a batch of views (slices of a column, reshapes,
// of values the frame holds), which takes no room and lies inside its sources. Every value is
// kept, so a batch of n calls runs in place: the expansion's plan for n calls is the batch's
// frames, block j holding each call's rows of it (ir::CellBody::frame_blocks).
void lay_out_by_batch(CallCell& cell, std::span<const uint32_t> output_offsets) {
  const ir::Graph& body = cell.body;
  cell.frame_at.assign(size_t(body.size() - cell.first), -1);
  // A backward body's rows of its forward frame: a slice of argument 0, or a reshape of one; read
  // in place by the expansion, unless the body returns one. Per body node: its first row, or -1.
  std::vector<int64_t> frame_read(size_t(body.size() - cell.first), -1);
  if (cell.is_backward && !cell.placeholders.empty())
    for (uint32_t o = 0; o < frame_read.size(); ++o) {
      const ir::Node& n = body.node(cell.first + o);
      if (n.op != ir::Op::slice && n.op != ir::Op::reshape) continue;
      if (std::find(output_offsets.begin(), output_offsets.end(), o) != output_offsets.end()) continue;
      const ir::NodeId source = body.args(n)[0];
      if (n.op == ir::Op::slice && source == cell.placeholders[0]) frame_read[o] = n.attrs.begin;
      else if (n.op == ir::Op::reshape && source >= cell.first && frame_read[source - cell.first] >= 0 &&
               body.node(source).op == ir::Op::slice)
        frame_read[o] = frame_read[source - cell.first];
      if (frame_read[o] >= 0) cell.frame_reads.push_back({o, frame_read[o]});
    }
  cell.frame_blocks = {0};
  int64_t end = 0;
  auto viewed = [&](uint32_t o) {  // memplan's rule for a view, on the expansion's graph
    const ir::Node& n = body.node(cell.first + o);
    const ir::NodeId source = body.args(n)[0];
    return memplan::viewable(n) && source >= cell.first && cell.frame_at[source - cell.first] >= 0;
  };
  for (const std::vector<uint32_t>& batch : cell.body_batches) {
    bool stored = false;  // a member takes room
    for (uint32_t o : batch) stored |= frame_read[o] < 0;
    if (!stored) continue;
    if (std::all_of(batch.begin(), batch.end(), [&](uint32_t o) { return frame_read[o] >= 0 || viewed(o); })) {
      for (uint32_t o : batch) {
        if (frame_read[o] >= 0) continue;
        const ir::Node& n = body.node(cell.first + o);
        cell.frame_at[o] = cell.frame_at[body.args(n)[0] - cell.first] + memplan::view_offset(n);
      }
      continue;
    }
    for (uint32_t o : batch) {
      if (frame_read[o] >= 0) continue;
      cell.frame_at[o] = end;
      end += body.node(cell.first + o).shape.size();
    }
    cell.frame_blocks.push_back(end);
  }
  cell.frame_floats = end;
}

}  // namespace

std::unique_ptr<CallCell> make_call_cell(const ir::Graph& body, std::span<const ir::TypeId> types,
                                         std::span<const ir::NodeId> placeholders, std::span<const ir::NodeId> outputs,
                                         const scheduler::Schedule& batches, const std::string& name, bool lower,
                                         bool for_backward, const CallCell* forward,
                                         std::span<const uint8_t> read_in_place) {
  auto cell = std::make_unique<CallCell>();
  cell->in_place.assign(read_in_place.begin(), read_in_place.end());
  cell->name = name;
  cell->is_backward = forward != nullptr;
  lower = lower && (!forward || forward->lowered);
  // The body as a call's copy lies in a trace: its leaves, then its operations contiguously.
  std::vector<ir::NodeId> to(body.size(), ir::kNoNode);
  std::vector<int64_t> argument_of(body.size(), -1);
  for (size_t i = 0; i < placeholders.size(); ++i) argument_of[placeholders[i]] = int64_t(i);
  ir::Graph& copy = cell->body;
  for (const ir::ParameterInfo& info : body.parameters()) copy.add_parameter(info);
  for (int leaves = 1; leaves >= 0; --leaves) {
    if (!leaves) cell->first = ir::NodeId(copy.size());
    for (ir::NodeId id = 0; id < body.size(); ++id) {
      const ir::Node& n = body.node(id);
      if (ir::has_flag(n.op, ir::kLeaf) != (leaves == 1)) continue;
      std::vector<ir::NodeId> args;
      for (ir::NodeId arg : body.args(n)) args.push_back(to[arg]);
      ir::Attributes attrs = n.attrs;
      if (n.op == ir::Op::input)
        attrs.index = copy.add_constants(std::span<const float>(body.leaf_data(id), size_t(n.shape.size())));
      to[id] = copy.add(n.op, args, n.shape, attrs);
    }
  }
  cell->types.assign(copy.size(), ir::kNoType);
  for (ir::NodeId id = 0; id < body.size(); ++id) cell->types[to[id]] = types[id];
  for (ir::NodeId p : placeholders) cell->placeholders.push_back(to[p]);
  for (size_t b = 0; b < batches.batch_count(); ++b)
    cell->body_batches.emplace_back(batches.batch(b).begin(), batches.batch(b).end());
  const uint32_t count = uint32_t(copy.size() - cell->first);
  std::vector<uint32_t> output_offsets;  // UINT32_MAX: a leaf
  for (ir::NodeId o : outputs) {
    cell->outputs.push_back(to[o]);
    output_offsets.push_back(to[o] < cell->first ? UINT32_MAX : to[o] - cell->first);
  }
  cell->lowered = lower && count > 0 && lower_into(*cell, to, argument_of, output_offsets, for_backward);
  if (!lower) cell->why_not = "not lowered (every value is kept)";
  else if (count > 0 && !cell->lowered) explain_expansion(*cell);
  if (!cell->lowered) lay_out_by_batch(*cell, output_offsets);
  // A view per output in the frame that the trace does not read in place, shared by outputs alike.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const uint32_t o = output_offsets[k];
    cell->output_offsets.push_back(o == UINT32_MAX ? -1 : cell->frame_at[o]);
    const bool viewed = o != UINT32_MAX && !cell->read_in_place(k);
    uint32_t alike = 0;
    while (alike < k && !(output_offsets[alike] != UINT32_MAX && !cell->read_in_place(alike) &&
                          cell->output_offsets[alike] == cell->output_offsets[k] &&
                          body.node(outputs[alike]).shape == body.node(outputs[k]).shape))
      ++alike;
    cell->first_alike.push_back(viewed ? alike : uint32_t(k));
    if (viewed && alike == k) cell->output_views += body.node(outputs[k]).shape.cols == 1 ? 1 : 2;
  }
  for (ir::NodeId p : placeholders) cell->arguments.push_back(body.node(p).shape);
  for (ir::NodeId id = cell->first; id < copy.size(); ++id) cell->flops += ir::node_flops(copy, id);
  cell->operations = count;
  return cell;
}

PackedSource packed_source(const ir::ParameterInfo& info) {
  PackedSource source{info.data, info.version ? *info.version : 0, 0};
  if (info.written_unversioned && *info.written_unversioned)
    source.values = std::hash<std::string_view>()(
        std::string_view(reinterpret_cast<const char*>(info.data), size_t(info.shape.size()) * sizeof(float)));
  return source;
}

const ir::ParameterInfo& weight_parameter(const CallCell& cell, size_t w, size_t p) {
  const CellLowering::Reference& piece = cell.lowering.weights[w].pieces[p];
  const ir::NodeId node = cell.body.args(cell.first + piece.offset)[size_t(piece.argument)];
  return cell.body.parameter(cell.body.node(node).attrs.parameter);
}

jit::WeightPiece weight_piece(const CellLowering::Weight& weight, const ir::ParameterInfo& info) {
  if (weight.transposed) return {info.data, info.shape.rows, info.shape.cols, true};
  return {info.data, info.shape.cols, info.shape.rows, false};
}

ir::NodeId shared_slot_leaf(const CallCell& cell, size_t i) {
  const CellLowering::Reference& ref = cell.lowering.shared_slots[i];
  return cell.body.args(cell.first + ref.offset)[size_t(ref.argument)];
}

ir::NodeId fixed_slot_leaf(const CallCell& cell, size_t s) {
  const CellLowering::Reference& ref = cell.lowering.call_slots[s];
  return cell.body.args(cell.first + ref.offset)[size_t(ref.argument)];
}

}  // namespace edb::runtime
