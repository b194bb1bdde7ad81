// The inference measurement loop.
#include "samples/runner.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace edb::samples {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct PassResult {
  double loss = 0;
  double trace_ms = 0;
  double total_ms = 0;
};

// Records trace i+1 while trace i evaluates (in the background when the engine has two or more
// threads): each trace is started with run() and its loss read only after the next is recorded.
PassResult run_pass(SampleModel& model, Engine& engine, size_t count, int batch,
                    const std::function<void(size_t)>& on_trace) {
  PassResult pass;
  const auto pass_start = Clock::now();
  std::optional<Trace> traces[2];
  Expr totals[2];
  size_t ends[2] = {0, 0};
  std::vector<Expr> losses;
  auto collect = [&](int slot) {
    if (!traces[slot]) return;
    pass.loss += totals[slot].scalar();
    traces[slot].reset();
    if (on_trace) on_trace(ends[slot]);
  };
  int slot = 0;
  for (size_t first = 0; first < count; first += size_t(batch), slot ^= 1) {
    const size_t last = std::min(count, first + size_t(batch));
    Trace& trace = traces[slot].emplace(engine);
    const auto record_start = Clock::now();
    losses.clear();
    for (size_t i = first; i < last; ++i) losses.push_back(model.record_loss(trace, i));
    totals[slot] = sum(losses);
    pass.trace_ms += ms_since(record_start);
    ends[slot] = last;
    trace.run();
    collect(slot ^ 1);
  }
  collect(slot ^ 1);
  pass.total_ms = ms_since(pass_start);
  return pass;
}

}  // namespace

RunResult run_inference(SampleModel& model, Engine& engine, const RunOptions& options) {
  if (options.batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(options.batch));
  if (options.repeat < 1) throw UsageError("--repeat must be at least 1, got " + std::to_string(options.repeat));
  RunResult result;
  const size_t count = model.instance_count();
  result.instances = static_cast<int64_t>(count);
  result.repeat = options.repeat;

  // Warm-up: one whole pass, so first-use costs (the arena growing to its largest trace, page
  // faults, compilation) stay out of the measured passes.
  run_pass(model, engine, count, options.batch, nullptr);
  engine.reset_stats();

  std::vector<double> rates;
  const int64_t total = int64_t(count) * options.repeat;
  for (int r = 0; r < options.repeat; ++r) {
    const PassResult pass = run_pass(model, engine, count, options.batch, [&](size_t done) {
      if (options.progress) options.progress(int64_t(count) * r + int64_t(done), total);
    });
    result.loss = pass.loss;
    result.trace_ms += pass.trace_ms;
    result.total_ms += pass.total_ms;
    rates.push_back(double(count) / (pass.total_ms / 1000.0));
  }
  std::sort(rates.begin(), rates.end());
  result.instances_per_sec = rates[rates.size() / 2];
  result.stats = engine.stats();
  return result;
}

DecodeResult run_decoding(SampleModel& model, Engine& engine, const RunOptions& options, bool one_at_a_time) {
  if (!model.decodes())
    throw UsageError("edb-run: --decode is for models that decode from their own predictions (parser)");
  if (options.batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(options.batch));
  if (options.repeat < 1) throw UsageError("--repeat must be at least 1, got " + std::to_string(options.repeat));
  const size_t count = model.instance_count();
  DecodeResult result;
  result.instances = int64_t(count);
  result.repeat = options.repeat;
  auto pass = [&](int64_t& rounds, Decoded& decoded, const std::function<void(size_t)>& on_trace) {
    std::vector<Program<Decoded>> programs;
    for (size_t first = 0; first < count; first += size_t(options.batch)) {
      const size_t last = std::min(count, first + size_t(options.batch));
      Trace trace(engine);
      programs.clear();
      for (size_t i = first; i < last; ++i) programs.push_back(model.decode(trace, i));
      if (one_at_a_time) {
        for (Program<Decoded>& program : programs) rounds += run_instances(trace, std::span(&program, 1)).rounds;
      } else {
        rounds += run_instances(trace, programs).rounds;
      }
      for (const Program<Decoded>& program : programs) decoded += program.result();
      if (on_trace) on_trace(last);
    }
  };
  {
    int64_t rounds = 0;
    Decoded decoded;
    pass(rounds, decoded, nullptr);  // warm-up, as run_inference
  }
  engine.reset_stats();
  std::vector<double> rates;
  const int64_t total = int64_t(count) * options.repeat;
  for (int r = 0; r < options.repeat; ++r) {
    Decoded decoded;
    const auto start = Clock::now();
    pass(result.rounds, decoded, [&](size_t done) {
      if (options.progress) options.progress(int64_t(count) * r + int64_t(done), total);
    });
    const double ms = ms_since(start);
    result.total_ms += ms;
    result.decoded = decoded;
    rates.push_back(double(count) / (ms / 1000.0));
  }
  std::sort(rates.begin(), rates.end());
  result.instances_per_sec = rates[rates.size() / 2];
  result.stats = engine.stats();
  return result;
}

PolicyProgress train_policy(SampleModel& model, Engine& engine, int traces, int batch,
                            const PolicyTraining& training,
                            const std::function<void(const PolicyProgress&)>& progress) {
  if (traces < 1) throw UsageError("--train-traces must be at least 1, got " + std::to_string(traces));
  if (batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(batch));
  std::vector<std::unique_ptr<Trace>> recorded;
  std::vector<Trace*> pointers;
  const size_t count = model.instance_count();
  size_t next = 0;
  for (int t = 0; t < traces; ++t) {
    recorded.push_back(std::make_unique<Trace>(engine));
    std::vector<Expr> losses;
    for (int i = 0; i < batch; ++i, next = (next + 1) % count) losses.push_back(model.record_loss(*recorded.back(), next));
    sum(losses);
    pointers.push_back(recorded.back().get());
  }
  return engine.train_policy(pointers, training, progress);
}

}  // namespace edb::samples
