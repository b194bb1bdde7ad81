// The training loop and held-out evaluation.
#include "samples/training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <string>

#include <unistd.h>

namespace edb::samples {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// splitmix64: a portable generator, so a seed gives the same shuffle with every standard library.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The process's resident set in KiB, from /proc/self/statm (Linux); 0 where it cannot be read.
int64_t resident_kb() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (!statm) return 0;
  long long pages = 0, resident = 0;
  const bool read = std::fscanf(statm, "%lld %lld", &pages, &resident) == 2;
  std::fclose(statm);
  const long page = sysconf(_SC_PAGESIZE);
  return read && page > 0 ? int64_t(resident) * page / 1024 : 0;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

int64_t argmax(const Tensor& scores) {
  return int64_t(std::max_element(scores.data.begin(), scores.data.end()) - scores.data.begin());
}

int64_t most_frequent(const std::map<int64_t, int64_t>& counts) {
  int64_t best = 0;
  for (const auto& [label, count] : counts) best = std::max(best, count);
  return best;
}

// One epoch of data-parallel steps: a step runs its trace (this rank's share of the global batch, its
// forward and backward passes recorded together), starts summing the gradients across the ranks,
// records the next step while MPI works (with two or more threads: while the trace runs), then
// waits for the sums and updates. Recording reads no values and the next trace runs only after the
// update, so the steps are those of one process. forward_ms is recording, backward_ms the
// evaluation (with threads, the wait for it); the wait for the sums is in `reduction`.
void train_epoch_across_ranks(SampleModel& model, Engine& engine, Optimizer& optimizer, const TrainOptions& options,
                              const std::vector<size_t>& order, size_t train_count, Gradients& gradients,
                              EpochResult& e, double& loss_sum, double& norm_sum, int64_t& steps,
                              const std::function<void(size_t)>& progress) {
  DataParallel& parallel = *options.parallel;
  const ReductionStats before = parallel.stats();
  e.overlapped = true;
  e.ranks = parallel.size();
  struct Step {
    std::unique_ptr<Trace> trace;  // null when this rank's share is empty
    Expr loss;
    size_t begin = 0, end = 0;
  };
  std::vector<double> costs;
  auto record = [&](size_t begin) {
    const auto start = Clock::now();
    Step step{nullptr, Expr(), begin, std::min(train_count, begin + size_t(options.batch))};
    // Shares of about equal cost (a tree's nodes), so that no rank waits long for another.
    costs.clear();
    for (size_t k = step.begin; k < step.end; ++k) costs.push_back(model.instance_cost(order[k]));
    auto [first, last] = parallel.share(costs);
    first += step.begin;
    last += step.begin;
    if (first < last) {
      step.trace = std::make_unique<Trace>(engine);
      std::vector<Expr> losses;
      for (size_t k = first; k < last; ++k) {
        losses.push_back(model.record_loss(*step.trace, order[k]));
        parallel.progress();
      }
      step.loss = sum(losses) * (1.0f / float(step.end - step.begin));
      step.trace->record_backward(step.loss);
    }
    e.forward_ms += ms_since(start);
    return step;
  };
  const Stats epoch_before = engine.stats();
  Step step = record(0);
  // With two or more threads the engine evaluates in the background: the next step records while
  // this one runs, as in one process, and the reductions (0.5 ms a step on one machine) overlap
  // nothing. With one thread the next step records while MPI reduces.
  const bool ahead = engine.options().threads >= 2;
  for (;;) {
    const size_t begin = step.begin, end = step.end;
    auto start = Clock::now();
    if (step.trace) step.trace->run();
    e.backward_ms += ms_since(start);
    Step next = ahead && end < train_count ? record(end) : Step{};
    start = Clock::now();
    if (step.trace) {
      step.trace->gradients(gradients);
    } else {
      gradients.loss = 0;
      gradients.parameters.clear();
      gradients.tables.clear();
    }
    e.backward_ms += ms_since(start);
    step = Step{};  // this step's trace ends first
    parallel.start(gradients);
    if (!ahead && end < train_count) next = record(end);
    parallel.finish(gradients);
    const float loss = gradients.loss;
    e.step_losses.push_back(loss);
    loss_sum += double(loss) * double(end - begin);
    start = Clock::now();
    norm_sum += optimizer.step(gradients, engine);
    e.optimizer_ms += ms_since(start);
    ++steps;
    progress(end);
    if (end == train_count) break;
    step = std::move(next);
  }
  (e.forward_stats = engine.stats()) -= epoch_before;
  const ReductionStats& after = parallel.stats();
  e.reduction = {after.steps - before.steps, after.bytes - before.bytes, after.wait_ms - before.wait_ms,
                 after.start_ms - before.start_ms};
}

}  // namespace

