// The PQ-tree layout planner (docs/design.md "Plan"): orders buffers so that each batch's outputs are
// consecutive (C1) and, where possible, each batched operand too (C2) in member order (C3), so the
// executor reads operands in place instead of gathering them. Also the operand-mode checker.
// Precondition: the schedule passed scheduler::verify; `plan` covers the nodes before its range.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ir/ir.h"
#include "memplan/plan.h"
#include "scheduler/schedule.h"

namespace edb::memplan {

struct LayoutStats {
  int64_t constraints_tried = 0;    // C1 (one per batch of 2+ buffers) and C2 (one per batched operand slot)
  int64_t constraints_kept = 0;     // reduced into the PQ tree
  int64_t constraints_dropped = 0;  // C2 sets no order could keep consecutive with the ones before
  int64_t operands_misaligned = 0;  // kept C2 slots whose member order still differs (C3 failed)
  double plan_ms = 0;                       // all of plan_layout, the comparison below included
  int64_t bytes_gathered = 0;               // predicted by operand_modes for the plan returned
  int64_t bytes_gathered_batch_order = 0;   // the same for plan_batch_order's plan
  int64_t bytes_copied = 0;                 // operand_modes' bytes_copied for the plan returned
  int64_t bytes_copied_batch_order = 0;     // the same for plan_batch_order's plan
  bool kept_batch_order = false;            // the layout did not copy less, so the batch order was kept
                                            // (or copied too little to be worth building the PQ tree)
};

// Reorders the members inside each batch of `schedule` (never which nodes form a batch, nor the
// batch order) and extends `plan` like plan_batch_order: an offset for every scheduled node, the
// same nodes made views, all buffers live for the whole trace. C1 always holds; C2 sets are tried
// largest operand bytes first, and one that contradicts those kept is dropped (that operand is
// gathered). Each batch's members follow one operand (the kept set that lines up the most bytes).
// When the executor would not copy fewer bytes under the result than under plan_batch_order's
// plan (OperandModes::bytes_copied, then bytes_gathered), that plan is returned; so it is, without
// building the PQ tree, when that plan copies under 1 KiB per buffer (less than the tree costs).
// A LayoutPlanner also keeps the batch order for the next 1000 plans after a tree that saved less
// copying (at 0.1 ns a byte) than it took to build. plan_layout always builds the tree.
void plan_layout(const ir::Graph& graph, scheduler::Schedule& schedule, Plan& plan, LayoutStats* stats = nullptr);

// The same planner keeping its arrays and PQ tree between plans (the driver plans every trace).
class LayoutPlanner {
 public:
  LayoutPlanner();
  ~LayoutPlanner();
  void plan(const ir::Graph& graph, scheduler::Schedule& schedule, Plan& plan, LayoutStats* stats = nullptr);
  // Builds the PQ tree even where the batch order copies too little to pay for it (plan_layout).
  void always_build() { always_build_ = true; }
  struct Workspace;

 private:
  std::unique_ptr<Workspace> workspace_;
  bool always_build_ = false;
  int skip_ = 0;  // plans left that keep the batch order: the last tree cost more than it saved
};

// How the batched executor reads one operand slot of a batch (runtime/batched.cpp's rule):
// contiguous (member k at base + k * stride, one member alone included), shared (one pointer for
// every member), gather (anything else), unread (the executor does not classify the slot: a
// batch of views, a lookup, the products of a linear op without one shared weight).
enum class OperandMode : uint8_t { contiguous, shared, gather, unread };

// Whether a GEMM reads a gathered X in place, one GEMM per strided run, rather than copying it:
// each extra run packs W's rows again, a copy moves every member (runtime/batched.cpp's rule).
inline bool gemm_reads_runs(int64_t runs, int64_t weight_rows, int64_t members) {
  constexpr int64_t kCallCost = 32;  // a GEMM call's fixed cost, in members' worth of copying
  return (runs - 1) * (weight_rows + kCallCost) <= members;
}

struct OperandModes {
  std::vector<uint32_t> slot_begin{0};  // batch b's slots are modes[slot_begin[b], slot_begin[b+1])
  std::vector<OperandMode> modes;
  int64_t bytes_gathered = 0;  // 4 bytes * operand size * members, summed over gathered slots
  // What the batched executor copies: in a gathered slot, the members alone in their strided run
  // (every member where it copies the whole operand: a GEMM X it does not read run by run, an
  // affine's bias, the operand of softmax, log_softmax and pick_neg_log_softmax).
  int64_t bytes_copied = 0;

  std::span<const OperandMode> batch(size_t b) const {
    return {modes.data() + slot_begin[b], slot_begin[b + 1] - slot_begin[b]};
  }
};

// The mode of every (batch, operand slot) under `plan`, from the offsets the way the executor
// computes it from addresses. Arena values are compared by offset and leaves by their address;
// an arena value and a leaf in one slot are counted as gathered (their distance depends on where
// the arena happens to be allocated).
OperandModes operand_modes(const ir::Graph& graph, const scheduler::Schedule& schedule, const Plan& plan);

}  // namespace edb::memplan
