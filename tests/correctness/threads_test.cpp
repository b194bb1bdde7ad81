// Threads: every sample model's per-instance losses, recorded as edb-run records them (trace i+1
// while trace i executes, its losses read afterwards), are the reference executor's under the
// batched and jit executors at 1, 2 and 3 threads: a pipelined execution with its kernels split
// across the pool, the waiting caller taking part (runtime/thread_pool.h's assist), computes what
// one thread computes; so do a batch's gradients, steps whose both passes record while the step
// before runs (record_backward), batches cut by columns or members, and the training loop, which
// records a step while the step before runs; threads = 0 is every core.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "samples/models.h"
#include "samples/training.h"
#include "runtime/weight_gradients.h"
#include "tests/support/rng.h"
#include "tests/support/sample_gradients.h"
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
  Engine engine(testing::checked_options(executor, threads));
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
      return testing::summed_loss_gradients(engine, *sample, 24);
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

// A weight's gradient over 1,100 uses is cut by uses into pieces with partial sums of their own
// (runtime/batched.cpp's matmul_nt): the reference executor's gradient under batched and jit at
// 1, 2 and 3 threads. 40 x 24: partial tiles both ways; 1,100 uses: four uneven pieces.
TEST(Threads, WeightGradientOverManyUsesIsCutByUses) {
  constexpr int kUses = 1100, kRows = 40, kCols = 24;
  auto gradient = [&](const std::string& executor, int threads) {
    Model model("uses", 7);
    const Parameter w = model.add_parameter("W", kRows, kCols);
    Engine engine(testing::checked_options(executor, threads));
    Trace trace(engine);
    std::vector<Expr> losses;
    std::vector<float> x(kCols);
    for (int k = 0; k < kUses; ++k) {
      for (int i = 0; i < kCols; ++i) x[size_t(i)] = float((k * 31 + i * 17) % 23) / 23.0f - 0.5f;
      losses.push_back(pick_neg_log_softmax(tanh(matmul(trace.param(w), trace.input(x))), k % kRows));
    }
    const Gradients gradients = trace.backward(sum(losses));
    const Tensor* g = gradients.of(w);
    return g ? *g : Tensor{};
  };
  const Tensor reference = gradient("reference", 1);
  ASSERT_EQ(reference.data.size(), size_t(kRows * kCols));
  for (const char* executor : {"batched", "jit"})
    for (int threads : {1, 2, 3})
      EXPECT_TRUE(near_relative(gradient(executor, threads), reference, 1e-4)) << executor << ", " << threads << " threads";
}

// Chains of h = tanh(W h + U x_t), h of W's rows x `columns` starting at `start`, x_t of U's
// columns x `columns` with element i of chain c's step t x_of(c, t, i); after each step,
// at_step(c, t, h) (which records a loss where it wants one).
template <typename X, typename AtStep>
void record_chains(Trace& trace, const Parameter& w, const Parameter& u, int chains, int steps, int columns, float start,
                   X x_of, AtStep at_step) {
  std::vector<float> x(size_t(u.cols() * columns));
  for (int c = 0; c < chains; ++c) {
    Expr h = trace.input(w.rows(), columns, std::vector<float>(size_t(w.rows() * columns), start));
    for (int t = 0; t < steps; ++t) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = x_of(c, t, int(i));
      h = tanh(matmul(trace.param(w), h) + matmul(trace.param(u), trace.input(u.cols(), columns, x)));
      at_step(c, t, h);
    }
  }
}