std::vector<size_t> epoch_order(size_t count, uint64_t seed, int epoch) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  uint64_t state = seed * 0x2545f4914f6cdd1dull + uint64_t(epoch);
  next_random(state);
  for (size_t i = count; i > 1; --i) std::swap(order[i - 1], order[next_random(state) % i]);
  return order;
}

Split split_instances(size_t count, double holdout) {
  if (!(holdout >= 0.0 && holdout < 1.0))
    throw UsageError("--holdout must be in [0, 1), got " + number(holdout));
  Split split;
  split.heldout = size_t(std::llround(double(count) * holdout));
  if (holdout > 0.0 && split.heldout == 0) split.heldout = 1;
  if (split.heldout >= count)
    throw UsageError("--holdout " + number(holdout) + " leaves no training instance of " +
                     std::to_string(count));
  split.train = count - split.heldout;
  return split;
}

Evaluation evaluate(SampleModel& model, Engine& engine, size_t first, size_t last, int batch) {
  if (batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(batch));
  Evaluation result;
  std::map<int64_t, int64_t> counted_labels, position_labels;
  double loss = 0;
  for (size_t begin = first; begin < last; begin += size_t(batch)) {
    const size_t end = std::min(last, begin + size_t(batch));
    Trace trace(engine);
    std::vector<Prediction> predictions;
    std::vector<Expr> losses;
    for (size_t i = begin; i < end; ++i)
      for (const Prediction& p : model.record_predictions(trace, i)) {
        losses.push_back(pick_neg_log_softmax(p.scores, p.gold));
        predictions.push_back(p);
      }
    loss += sum(losses).scalar();
    const bool roots = std::any_of(predictions.begin(), predictions.end(), [](const Prediction& p) { return p.root; });
    for (const Prediction& p : predictions) {
      const bool right = argmax(p.scores.value()) == p.gold;
      ++result.positions;
      result.positions_correct += right;
      ++position_labels[p.gold];
      if (roots && !p.root) continue;
      ++result.counted;
      result.correct += right;
      ++counted_labels[p.gold];
    }
  }
  result.instances = int64_t(last - first);
  result.loss = result.instances ? loss / double(result.instances) : 0.0;
  result.majority = most_frequent(counted_labels);
  result.positions_majority = most_frequent(position_labels);
  return result;
}

