// The training loop shared by edb-run --train and edb-bench-train: epochs over a seeded shuffle of
// the training split, one trace per batch (forward, Trace::backward, Optimizer::step, each timed;
// the next batch's forward pass is recorded while this one's runs), and after each epoch the
// held-out split's loss and accuracy against its majority class.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <edbatch/distributed.h>
#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "samples/models.h"

namespace edb::samples {

// The instances are split without shuffling: the held-out ones are the last round(count *
// holdout) (at least one when holdout > 0), so a split never depends on a seed.
struct Split {
  size_t train = 0;
  size_t heldout = 0;
};
// UsageError when holdout is outside [0, 1) or leaves no training instance.
Split split_instances(size_t count, double holdout);

// Epoch `epoch`'s order of the training instances [0, count): a Fisher-Yates shuffle drawn from
// (seed, epoch) alone, with a portable generator (the same order with every standard library).
std::vector<size_t> epoch_order(size_t count, uint64_t seed, int epoch);

// Loss and accuracy of a set of instances, forward only. Losses are per instance (the sum over its
// labelled positions, as record_loss); "counted" positions are the model's accuracy unit (tree
// roots, words, chars), "positions" every labelled one.
struct Evaluation {
  int64_t instances = 0;
  double loss = 0;  // mean per instance
  int64_t counted = 0, correct = 0, majority = 0;  // majority: the most frequent gold class's count
  int64_t positions = 0, positions_correct = 0, positions_majority = 0;

  double accuracy() const { return counted ? double(correct) / double(counted) : 0.0; }
  double majority_accuracy() const { return counted ? double(majority) / double(counted) : 0.0; }
  double position_accuracy() const { return positions ? double(positions_correct) / double(positions) : 0.0; }
  double position_majority_accuracy() const {
    return positions ? double(positions_majority) / double(positions) : 0.0;
  }
};

// Instances [first, last) in traces of `batch`; the predicted class is the highest score (the
// first on a tie).
Evaluation evaluate(SampleModel& model, Engine& engine, size_t first, size_t last, int batch);

struct TrainProgress {
  int epoch = 0;                 // 1-based, counting epochs done before this run
  int last_epoch = 0;
  int64_t done = 0, total = 0;   // training instances this epoch
  double loss = 0;               // running mean per instance this epoch
  double instances_per_sec = 0;  // this epoch so far
};

struct TrainOptions {
  int epochs = 1;
  int batch = 64;            // instances per trace and per optimizer step
  double holdout = 0.1;
  uint64_t seed = 1;         // epoch e's shuffle is drawn from (seed, e) alone
  int epochs_done = 0;       // epochs run before (a loaded model): numbering and shuffles go on
  std::function<void(const TrainProgress&)> progress;  // optional, called per batch
  // Data-parallel across MPI ranks (optional): `batch` is then the global batch, each rank records
  // and runs its share (DataParallel::share by SampleModel::instance_cost, so shares cost about the
  // same) with loss (sum of its losses) / batch, the gradients
  // are summed across the ranks while the next step records, and every rank steps its optimizer
  // on the sums. Every rank must call train() with the same model, data and options; fewer
  // training instances, or a smaller batch, than ranks is a UsageError on every rank.
  DataParallel* parallel = nullptr;
};

struct EpochResult {
  int epoch = 0;                 // 1-based, counting epochs_done
  double train_loss = 0;         // mean per instance over the epoch's batches, as they were trained
  Evaluation heldout;            // after the epoch
  double gradient_norm = 0;      // mean over the epoch's steps, before clipping
  double instances_per_sec = 0;  // training instances over the epoch's training time
  // With one thread a step runs its forward pass, then Trace::backward. With two or more
  // (`overlapped`), a step's backward pass is recorded with its forward pass and both run as one
  // evaluation while the next step records: forward_ms is then recording (both passes, the next
  // step's while this one runs), backward_ms the wait for the evaluation and its gradients,
  // forward_stats the whole evaluation, and backward_stats stays empty.
  bool overlapped = false;
  double forward_ms = 0;         // recording the losses and evaluating them (the next step is recorded while a step runs)
  double backward_ms = 0;        // Trace::backward
  double optimizer_ms = 0;       // Optimizer::step
  double total_ms = 0;           // the epoch's training time (all of the above and the shuffle)
  Stats forward_stats;           // what the engine counted while evaluating the losses
  Stats backward_stats;          // and while running Trace::backward
  int64_t resident_kb = 0;       // the process's resident memory after the epoch (0: unknown)
  CacheSizes caches;             // the engine's caches after the epoch (Stats::caches)
  std::vector<float> step_losses;  // each optimizer step's loss (the global batch's mean), in order
  // With `parallel`: the ranks, and this rank's reductions over the epoch (DataParallel::stats).
  int ranks = 1;
  ReductionStats reduction;
  // 0 when overlapped: the passes run as one evaluation.
  double backward_over_forward() const { return !overlapped && forward_ms > 0 ? backward_ms / forward_ms : 0.0; }
};

struct TrainResult {
  Split split;
  Evaluation initial;  // the held-out split before the first epoch
  std::vector<EpochResult> epochs;
};

// Each batch's loss is the mean of its instances' losses, so a learning rate does not depend on
// the batch size. The optimizer must belong to the model's Model.
TrainResult train(SampleModel& model, Engine& engine, Optimizer& optimizer, const TrainOptions& options);

}  // namespace edb::samples