// A chain's weight gradients (runtime/weight_gradients.h): with two threads, blocks of their uses
// run ahead of their batches, while the backward chain's last batches run, on the thread waiting
// for the evaluation; the gradients are the reference executor's, and the same bits whichever
// thread ran which block, run after run (and one thread's, run after run: the first evaluation of
// a process once differed from the later ones in the last bits, by where malloc put the
// executor's scratch). 16 chains of 160 steps: 2,560 uses of W and U, so ten blocks each, the
// first ready long before the chain ends. Two chains of a 7-column state: a use is a pair of
// matrices whose columns two blocks may share, written by a later batch than the block's other
// pairs (a block once waited only for the pairs that start in it, and read one unwritten).
TEST(Threads, WeightGradientBlocksRunAheadOnTheWaitingThread) {
  constexpr int kSteps = 160, kHidden = 24, kInput = 12;
  for (const auto [chains, columns] : {std::pair{16, 1}, std::pair{2, 7}}) {
    SCOPED_TRACE(std::to_string(chains) + " chains, " + std::to_string(columns) + " columns");
    Model model("chain", 3);
    const Parameter w = model.add_parameter("W", kHidden, kHidden);
    const Parameter u = model.add_parameter("U", kHidden, kInput);
    const Parameter out = model.add_parameter("out", 40, kHidden);
    auto run = [&](const std::string& executor, int threads, Stats* stats) {
      Engine engine(testing::checked_options(executor, threads));
      Trace trace(engine);
      std::vector<Expr> losses;
      record_chains(
          trace, w, u, chains, kSteps, columns, 0.0f,
          [&](int c, int t, int i) { return float((c * 131 + t * 17 + i * 7) % 29) / 29.0f - 0.5f; },
          [&](int c, int t, const Expr& h) {
            if (t % 8 != 7) return;
            if (columns == 1) losses.push_back(pick_neg_log_softmax(matmul(trace.param(out), h), (c + t) % 40));
            else losses.push_back(sum_elements(square(matmul(trace.param(out), h))));
          });
      Gradients g = trace.backward(sum(losses));
      if (stats) *stats = engine.stats();
      return g;
    };
    const Gradients reference = run("reference", 1, nullptr);
    for (const char* executor : {"batched", "jit"})
      for (int threads : {1, 2}) {
        std::optional<Gradients> first;
        for (int attempt = 0; attempt < 3; ++attempt) {
          // With two threads, the last time the executor waits after each batch that readies a block
          // for the other thread to take one: on a busy machine the chain may end before that thread
          // looks, and so, blocks run as early as they may.
          const bool wait = threads == 2 && attempt == 2;
          runtime::WeightGradients::wait_for_a_taker = wait;
          Stats stats;
          Gradients g = run(executor, threads, &stats);
          runtime::WeightGradients::wait_for_a_taker = false;
          for (const Parameter& p : {w, u, out}) {
            ASSERT_NE(g.of(p), nullptr);
            EXPECT_TRUE(near_relative(*g.of(p), *reference.of(p), 1e-4)) << executor << ", " << threads << " threads: " << p.name();
            if (first)
              EXPECT_EQ(g.of(p)->data, first->of(p)->data)
                  << executor << ", " << threads << " threads: " << p.name() << " differs between two runs";
          }
          if (threads == 1) EXPECT_EQ(stats.early_gradient_blocks, 0) << executor << ": one thread";
          if (wait) EXPECT_GT(stats.early_gradient_blocks, 0) << executor << ": no block ran ahead of its batch";
          if (!first) first = std::move(g);
        }
      }
  }
}

