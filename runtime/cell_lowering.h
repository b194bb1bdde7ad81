// Lowering a cell body to a cell program (jit/cell_program.h), and the cell a call node names
// (CallCell): its body laid out as a call lies, its frame, and, where the body lowers, its program.
// The jit executor runs the programs (runtime/cell_kernels.h); every executor can run a call's
// body batch by batch (runtime/call_expansion.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "jit/cell_program.h"
#include "memplan/plan.h"
#include "scheduler/schedule.h"

namespace edb::runtime {

// A cell body as copied into a trace, lowered: its program, and where each call finds its slots.
struct CellLowering {
  // Body node `offset` (from the call's first node) itself (argument < 0: its place in the arena)
  // or its `argument`-th argument (a node outside the body).
  struct Reference {
    uint32_t offset = 0;
    int32_t argument = -1;
    // A stored value (argument < 0) whose rows end inside a block: the floats its whole blocks take
    // (the frame keeps room for them); 0 for a value of whole blocks.
    int64_t padded_floats = 0;
  };
  // A contraction's weight: parameter pieces side by side (blocks * rows rows each).
  struct Weight {
    int32_t blocks = 1;
    std::vector<Reference> pieces;
    bool transposed = false;  // matmul_tn: the program's weight is the parameter's transpose (one piece)
    int32_t rows = 0;         // the product's rows; below blocks * the program's rows when padded
  };
  jit::CellProgram program;
  std::vector<Reference> call_slots;    // per call slot
  std::vector<Reference> shared_slots;  // per shared slot, found through the first call
  std::vector<Weight> weights;          // per packed weight
  std::vector<uint32_t> views;          // body slices the program reads in place of their source
};

// A cell whose calls are single nodes of the trace (ir::Op::call): its body laid out as a call's
// copy would lie in a trace (the leaves, then the operations contiguously from `first`). A call's
// value is its frame, and its outputs are slice views of it. When the body lowers to a cell program
// (`lowered`), the frame holds every value the program stores, at its slot's offset, and the jit
// runs a batch of calls as one kernel; otherwise the frame holds its outputs or, for a backward
// pass through the calls, every operation's value, in body order. Every executor can run any batch of calls by expanding the body over it
// (runtime/call_expansion.h), writing what the frame holds (`frame_at`).
struct CallCell final : ir::CellBody {
  struct Slot {
    enum Kind : uint8_t { argument, frame, fixed };
    Kind kind = frame;
    int64_t at = 0;                  // argument: the call's argument index; frame: offset in floats
    const float* constant = nullptr; // fixed: a constant of the body, its own copy
  };
  ir::Graph body;
  ir::NodeId first = 0;
  std::vector<ir::NodeId> placeholders;  // the body's leaf standing for argument i
  std::vector<ir::TypeId> types;         // per body node, in the engine's signature table
  std::vector<std::vector<uint32_t>> body_batches;  // the body's schedule: operation offsets per batch
  std::vector<int64_t> frame_at;         // per operation (offset from `first`): its place in the frame, or -1
  // Where output k lies in the frame; -1 for an output that is a leaf of the body (the call
  // returns the caller's node for it: an argument, a parameter or a constant).
  std::vector<int64_t> output_offsets;
  // Per output k: the first output at the same rows of the frame with the same shape (k itself
  // when none is): such outputs share one view, which the call's views count once.
  std::vector<uint32_t> first_alike;
  // Per output: whether the trace reads it in place, as rows of the call's frame, so that a call
  // records no view of it (a backward body's dy of a weight's term, read by matmul_nt_rows).
  std::vector<uint8_t> in_place;
  bool read_in_place(size_t k) const { return k < in_place.size() && in_place[k]; }
  std::vector<ir::NodeId> outputs;  // the body node of output k
  bool lowered = false;  // the program below runs a batch of calls as one kernel (jit)
  bool is_backward = false;  // the backward body of another cell (trace/backward.cpp)
  // A backward body's reads of its forward call's frame (argument 0: a slice of it, or a reshape
  // of one), read where they lie rather than kept (runtime/call_expansion.h).
  struct FrameRead {
    uint32_t offset = 0;  // the body node (from `first`)
    int64_t at = 0;       // the frame's first row it reads
  };
  std::vector<FrameRead> frame_reads;
  std::string why_not;   // otherwise, why not
  CellLowering lowering;
  std::vector<Slot> slots;              // per call slot of the program
  std::vector<const float*> shared;     // per shared slot: the parameter's data
};

// What a packed weight was packed from, per piece: its data, its version and, for a parameter
// whose span may be written at any time (ir::ParameterInfo::written_unversioned), a hash of its
// values, read before each use: such a write moves no version. A weight is packed again only when
// one of its pieces' sources changed (the jit's CellKernels, the GPU executor's cells).
struct PackedSource {
  const float* data = nullptr;
  uint64_t version = 0, values = 0;
  bool operator==(const PackedSource&) const = default;
};
PackedSource packed_source(const ir::ParameterInfo& info);

// Piece p of packed weight w of a lowered cell: the parameter it is (its data, shape and version),
// and how jit::pack_weight reads it where it lies (transposed, or with fewer rows than the
// product's blocks * rows, those past them packed as zeros).
const ir::ParameterInfo& weight_parameter(const CallCell& cell, size_t w, size_t p);
jit::WeightPiece weight_piece(const CellLowering::Weight& weight, const ir::ParameterInfo& info);
// The leaf of the body that shared slot i, or call slot s of kind `fixed`, reads (its floats are
// the leaf's shape).
ir::NodeId shared_slot_leaf(const CallCell& cell, size_t i);
ir::NodeId fixed_slot_leaf(const CallCell& cell, size_t s);

// The cell of a recorded body (`placeholders` stand for its arguments; `types` its nodes' batching
// types; `batches` its schedule over its operations, in order), laid out for calls as single
// nodes. With `lower`, the body is lowered to a cell program where it can be (why_not says why
// not), whose frame keeps the outputs and, `for_backward`, what the backward pass's rules read;
// without, or when it cannot, the frame keeps every value but the rows a backward body reads of
// its forward frame, laid out batch by batch (ir::CellBody::frame_blocks). `forward`: the cell
// whose backward body this is (argument 0 its frame); it lowers only where `forward` lowered,
// whose frames lie call by call. `read_in_place`: per output, whether the trace reads it as rows of
// the frame (CallCell::in_place), a column; empty: none.
std::unique_ptr<CallCell> make_call_cell(const ir::Graph& body, std::span<const ir::TypeId> types,
                                         std::span<const ir::NodeId> placeholders, std::span<const ir::NodeId> outputs,
                                         const scheduler::Schedule& batches, const std::string& name, bool lower,
                                         bool for_backward, const CallCell* forward = nullptr,
                                         std::span<const uint8_t> read_in_place = {});

}  // namespace edb::runtime
