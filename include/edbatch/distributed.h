// Data-parallel training over MPI: ranks that each record and run their share of every global
// batch and sum their gradients before each optimizer step, so every rank holds the same weights.
// Built only when CMake finds MPI (EDB_MPI); the transport is the MPI library's, never our own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "edbatch/edbatch.h"

namespace edb {

struct DataParallelOptions {
  // Dense gradients of at least this many bytes are reduced in place, one MPI_Iallreduce each, on
  // the Gradients' own storage; smaller ones (biases, small classifiers) and the loss are packed
  // into buckets of about this size, one MPI_Iallreduce per bucket. Must be > 0.
  size_t bucket_bytes = size_t{64} << 10;
};

// What the reductions cost, summed over the steps so far.
struct ReductionStats {
  int64_t steps = 0;
  int64_t bytes = 0;      // bytes this rank handed to MPI: reduced values, and the table entries gathered
  double wait_ms = 0;     // in finish(): waiting for MPI, and unpacking
  double start_ms = 0;    // in start(): packing, and starting the reductions
};

// One rank of a data-parallel run over MPI_COMM_WORLD (a duplicate of it, so its collectives never
// match another library's). The first DataParallel of a process initialises MPI (funneled: only
// the thread that made it calls MPI; the engine's own threads never do) and MPI is finalised at
// exit. Every call marked collective must be made by every rank, in the same order.
//
// Gradients are summed, not averaged: a rank records the loss of its share of a global batch of B
// instances as (sum of its instances' losses) / B, so the sum over ranks is the global batch's mean
// loss and its gradients are those of one process training on the whole batch. A dense parameter
// is summed over every rank; a lookup table's gradient is summed over the union of the rows any
// rank read (the entries are gathered first, MPI_Allgatherv, and a rank that did not read a row
// contributes zeros to it), so its rows update exactly as they would in one process. A parameter
// that no rank's loss depended on stays out of the gradients, as it would in one process.
class DataParallel {
 public:
  // Whether this build has MPI. Without it the constructor throws a UsageError saying so.
  static bool available();
  // Whether an MPI launcher (mpirun, mpiexec, srun) started this process, from its environment,
  // without initialising MPI; and the number of ranks it says (1 when not launched).
  static bool launched();
  static int launched_size();
  static int launched_rank();  // this process's rank the launcher says (0 when not launched)

  // Collective. `model` must outlive this object; its parameters and lookup tables, in order, are
  // what the gradients are reduced over (checked to match across ranks: names and shapes).
  explicit DataParallel(Model& model, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const;
  int size() const;
  // This rank's share [first, last) of the instances [begin, end): contiguous, in rank order, the
  // sizes differing by at most one (empty when there are fewer instances than ranks).
  std::pair<size_t, size_t> share(size_t begin, size_t end) const;
  // The same over instances of the given costs (>= 0; a tree's nodes, a sentence's words), indices
  // into `costs`: contiguous, in rank order, each cut where the running cost is nearest to its
  // fraction of the total, and at least one instance each when there are as many as ranks.
  std::pair<size_t, size_t> share(std::span<const double> costs) const;

  // Collective: a UsageError on every rank when `value` differs between ranks, naming `what`, the
  // first rank whose value differs from rank 0's and both values (shortened).
  void check_same(const std::string& what, const std::string& value);
  // Collective: a UsageError on every rank when the model's values (a checksum of every parameter
  // and table) differ from rank 0's, naming the first rank that differs and `when`.
  void check_weights(const std::string& when);

  // Collective: starts summing `gradients` (this rank's) across the ranks, without waiting: dense
  // gradients in place and in buckets, table entries gathered. `gradients` must stay untouched
  // until finish(). A gradient of another model's parameter is a UsageError.
  void start(Gradients& gradients);
  // Lets MPI advance the reductions started (call it now and then while doing other work, such as
  // recording the next step: without an MPI progress thread they advance only inside MPI calls).
  void progress();
  // Waits for the reductions started and leaves the sums in `gradients` (the one given to start):
  // the loss, a gradient for every parameter some rank's loss depended on, and each table's rows.
  void finish(Gradients& gradients);
  void reduce(Gradients& gradients) {
    start(gradients);
    finish(gradients);
  }
  const ReductionStats& stats() const;

  // Prints "PROGRAM: rank R of N: MESSAGE" on stderr and ends every rank (MPI_Abort): for a failure
  // that the other ranks may not see, which would otherwise leave them waiting in a collective.
  [[noreturn]] void abort(const std::string& program, const std::string& message, int status);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace edb
