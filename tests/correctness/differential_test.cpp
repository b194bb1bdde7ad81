// Differential fuzzing: seeded random graphs (ops, shapes, weight sharing, fan-in and fan-out,
// random cells) run under every policy x executor x cells on/off x memplan on/off x threads, each
// value compared with the reference executor on the sequential policy with cells off.
// EDB_FUZZ_GRAPHS=N runs N graphs (default 300), EDB_FUZZ_FIRST_SEED=S starts at seed S, and
// EDB_FUZZ_COMBINATIONS=K runs K of the 140 combinations per graph, rotating with the seed so that
// every one keeps being covered (default: all; the long mode and sanitizer builds take fewer).
// EDB_FUZZ_DEVICE=cuda runs every combination but the reference on the GPU (ctest's
// emulated_gpu.Differential: on the emulated one, tests/emulated_gpu/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/batched.h"
#include "runtime/executor.h"
#include "runtime/side_by_side.h"
#include "tests/support/combinations.h"
#include "tests/support/random_graph.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::all_combinations;
using testing::Combination;
using testing::env_number;
using testing::name_of;

// The generator's options vary with the seed: 1-10 instances of 3-30 ops, more or less sharing
// across instances, and cells called before up to a third of the ops (none on every fourth seed).
testing::RandomGraphOptions options_for(uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull;
  auto next = [&x](int n) {
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return int(x % uint64_t(n));
  };
  testing::RandomGraphOptions options;
  options.min_instances = 1 + next(4);
  options.max_instances = options.min_instances + next(7);
  options.min_ops = 3 + next(8);
  options.max_ops = options.min_ops + next(20);
  options.cross_instance = 0.05 * next(7);
  options.cell_calls = seed % 4 == 0 ? 0.0 : 0.05 * (1 + next(6));
  return options;
}

std::string describe(const testing::RandomGraphOptions& o) {
  return "instances " + std::to_string(o.min_instances) + "-" + std::to_string(o.max_instances) + ", ops " +
         std::to_string(o.min_ops) + "-" + std::to_string(o.max_ops) + ", cross_instance " +
         std::to_string(o.cross_instance) + ", cell_calls " + std::to_string(o.cell_calls);
}

EngineOptions engine_options(const Combination& c, const std::string& cache_directory) {
  EngineOptions options;
  options.device = c.executor == "reference" ? "cpu" : testing::env_device("EDB_FUZZ_DEVICE");
  options.policy = c.policy;
  options.executor = c.executor;
  options.cells = c.cells;
  options.memplan = c.memplan;
  options.threads = c.threads;
  options.verify = true;
  options.cache_directory = cache_directory;
  return options;
}

// Records graph `seed` on `engine`, runs it, and returns its compared values (or the error).
struct Outcome {
  std::vector<Tensor> values;
  std::vector<std::string> ops;
  std::string error;  // what an exception said; "" when it ran
  Stats stats;
};

