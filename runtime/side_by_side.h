// Independent batches side by side (issue 43, step 3). With two or more threads, a run of
// consecutive batches of a schedule none of which reads another's output is a window: the
// executor prepares its batches one after another on its own thread (a compiled cell's tables),
// then runs them as one job of the pool, a batch a task, each whole on the thread that takes it,
// over a lane of its own (scratch memory, a pool of one thread, counters). A batch cut into pieces
// across the pool costs a hand-off per piece and leaves the other thread idle between batches
// that are too small to cut, which side by side they are not.
//
// A window is only formed where it pays: two batches or more that run something, enough arithmetic
// to be worth the hand-offs, and every batch in it small enough that it would run whole anyway, or
// the largest at most kBalance of the window's arithmetic over the threads, so that no thread waits
// long for the one holding the largest. Which windows form depends on the schedule alone, never on
// which threads are free at the moment: a batch run whole may round apart from the same batch cut
// (an Eigen reduction groups its sums by where a piece begins), so two runs give the same bits only
// with the same windows. No batch of a window reads or writes what another writes, so which thread
// runs which changes nothing. Off unless EDB_SIDE_BY_SIDE=1 (docs/design.md: on the sample models
// it measured 0.95-1.01x of every batch alone).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "edbatch/stats.h"
#include "runtime/batched.h"
#include "runtime/executor.h"
#include "runtime/thread_pool.h"

namespace edb::scheduler {
struct Schedule;
}

namespace edb::runtime {

// What a batch run beside others uses instead of its executor's own.
struct Lane {
  BatchedExecutor::Scratch scratch;
  ThreadPool pool{1};  // the caller alone: a batch beside others is not cut
  Stats stats;
};

class SideBySide {
 public:
  static constexpr size_t kMaxWindow = 8;
  // A batch of less arithmetic than this (its flops plus its output's floats) runs whole even
  // alone: two pieces of cell_kernels.cpp's and batched.cpp's smallest.
  static constexpr int64_t kWholeFlops = 800'000;
  // A window of larger batches: its largest at most this share of its arithmetic per thread.
  static constexpr double kBalance = 1.2;
  // A window of less arithmetic than this is not worth its hand-offs: its batches run alone.
  static constexpr int64_t kMinWindowFlops = 400'000;

  // Before an evaluation of `schedule` on `threads` threads. Which batch writes each node's value is
  // found at the first window() asked for (a pass over the evaluation's nodes).
  void start(const scheduler::Schedule& schedule, const Values& values, int threads);
  // The window from batch b: [b, end), end - b < 2 when batch b runs alone. `beside(i)`: whether
  // the executor can run batch i beside others (views count as batches that run nothing).
  size_t window(size_t b, const std::function<bool(size_t)>& beside);
  // The lane of a window's k-th batch.
  Lane& lane(size_t k);
  // Between evaluations: what the executor's own scratch keeps (BatchedExecutor::Scratch::trim).
  void trim(size_t max_bytes);

  // Tests: InternalError unless each batch of a window (`batches`, views left out) writes arena
  // floats no other batch of it reads or writes, by the addresses its members and arguments
  // occupy: what window() concluded from the nodes, checked from where the values lie (a call by
  // its nominal range, which holds every row of its frame, wherever Plan::frames puts them).
  void verify(std::span<const size_t> batches) const;

  // Tests: windows of any balance, so that every independent run is side by side; verify() every
  // window.
  static std::atomic<bool> any_balance;
  static std::atomic<bool> verify_windows;

 private:
  void find_producers();
  // Whether batch i reads a value written by a batch in [begin, i).
  bool reads_from(size_t i, size_t begin) const;
  int64_t cost(size_t i) const;  // batch i's arithmetic (flops, a moved float counting one)

  const scheduler::Schedule* schedule_ = nullptr;
  const Values* values_ = nullptr;
  int threads_ = 1;
  ir::NodeId base_ = 0;             // nodes before it were computed by earlier evaluations
  std::vector<int32_t> producer_;  // per node from base_: the batch writing its value, or -1
  bool found_ = false;             // producer_ is this evaluation's
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace edb::runtime