// The same over random chains: 1-4 chains of 40-200 steps, a state of 1-9 columns and 5-40 rows,
// inputs of 3-20 rows, at 2 and 3 threads with the executor waiting for a taker after each batch
// that readies a block (so blocks run as early as they may): the same bits as with no block run
// ahead (a block that read a use before its batch wrote it would differ), and the reference
// executor's gradients (within 1e-3: 200 steps of tanh carry the executors' rounding far).
TEST(Threads, WeightGradientBlocksRunAheadOnRandomChains) {
  testing::Rng rng(20261207);
  for (int round = 0; round < 8; ++round) {
    const int chains = 1 + rng.below(4), steps = 40 + rng.below(161), columns = 1 + rng.below(9);
    const int hidden = 5 + rng.below(36), inputs = 3 + rng.below(18), threads = 2 + rng.below(2);
    SCOPED_TRACE(std::to_string(chains) + " chains of " + std::to_string(steps) + " steps, state " +
                 std::to_string(hidden) + "x" + std::to_string(columns) + ", input " + std::to_string(inputs) + ", " +
                 std::to_string(threads) + " threads");
    Model model("random chain", uint64_t(round + 1));
    const Parameter w = model.add_parameter("W", hidden, hidden);
    const Parameter u = model.add_parameter("U", hidden, inputs);
    auto run = [&](const std::string& executor, int threads_now) {
      Engine engine(testing::checked_options(executor, threads_now));
      Trace trace(engine);
      std::vector<Expr> losses;
      record_chains(
          trace, w, u, chains, steps, columns, 0.1f,
          [&](int c, int t, int i) { return float((c * 37 + t * 11 + i * 5 + round) % 23) / 23.0f - 0.5f; },
          [&](int, int t, const Expr& h) {
            if (t % 5 == 4) losses.push_back(sum_elements(square(h)));
          });
      return trace.backward(sum(losses));
    };
    const Gradients reference = run("reference", 1);
    for (const char* executor : {"batched", "jit"}) {
      runtime::WeightGradients::run_none_ahead = true;
      const Gradients at_their_batches = run(executor, threads);
      runtime::WeightGradients::run_none_ahead = false;
      runtime::WeightGradients::wait_for_a_taker = true;
      const Gradients g = run(executor, threads);
      runtime::WeightGradients::wait_for_a_taker = false;
      for (const Parameter& p : {w, u}) {
        ASSERT_NE(g.of(p), nullptr);
        EXPECT_EQ(g.of(p)->data, at_their_batches.of(p)->data) << executor << ": " << p.name() << ", blocks run ahead";
        EXPECT_TRUE(near_relative(*g.of(p), *reference.of(p), 1e-3)) << executor << ": " << p.name();
      }
    }
  }
}

// record_backward(), run(), gradients(): a loop that records and batches step i+1, both passes,
// while step i runs (in the background with two or more threads) gets, for every model under
// batched and jit at 1-3 threads, the reference executor's gradients of each step, as backward()
// gives them, with the memory planner too. A value recorded after record_backward() and before
// run() is batched after both passes and evaluates with them.
TEST(Threads, BackwardPassesRecordedWhileTheStepBeforeRuns) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    const std::unique_ptr<samples::SampleModel> sample = entry.make(config());
    const size_t count = std::min<size_t>(sample->instance_count(), 30), batch = 10;
    auto steps = [&](const std::string& executor, int threads, bool memplan = false) {
      EngineOptions options = testing::checked_options(executor, threads);
      options.memplan = memplan;
      Engine engine(options);
      std::vector<Gradients> out;
      std::unique_ptr<Trace> running;
      Expr doubled;
      auto finish = [&] {
        Gradients& g = out.emplace_back();
        running->gradients(g);
        EXPECT_FLOAT_EQ(doubled.scalar(), 2.0f * g.loss);
        running.reset();
      };
      for (size_t first = 0; first < count; first += batch) {
        auto trace = std::make_unique<Trace>(engine);
        std::vector<Expr> losses;
        for (size_t i = first; i < std::min(count, first + batch); ++i) losses.push_back(sample->record_loss(*trace, i));
        const Expr loss = sum(losses);
        if (executor == "reference") {  // the plain backward() as the baseline
          out.push_back(trace->backward(loss));
          continue;
        }
        trace->record_backward(loss);
        const Expr extra = loss * 2.0f;
        if (running) finish();
        trace->run();
        running = std::move(trace);
        doubled = extra;
      }
      if (running) finish();
      return out;
    };
    const std::vector<Gradients> reference = steps("reference", 1);
    ASSERT_EQ(reference.size(), 3u);
    // The extra value is planned with both passes again at run() (Driver::plan), by the batch-order
    // plan and, with memplan, the layout planner.
    for (const char* executor : {"batched", "jit"})
      for (const auto& [threads, memplan] : {std::pair{1, false}, {2, false}, {3, false}, {2, true}}) {
        const std::vector<Gradients> actual = steps(executor, threads, memplan);
        ASSERT_EQ(actual.size(), reference.size());
        for (size_t s = 0; s < reference.size(); ++s) {
          EXPECT_TRUE(near_relative(actual[s].loss, reference[s].loss, 1e-4))
              << executor << ", " << threads << " threads" << (memplan ? ", memplan" : "");
          ASSERT_EQ(actual[s].parameters.size(), reference[s].parameters.size());
          for (const Gradients::Dense& d : reference[s].parameters) {
            const Tensor* other = actual[s].of(d.parameter);
            ASSERT_NE(other, nullptr) << executor << ", " << threads << " threads, step " << s;
            EXPECT_TRUE(near_relative(*other, d.gradient, 1e-3)) << executor << ", " << threads << " threads, step " << s;
          }
          ASSERT_EQ(actual[s].tables.size(), reference[s].tables.size());
          for (size_t t = 0; t < reference[s].tables.size(); ++t) {
            EXPECT_EQ(actual[s].tables[t].entries, reference[s].tables[t].entries);
            EXPECT_TRUE(near_relative(Tensor{int(actual[s].tables[t].gradients.size()), 1, actual[s].tables[t].gradients},
                                      Tensor{int(reference[s].tables[t].gradients.size()), 1, reference[s].tables[t].gradients},
                                      1e-3))
                << executor << ", " << threads << " threads, step " << s;
          }
        }
      }
  }
}