Outcome run_graph(Engine& engine, const testing::RandomGraphModel& model, uint64_t seed,
                  const testing::RandomGraphOptions& options) {
  Outcome outcome;
  const Stats before = engine.stats();
  try {
    Trace trace(engine);
    const testing::RandomGraph graph = testing::record_random_graph(trace, model, seed, options);
    trace.run();
    for (const Expr& e : graph.compared) outcome.values.push_back(e.value());
    outcome.ops = graph.ops;
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  (outcome.stats = engine.stats()) -= before;
  return outcome;
}

bool all_finite(const Tensor& t) {
  for (float x : t.data)
    if (!std::isfinite(x)) return false;
  return true;
}

// "" when `actual` matches `expected`; otherwise what differs, first difference only.
std::string compare(const Outcome& actual, const Outcome& expected, const Combination& c) {
  if (!actual.error.empty()) return "threw: " + actual.error;
  if (actual.values.size() != expected.values.size())
    return std::to_string(actual.values.size()) + " compared values, the reference has " +
           std::to_string(expected.values.size());
  for (size_t i = 0; i < actual.values.size(); ++i) {
    // Past a value that overflowed in the reference, executors may legitimately differ in how
    // NaN flows (see ReluOfNanDiffersBetweenExecutors): compare up to and including that value.
    if (i > 0 && !all_finite(expected.values[i - 1])) break;
    const ::testing::AssertionResult same = testing::near_relative(actual.values[i], expected.values[i], 1e-5);
    if (!same) return "compared value " + std::to_string(i) + " (" + actual.ops[i] + "): " + same.message();
  }
  if (actual.stats.batches < actual.stats.lower_bound)
    return std::to_string(actual.stats.batches) + " batches, under the lower bound " +
           std::to_string(actual.stats.lower_bound);
  if (c.policy == "sequential" && actual.stats.batches != actual.stats.nodes)
    return "sequential ran " + std::to_string(actual.stats.batches) + " batches for " +
           std::to_string(actual.stats.nodes) + " nodes";
  return "";
}

struct Fuzzer {
  testing::TempDir cache;  // the jit's kernels, shared by every jit engine here
  testing::RandomGraphModel model;
  std::vector<Combination> combinations = all_combinations(3);
  std::vector<std::unique_ptr<Engine>> engines;
  Engine reference{engine_options({"sequential", "reference", false, false, 1}, "")};
  std::map<std::string, int64_t> runs;  // per combination, for the coverage check

  Fuzzer() {
    for (const Combination& c : combinations) engines.push_back(std::make_unique<Engine>(engine_options(c, cache.path())));
  }

  // Runs graph `seed` under combinations [first, first + count) (mod their number); returns the
  // first mismatch as a message naming the seed and combination, or "".
  std::string check(uint64_t seed, size_t first, size_t count) {
    const testing::RandomGraphOptions options = options_for(seed);
    const Outcome expected = run_graph(reference, model, seed, options);
    if (!expected.error.empty())
      return "seed " + std::to_string(seed) + " (" + describe(options) + "): the reference threw: " + expected.error;
    for (size_t k = 0; k < count; ++k) {
      const size_t index = (first + k) % combinations.size();
      const Combination& c = combinations[index];
      const Outcome actual = run_graph(*engines[index], model, seed, options);
      ++runs[name_of(c)];
      const std::string difference = compare(actual, expected, c);
      if (!difference.empty())
        return "seed " + std::to_string(seed) + " (" + describe(options) + "), " + name_of(c) + ": " + difference;
    }
    return "";
  }
};

// Independent batches side by side at two and three threads, each window checked by the
// addresses its batches read and write (runtime/side_by_side.h), for the scope of one test.
struct VerifiedWindows {
  VerifiedWindows() {
    runtime::BatchedExecutor::side_by_side_override.store(1);
    runtime::SideBySide::verify_windows.store(true);
  }
  ~VerifiedWindows() {
    runtime::BatchedExecutor::side_by_side_override.store(-1);
    runtime::SideBySide::verify_windows.store(false);
  }
};

TEST(Differential, RandomGraphsEveryCombinationEqualsReference) {
  const VerifiedWindows verified;
  const uint64_t graphs = env_number("EDB_FUZZ_GRAPHS", 300);
  const uint64_t first_seed = env_number("EDB_FUZZ_FIRST_SEED", 1);
  Fuzzer fuzzer;
  const size_t total = fuzzer.combinations.size();
  const size_t per_graph = std::clamp<size_t>(env_number("EDB_FUZZ_COMBINATIONS", total), 1, total);
  int64_t cell_calls = 0;
  for (uint64_t seed = first_seed; seed < first_seed + graphs; ++seed) {
    const std::string failure = fuzzer.check(seed, size_t(seed * per_graph) % total, per_graph);
    ASSERT_EQ(failure, "") << "reproduce: EDB_FUZZ_FIRST_SEED=" << seed
                           << " EDB_FUZZ_GRAPHS=1 edb_correctness_tests "
                              "--gtest_filter=Differential.*";
    if (graphs >= 10000 && (seed - first_seed + 1) % 10000 == 0)
      std::fprintf(stderr, "differential: %llu graphs\n", static_cast<unsigned long long>(seed - first_seed + 1));
    Trace probe(fuzzer.reference);
    cell_calls += testing::record_random_graph(probe, fuzzer.model, seed, options_for(seed)).cell_calls;
  }
  if (graphs * per_graph >= total) {
    for (const Combination& c : fuzzer.combinations) EXPECT_GT(fuzzer.runs[name_of(c)], 0) << name_of(c);
  }
  if (graphs >= 100) {
    EXPECT_GT(cell_calls, int64_t(graphs));  // the cells really are called
  }
}

// The backward pass of random graphs: a loss weighing every compared value, differentiated under
// each combination (rotating, EDB_FUZZ_GRADIENT_COMBINATIONS per graph, default 10) and compared
// with the reference's gradients for every parameter and lookup row.
Outcome run_gradients(Engine& engine, testing::RandomGraphModel& model, uint64_t seed,
                      const testing::RandomGraphOptions& options) {
  Outcome outcome;
  try {
    Trace trace(engine);
    const testing::RandomGraph graph = testing::record_random_graph(trace, model, seed, options);
    std::vector<Expr> terms;
    for (size_t i = 0; i < graph.compared.size(); ++i) {
      const Expr& v = graph.compared[i];
      const int n = v.rows() * v.cols();
      std::vector<float> weights(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) weights[size_t(k)] = 0.01f * float(int((i * 31 + size_t(k) * 17) % 13) - 6);
      terms.push_back(matmul(trace.input(1, n, weights), reshape(v, n, 1)));
    }
    const Gradients g = trace.backward(sum(terms));
    outcome.values.push_back(Tensor{1, 1, {g.loss}});
    outcome.ops.push_back("loss");
    for (Parameter p : model.model().parameters()) {
      const Tensor* t = g.of(p);
      outcome.values.push_back(t ? *t : Tensor{p.rows(), p.cols(), std::vector<float>(size_t(p.rows() * p.cols()), 0.0f)});
      outcome.ops.push_back("gradient of " + p.name());
    }
    for (LookupTable t : model.model().lookups()) {
      const Gradients::Rows* rows = g.of(t);
      std::vector<float> dense(size_t(t.dim()) * size_t(t.entries()), 0.0f);
      for (size_t i = 0; rows && i < rows->entries.size(); ++i)
        std::copy_n(rows->gradients.begin() + ptrdiff_t(i) * t.dim(), t.dim(), dense.begin() + rows->entries[i] * t.dim());
      outcome.values.push_back(Tensor{t.dim(), t.entries(), dense});
      outcome.ops.push_back("gradient of " + t.name());
    }
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  return outcome;
}

TEST(Differential, RandomGraphGradientsEqualReference) {
  const VerifiedWindows verified;
  const uint64_t graphs = env_number("EDB_FUZZ_GRADIENT_GRAPHS", 100);
  Fuzzer fuzzer;
  const size_t total = fuzzer.combinations.size();
  const size_t per_graph = std::clamp<size_t>(env_number("EDB_FUZZ_GRADIENT_COMBINATIONS", 10), 1, total);
  int compared = 0;
  for (uint64_t seed = 1; seed <= graphs; ++seed) {
    const testing::RandomGraphOptions options = options_for(seed);
    const Outcome expected = run_gradients(fuzzer.reference, fuzzer.model, seed, options);
    ASSERT_EQ(expected.error, "") << "seed " << seed;
    if (!std::all_of(expected.values.begin(), expected.values.end(), all_finite)) continue;  // overflowed
    ++compared;
    for (size_t k = 0; k < per_graph; ++k) {
      const size_t index = (seed * per_graph + k) % total;
      const Outcome actual = run_gradients(*fuzzer.engines[index], fuzzer.model, seed, options);
      ASSERT_EQ(actual.error, "") << "seed " << seed << " " << name_of(fuzzer.combinations[index]);
      ASSERT_EQ(actual.values.size(), expected.values.size());
      for (size_t i = 0; i < actual.values.size(); ++i)
        ASSERT_TRUE(testing::near_relative(actual.values[i], expected.values[i], 1e-3))
            << "seed " << seed << " " << name_of(fuzzer.combinations[index]) << ": " << actual.ops[i];
    }
  }
  EXPECT_GT(compared, int(graphs * 3 / 4));  // most graphs stay finite, so most are compared
}

// A seed names a graph only for one version of the generator: since it draws exp, log, div, max,
// min, sum_elements, mean_elements and transpose too, every seed records another graph (old seed
// 3114, which found the relu below, now records one whose values grow to ~150 through random
// cells and cancel to ~1, just past the tolerance on GEMM rounding alone). So what the long mode
// finds is kept minimised, as below, not as a seed.

// Minimised from seed 3114 of the generator before the ops above (sequential/jit/cells off/memplan
// off): relu of NaN (here inf - inf).
// The jit returned 0 (its kernel selected x > 0 ? x : 0) where the others propagate NaN (Eigen's
// max); now every executor gives NaN.
TEST(Differential, ReluOfNanIsNanOnEveryExecutor) {
  std::map<std::string, std::vector<float>> results;
  for (const std::string& executor : runtime::executor_names()) {
    Engine engine(engine_options({"sequential", executor, false, false, 1}, ""));
    Trace trace(engine);
    const float inf = std::numeric_limits<float>::infinity();
    const Expr big = trace.input({inf, 1.0f, inf, -2.0f});
    const Expr out = relu((big - big) + trace.input({0.0f, 1.0f, 0.0f, -1.0f}));  // relu(NaN, 1, NaN, -1)
    trace.run();
    results[executor] = out.value().data;
  }
  for (const auto& [executor, values] : results) {
    EXPECT_EQ(values[1], 1.0f) << executor;
    EXPECT_EQ(values[3], 0.0f) << executor;
  }
  for (const auto& [executor, values] : results) {
    EXPECT_TRUE(std::isnan(values[0])) << executor;
    EXPECT_TRUE(std::isnan(values[2])) << executor;
  }
}

// The fuzzer can fail: a wrong value, a wrong count and an exception are each reported.
TEST(Differential, ComparisonReportsEachKindOfDifference) {
  Outcome expected;
  expected.values = {Tensor{2, 1, {1.0f, 2.0f}}};
  expected.ops = {"add"};
  expected.stats.nodes = 3;
  expected.stats.batches = 3;
  expected.stats.lower_bound = 2;
  const Combination greedy{"greedy", "batched"}, sequential{"sequential", "batched"};
  Outcome same = expected;
  same.stats.batches = 2;
  EXPECT_EQ(compare(same, expected, greedy), "");
  Outcome wrong = same;
  wrong.values[0].data[1] = 2.1f;
  EXPECT_NE(compare(wrong, expected, greedy).find("compared value 0 (add)"), std::string::npos);
  Outcome fewer = same;
  fewer.values.clear();
  EXPECT_NE(compare(fewer, expected, greedy).find("0 compared values"), std::string::npos);
  Outcome overflowed = expected;
  overflowed.values[0].data[0] = std::numeric_limits<float>::infinity();
  Outcome also = overflowed;
  also.stats.batches = 2;
  EXPECT_EQ(compare(also, overflowed, greedy), "");  // inf in both runs agrees
  also.values[0].data[0] = -std::numeric_limits<float>::infinity();
  EXPECT_NE(compare(also, overflowed, greedy), "");
  Outcome threw = same;
  threw.error = "boom";
  EXPECT_EQ(compare(threw, expected, greedy), "threw: boom");
  Outcome under = same;
  under.stats.batches = 1;
  EXPECT_NE(compare(under, expected, greedy).find("under the lower bound"), std::string::npos);
  EXPECT_NE(compare(same, expected, sequential).find("sequential ran 2 batches"), std::string::npos);
}

// Cells on and off record the same values for a graph full of calls, and calls batch.
TEST(Differential, RandomCellsBatchAndMatchTheirInlineBodies) {
  const testing::RandomGraphModel model;
  testing::RandomGraphOptions options;
  options.min_instances = options.max_instances = 6;
  options.cell_calls = 0.5;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Engine on(engine_options({"greedy", "batched", true, false, 1}, "")),
        off(engine_options({"greedy", "batched", false, false, 1}, ""));
    const Outcome a = run_graph(on, model, seed, options), b = run_graph(off, model, seed, options);
    ASSERT_EQ(a.error, "");
    ASSERT_EQ(b.error, "");
    EXPECT_EQ(compare(a, b, {"greedy", "batched"}), "") << "seed " << seed;
    Trace trace(on);
    const testing::RandomGraph graph = testing::record_random_graph(trace, model, seed, options);
    EXPECT_GT(graph.cell_calls, 6) << "seed " << seed;
  }
}

}  // namespace
}  // namespace edb
