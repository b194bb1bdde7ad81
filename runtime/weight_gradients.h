// A weight's gradient over every use in a trace (matmul_nt, matmul_nt_rows): dW = sum_k a_k b_k^T,
// one contraction whose reduction runs over every use's columns, read where the uses left them
// (runtime/outer_products.h), in blocks of uses one panel deep.
//
// With two or more threads its blocks run early: a block is ready once the batches that write its
// uses have run, which in a training step's backward pass is long before the contraction's own
// batch (the uses come batch by batch down the backward chain, whose last batches are too small to
// cut across threads). The executor offers the ready blocks to the pool as side work
// (ThreadPool::offer); a thread waiting for the evaluation runs them in between the chain's batches,
// and the contraction's batch runs what is left. A weight's blocks run one after another in use
// order, each adding into the output, so the sums are those of one thread running the whole
// contraction, whichever thread ran which block.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::scheduler {
struct Schedule;
}

namespace edb::runtime {

struct BatchContext;  // runtime/batch_context.h

// The blocks of one evaluation's contractions, offered to a pool while the schedule runs.
class WeightGradients final : public SideWork {
 public:
  // Before `schedule` runs on `pool` (two or more threads): every contraction of the schedule
  // with a block ready before its own batch, and the offer of their blocks to the pool.
  void start(const scheduler::Schedule& schedule, const Values& values, ThreadPool& pool);
  // After the schedule's batches up to and including batch `b` ran: the blocks that made ready.
  void ran(size_t b);
  // Takes the offer back; returns once no other thread runs a block (also after an error), with
  // the blocks that ran ahead of their contraction's batch.
  int64_t stop();
  bool active() const { return pool_ != nullptr; }

  // Finishes member k of batch `c` when it was started here (its blocks left run now, across the
  // pool where they split); false for a member this evaluation does not hold.
  bool finish(const BatchContext& c, int64_t k);

  bool available() const override;
  bool run_one() override;

  // Tests: after each batch that makes blocks ready, the executor waits (up to 10 s) until other
  // threads have run every block ready, so that each runs as early as it may however busy the
  // machine is (a block that waited for too little would read a use before its batch wrote it);
  // and no block runs ahead at all (each contraction's blocks all run at its batch, in order: the
  // same sums).
  static std::atomic<bool> wait_for_a_taker;
  static std::atomic<bool> run_none_ahead;

 private:
  struct Contraction {
    ir::NodeId node = ir::kNoNode;
    ir::Shape a_shape, b_shape;  // each pair's factors (weight_gradients.cpp's Factors)
    size_t pairs = 0;
    float* out = nullptr;
    int64_t rows = 0, cols = 0, uses = 0, depth = 0;
    std::vector<const float*> a, b;       // per use, its columns
    std::vector<int32_t> ready_after;     // per block: the last batch it waits for (-1: none)
    int32_t blocks = 0;
    std::atomic<int32_t> ready{0};        // blocks whose batches ran
    std::atomic<int32_t> claimed{0};      // blocks a thread took, in order
    std::atomic<int32_t> done{0};         // blocks finished, in order
    std::exception_ptr error;             // the first block's failure, thrown by finish()
    // Whether block j may be claimed: ready, and the block before it done.
    bool claimable(int32_t j) const {
      return j < blocks && j < ready.load(std::memory_order_acquire) && done.load(std::memory_order_acquire) == j;
    }
    int64_t panel_floats() const;  // the panels a block packs (the first is the largest)
  };
  // Runs block j of `c`, claimed by this thread; `split` cuts its column tiles (on the executor's
  // pool) or runs them whole (side work).
  void run_block(Contraction& c, int32_t j, float* panels,
                 const std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>& split);
  // Claims the next block of `c` when it is ready and the one before it is done.
  static bool claim(Contraction& c, int32_t& j);

  ThreadPool* pool_ = nullptr;
  const Values* values_ = nullptr;  // the evaluation's, while it is offered
  std::vector<std::unique_ptr<Contraction>> contractions_;
  std::vector<int32_t> batch_of_;  // per node from base_: its batch in the schedule, or -1
  ir::NodeId base_ = 0;
  size_t next_event_ = SIZE_MAX;    // the first batch after which a block becomes ready
  std::atomic<int64_t> early_{0};   // blocks run_one() ran: ahead of their batch
};

// A batch of matmul_nt or matmul_nt_rows members: each member's contraction, the blocks `early`
// did not run (with `early` null or inactive, all of them).
void run_matmul_nt(const BatchContext& c, WeightGradients* early);

}  // namespace edb::runtime