// A product of few output rows over 2,000 members (a classifier's logits, half of whose inputs lie
// in another batch) is cut by members, each piece starting its outputs and reading its members'
// inputs, and so is the product's gradient with respect to them; so are the softmaxes over them (runtime/batched.cpp's split_columns) and the 2,000 lookups that feed
// them, by members: the reference executor's loss and gradients under batched and jit at 1, 2 and
// 3 threads, and the same loss at every thread count (the pieces' bounds keep the vector lanes of
// one whole-batch loop; the weight gradients are cut by uses into partial sums, which add in
// another order).
TEST(Threads, FewRowProductsSoftmaxesAndLookupsAreCut) {
  constexpr int kMembers = 2000, kRows = 5, kCols = 64, kEntries = kMembers;  // a row each: 2,000 lookups
  auto run = [&](const std::string& executor, int threads, uint64_t seed) {
    Model model("classifier", seed);
    const Parameter w = model.add_parameter("W", kRows, kCols), b = model.add_parameter("b", kRows, 1);
    const LookupTable e = model.add_lookup("E", kEntries, kCols);
    Engine engine(testing::checked_options(executor, threads));
    Trace trace(engine);
    std::vector<Expr> losses;
    for (int k = 0; k < kMembers; ++k) {
      // The second half's inputs lie in a tanh batch: the products read X run by run, and a piece's
      // members start inside a run.
      const Expr x = k < kMembers / 2 ? trace.lookup(e, k) : tanh(trace.lookup(e, k));
      const Expr scores = affine({trace.param(b), trace.param(w), x});
      losses.push_back(pick_neg_log_softmax(scores, k % kRows));
      losses.push_back(sum_elements(cmult(log_softmax(scores), softmax(scores))) * 0.1f);
    }
    Gradients g = trace.backward(sum(losses));
    const Gradients::Rows& rows = *g.of(e);
    return std::vector<Tensor>{Tensor{1, 1, {g.loss}}, *g.of(w), *g.of(b), Tensor{int(rows.gradients.size()), 1, rows.gradients}};
  };
  // Each configuration draws its own parameters and runs before its baselines: a trace's arena is
  // reused by the next trace, so a value a piece failed to write would otherwise still hold what
  // the run before computed, the same when the parameters are.
  uint64_t seed = 11;
  for (const char* executor : {"batched", "jit"})
    for (int threads : {2, 3}) {
      ++seed;
      const std::vector<Tensor> many = run(executor, threads, seed);
      const std::vector<Tensor> one = run(executor, 1, seed), reference = run("reference", 1, seed);
      for (size_t i = 0; i < reference.size(); ++i)
        EXPECT_TRUE(near_relative(many[i], reference[i], 1e-4)) << executor << ", " << threads << " threads, value " << i;
      EXPECT_EQ(many[0].data, one[0].data) << executor << ", " << threads << " threads";
    }
}