TrainResult train(SampleModel& model, Engine& engine, Optimizer& optimizer, const TrainOptions& options) {
  if (options.epochs < 1) throw UsageError("--epochs must be at least 1, got " + std::to_string(options.epochs));
  if (options.batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(options.batch));
  TrainResult result;
  result.split = split_instances(model.instance_count(), options.holdout);
  const size_t train_count = result.split.train, count = model.instance_count();
  if (options.parallel) {
    const size_t ranks = size_t(options.parallel->size());
    if (size_t(options.batch) < ranks)
      throw UsageError("--batch " + std::to_string(options.batch) + " is the global batch, split across " +
                       std::to_string(ranks) + " ranks: it must be at least the number of ranks");
    if (train_count < ranks)
      throw UsageError(std::to_string(train_count) + " training instances cannot be split across " + std::to_string(ranks) +
                       " ranks: every rank needs at least one");
  }
  auto heldout = [&] { return evaluate(model, engine, train_count, count, options.batch); };
  result.initial = heldout();
  const int last_epoch = options.epochs_done + options.epochs;
  Gradients gradients;  // one for every step: its storage is reused, not allocated again each step
  for (int epoch = options.epochs_done + 1; epoch <= last_epoch; ++epoch) {
    EpochResult& e = result.epochs.emplace_back();
    e.epoch = epoch;
    const auto epoch_start = Clock::now();
    const std::vector<size_t> order = epoch_order(train_count, options.seed, epoch);
    double loss_sum = 0, norm_sum = 0;
    int64_t steps = 0;
    auto report = [&](size_t done) {
      if (!options.progress) return;
      const double seconds = ms_since(epoch_start) / 1000.0;
      options.progress(TrainProgress{epoch, last_epoch, int64_t(done), int64_t(train_count), loss_sum / double(done),
                                     seconds > 0 ? double(done) / seconds : 0.0});
    };
    if (options.parallel) {
      train_epoch_across_ranks(model, engine, optimizer, options, order, train_count, gradients, e, loss_sum, norm_sum,
                               steps, report);
      options.parallel->check_weights("after epoch " + std::to_string(epoch));
    } else {
      // Step `begin`'s forward pass, recorded (not run): its trace and mean loss.
      struct Step {
        std::unique_ptr<Trace> trace;  // before `loss`, which must not outlive it
        Expr loss;
        size_t begin = 0, end = 0;
      };
      // Recording ahead overlaps execution only when the engine executes in the background (two
      // or more threads); with one thread it would only keep two traces' memory alive (a TreeLSTM
      // epoch's resident memory 115 -> 157 MiB), so the next step is recorded after this one.
      // Ahead, a step's backward pass is recorded (and both passes batched) with its forward pass,
      // and both run as one evaluation while the next step records: recording reads no values, and
      // the next trace runs only after this step's update, when the loop comes round to its run().
      const bool ahead = engine.options().threads >= 2;
      e.overlapped = ahead;
      auto record = [&](size_t begin) {
        Step step{std::make_unique<Trace>(engine), Expr(), begin, std::min(train_count, begin + size_t(options.batch))};
        std::vector<Expr> losses;
        for (size_t k = step.begin; k < step.end; ++k) losses.push_back(model.record_loss(*step.trace, order[k]));
        step.loss = sum(losses) * (1.0f / float(step.end - step.begin));
        if (ahead) step.trace->record_backward(step.loss);
        return step;
      };
      auto recorded = [&](size_t begin) {  // record(), its time counted in the forward pass
        const auto start = Clock::now();
        Step step = record(begin);
        e.forward_ms += ms_since(start);
        return step;
      };
      // Ahead, the next step is recorded and batched (counted in the engine's stats) during this
      // step: the epoch's stats are taken whole, from before its first step is recorded.
      const Stats epoch_before = ahead ? engine.stats() : Stats{};
      Step step = recorded(0);
      for (;;) {
        const Stats before_forward = ahead ? Stats{} : engine.stats();  // nothing runs between steps: no wait
        auto start = Clock::now();
        step.trace->run();
        Step next = ahead && step.end < train_count ? record(step.end) : Step{};
        float loss = 0;
        if (ahead) {
          e.forward_ms += ms_since(start);
          start = Clock::now();
          step.trace->gradients(gradients);
          loss = gradients.loss;
          e.backward_ms += ms_since(start);
        } else {
          loss = step.loss.scalar();
          e.forward_ms += ms_since(start);
          const Stats after_forward = engine.stats();
          (e.forward_stats += after_forward) -= before_forward;
          start = Clock::now();
          step.trace->backward(step.loss, gradients);
          e.backward_ms += ms_since(start);
          (e.backward_stats += engine.stats()) -= after_forward;
        }
        loss_sum += double(loss) * double(step.end - step.begin);
        e.step_losses.push_back(loss);
        start = Clock::now();
        norm_sum += optimizer.step(gradients, engine);
        e.optimizer_ms += ms_since(start);
        ++steps;
        report(step.end);
        if (step.end == train_count) break;
        if (!ahead) {
          const size_t next_begin = step.end;
          step = Step{};  // this step's trace ends first: the next one takes its place
          next = recorded(next_begin);
        }
        step = std::move(next);
      }
      if (ahead) (e.forward_stats = engine.stats()) -= epoch_before;
    }
    e.total_ms = ms_since(epoch_start);
    e.train_loss = loss_sum / double(train_count);
    e.gradient_norm = norm_sum / double(steps);
    e.instances_per_sec = e.total_ms > 0 ? double(train_count) / (e.total_ms / 1000.0) : 0.0;
    e.heldout = heldout();
    e.resident_kb = resident_kb();
    e.caches = engine.stats().caches;
  }
  return result;
}

}  // namespace edb::samples
