// Threads: every sample model's per-instance losses, recorded as edb-run records them (trace i+1
// while trace i executes, its losses read afterwards), are the reference executor's under the
// batched and jit executors at 1, 2 and 3 threads: a pipelined execution with its kernels split
// across the pool, the waiting caller taking part (runtime/thread_pool.h's assist), computes what
// one thread computes; so do a batch's gradients; threads = 0 is every core.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::near_relative;

// Batches of 32 calls and more split across the pool (16 calls a piece), so traces of 12
// instances give the sequence models and the trees' leaves batches worth splitting.
samples::ModelConfig config() {
  samples::ModelConfig config;
  config.limit = 36;
  config.embed = 16;
  config.hidden = 20;  // not a multiple of the vector width: the last row tile is partial
  config.seed = 5;
  return config;
}

std::vector<float> losses(samples::SampleModel& sample, const std::string& executor, int threads) {
  EngineOptions options;
  options.executor = executor;
  options.threads = threads;
  options.verify = true;
  Engine engine(options);
  const size_t count = sample.instance_count(), batch = 12;
  std::vector<float> values(count);
  std::optional<Trace> traces[2];
  std::vector<Expr> recorded[2];
  size_t firsts[2] = {0, 0};
  auto collect = [&](int slot) {
    if (!traces[slot]) return;
    for (size_t k = 0; k < recorded[slot].size(); ++k) values[firsts[slot] + k] = recorded[slot][k].scalar();
    recorded[slot].clear();
    traces[slot].reset();
  };
  int slot = 0;
  for (size_t first = 0; first < count; first += batch, slot ^= 1) {
    Trace& trace = traces[slot].emplace(engine);
    firsts[slot] = first;
    for (size_t i = first; i < std::min(count, first + batch); ++i) recorded[slot].push_back(sample.record_loss(trace, i));
    trace.run();
    collect(slot ^ 1);
  }
  collect(slot ^ 1);
  return values;
}

TEST(Threads, EverySampleModelMatchesTheReference) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    const std::unique_ptr<samples::SampleModel> sample = entry.make(config());
    const std::vector<float> reference = losses(*sample, "reference", 1);
    for (const char* executor : {"batched", "jit"})
      for (int threads : {1, 2, 3}) {
        const std::vector<float> actual = losses(*sample, executor, threads);
        for (size_t i = 0; i < reference.size(); ++i)
          ASSERT_TRUE(near_relative(actual[i], reference[i], 1e-4))
              << executor << ", " << threads << " threads, instance " << i;
      }
  }
}

// The gradients of a batch's summed loss (the training step's backward pass: weight gradients split
// by output tiles, compiled backward cells) at 2 and 3 threads are one thread's, for every model.
TEST(Threads, GradientsMatchOneThread) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    const std::unique_ptr<samples::SampleModel> sample = entry.make(config());
    auto gradients = [&](int threads) {
      EngineOptions options;
      options.threads = threads;
      options.verify = true;
      Engine engine(options);
      Trace trace(engine);
      std::vector<Expr> losses;
      for (size_t i = 0; i < std::min<size_t>(sample->instance_count(), 24); ++i) losses.push_back(sample->record_loss(trace, i));
      return trace.backward(sum(losses));
    };
    const Gradients one = gradients(1);
    ASSERT_FALSE(one.parameters.empty());
    for (int threads : {2, 3}) {
      const Gradients many = gradients(threads);
      EXPECT_TRUE(near_relative(many.loss, one.loss, 1e-4)) << threads << " threads";
      for (const Gradients::Dense& d : one.parameters) {
        const Tensor* other = many.of(d.parameter);
        ASSERT_NE(other, nullptr) << threads << " threads";
        EXPECT_TRUE(near_relative(*other, d.gradient, 1e-3)) << threads << " threads";
      }
    }
  }
}

// threads = 0 is every core (one for the reference executor), and options() says how many; the
// values are one thread's.
TEST(Threads, ZeroMeansEveryCore) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  for (const char* executor : {"reference", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.threads = 0;
    Engine engine(options);
    EXPECT_EQ(engine.options().threads, std::string(executor) == "reference" ? 1 : cores) << executor;
  }
  const std::unique_ptr<samples::SampleModel> sample = samples::model_registry()[0].make(config());
  const std::vector<float> one = losses(*sample, "jit", 1), all = losses(*sample, "jit", 0);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_TRUE(near_relative(all[i], one[i], 1e-4)) << "instance " << i;
}

}  // namespace
}  // namespace edb