// samples::train records step i+1's forward pass before step i's update (while step i runs, with
// two or more threads): at 1, 2 and 3 threads it trains as the plain loop does, which records each
// step after the last update (the same losses per epoch, the same parameters at the end). A trace
// that took a parameter's values when recorded would train on the values before the update.
// Under SGD every parameter ends within 1e-3 relative of the plain loop's. Under Adam a step moves a
// parameter by about the learning rate whatever its gradient's size, so a gradient that is zero but
// for rounding (summed in another order on more threads) may move it either way: there a parameter
// ends within 1e-3 relative or one step (an MV-RNN weight at 3 threads ended 0.0016 away, the
// sign of one such gradient flipped), and the losses still agree to 1e-4.
TEST(Threads, TrainingLoopTrainsAsThePlainLoop) {
  for (const samples::ModelEntry& entry : samples::model_registry())
    for (const char* kind : {"sgd", "adam"}) {
    SCOPED_TRACE(entry.name + ", " + kind);
    OptimizerOptions optimizer_options;
    optimizer_options.kind = kind;
    optimizer_options.learning_rate = 0.01f;
    if (optimizer_options.kind == "sgd") optimizer_options.momentum = 0.9f;
    samples::TrainOptions options;
    options.epochs = 2;
    options.batch = 8;
    options.holdout = 0.2;
    options.seed = 3;
    auto parameters = [](const Model& model) {
      std::vector<float> values;
      for (const Parameter& p : model.parameters()) values.insert(values.end(), p.values().begin(), p.values().end());
      for (const LookupTable& t : model.lookups()) values.insert(values.end(), t.values().begin(), t.values().end());
      return values;
    };
    // The plain loop, on one thread.
    const std::unique_ptr<samples::SampleModel> plain = entry.make(config());
    std::vector<double> plain_losses;
    {
      Engine engine;
      Optimizer optimizer(plain->model(), optimizer_options);
      const size_t train = samples::split_instances(plain->instance_count(), options.holdout).train;
      for (int epoch = 1; epoch <= options.epochs; ++epoch) {
        const std::vector<size_t> order = samples::epoch_order(train, options.seed, epoch);
        double loss_sum = 0;
        for (size_t begin = 0; begin < train; begin += size_t(options.batch)) {
          const size_t end = std::min(train, begin + size_t(options.batch));
          Trace trace(engine);
          std::vector<Expr> losses;
          for (size_t k = begin; k < end; ++k) losses.push_back(plain->record_loss(trace, order[k]));
          const Expr loss = sum(losses) * (1.0f / float(end - begin));
          loss_sum += double(loss.scalar()) * double(end - begin);
          optimizer.step(trace.backward(loss));
        }
        plain_losses.push_back(loss_sum / double(train));
      }
    }
    const std::vector<float> plain_values = parameters(plain->model());
    const float one_step = optimizer_options.kind == "adam" ? optimizer_options.learning_rate : 0.0f;
    for (int threads : {1, 2, 3}) {
      const std::unique_ptr<samples::SampleModel> sample = entry.make(config());
      EngineOptions engine_options;
      engine_options.threads = threads;
      Engine engine(engine_options);
      Optimizer optimizer(sample->model(), optimizer_options);
      const samples::TrainResult result = samples::train(*sample, engine, optimizer, options);
      ASSERT_EQ(result.epochs.size(), plain_losses.size());
      for (size_t e = 0; e < plain_losses.size(); ++e)
        EXPECT_TRUE(near_relative(result.epochs[e].train_loss, plain_losses[e], 1e-4))
            << threads << " threads, epoch " << e + 1 << ": " << result.epochs[e].train_loss << " against "
            << plain_losses[e];
      const std::vector<float> values = parameters(sample->model());
      ASSERT_EQ(values.size(), plain_values.size());
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_TRUE(near_relative(values[i], plain_values[i], 1e-3) || std::abs(values[i] - plain_values[i]) <= one_step)
            << threads << " threads, value " << i << ": " << values[i] << " against " << plain_values[i];
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
