// Every cache that grows with the structures a process sees stays within its bound (Stats::caches,
// counts rather than resident memory) while an engine with small caps evaluates many distinct
// random trees, and the values still equal the reference executor's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/rng.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

// A random binary tree of `leaves` inputs of `dim` rows, each inner node a random elementwise op
// (some with a constant drawn from a few) of its children, then W applied to a slice of the root:
// the shapes, op mixes and constants differ from structure to structure, so signatures, search
// schedules and compiled kernels keep arriving.
Expr random_tree(Trace& trace, const Parameter& W, testing::Rng& rng, int dim, int leaves) {
  std::vector<Expr> level;
  for (int i = 0; i < leaves; ++i) {
    std::vector<float> values(static_cast<size_t>(dim), 0.0f);
    for (float& v : values) v = float(rng.unit()) - 0.5f;
    level.push_back(trace.input(values));
  }
  static const float kConstants[] = {0.5f, 2.0f, -1.5f, 0.25f};
  while (level.size() > 1) {
    std::vector<Expr> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      const Expr& a = level[i];
      const Expr& b = level[i + 1];
      switch (rng.below(6)) {
        case 0: next.push_back(tanh(a + b)); break;
        case 1: next.push_back(sigmoid(cmult(a, b))); break;
        case 2: next.push_back(a * kConstants[rng.below(4)] + b); break;
        case 3: next.push_back(tanh(a) - sigmoid(b)); break;
        case 4: next.push_back(max(a, b) + kConstants[rng.below(4)]); break;
        default: next.push_back(cmult(tanh(a), b)); break;
      }
    }
    if (level.size() % 2) next.push_back(level.back());
    level = std::move(next);
  }
  return matmul(trace.param(W), slice(level[0], 0, 2));
}

// Every cache within its bound, as read between evaluations.
void expect_within_bounds(const CacheSizes& caches, const std::string& when) {
  for (const auto& [name, cache] : caches.named()) {
    if (cache->max_entries > 0) {
      EXPECT_LE(cache->entries, cache->max_entries) << name << " " << when;
    }
    if (cache->max_bytes > 0) {
      EXPECT_LE(cache->bytes, cache->max_bytes) << name << " " << when;
    }
  }
}

struct Outcome {
  std::vector<std::vector<float>> values;  // per structure, its root's values
  Stats stats;
};

// `structures` traces, each a few random trees of one dimension; the seed fixes every draw, so two
// engines see the same structures.
Outcome run_structures(const EngineOptions& options, int structures, bool check_each) {
  Model model("bounds", 3);
  const Parameter W = model.add_parameter("W", 3, 2);
  Engine engine(options);
  testing::Rng rng(17);
  Outcome outcome;
  for (int s = 0; s < structures; ++s) {
    const int dim = 2 + s % 23;
    {
      Trace trace(engine);
      std::vector<Expr> roots;
      for (int t = 0; t < 3; ++t) roots.push_back(random_tree(trace, W, rng, dim, 2 + int(rng.below(6))));
      trace.run();
      for (const Expr& root : roots) outcome.values.push_back(root.value().data);
    }
    // Between evaluations, with no trace alive: where every bound holds.
    if (!check_each) continue;
    expect_within_bounds(engine.stats().caches, "after structure " + std::to_string(s));
  }
  outcome.stats = engine.stats();
  return outcome;
}

void expect_same_values(const Outcome& actual, const Outcome& expected, const std::string& what) {
  ASSERT_EQ(actual.values.size(), expected.values.size()) << what;
  for (size_t i = 0; i < actual.values.size(); ++i) {
    ASSERT_EQ(actual.values[i].size(), expected.values[i].size()) << what << ", root " << i;
    for (size_t k = 0; k < actual.values[i].size(); ++k)
      EXPECT_NEAR(actual.values[i][k], expected.values[i][k], 1e-4f) << what << ", root " << i << ", value " << k;
  }
}

constexpr int kStructures = 60;

TEST(CacheBounds, EveryCacheStaysWithinItsBoundOverManyStructures) {
  testing::TempDir cache;
  EngineOptions reference;
  reference.executor = "reference";
  reference.policy = "sequential";
  const Outcome expected = run_structures(reference, kStructures, false);
  for (const char* executor : {"batched", "jit"}) {
    for (const char* policy : {"greedy", "search"}) {
      EngineOptions options;
      options.executor = executor;
      options.policy = policy;
      options.search_budget_ms = 5;
      options.cache_directory = cache.path();
      options.cache_entries = 2;  // 2 kernels and schedules, 32 signatures
      options.verify = true;
      const std::string what = std::string(executor) + " " + policy;
      const Outcome actual = run_structures(options, kStructures, true);
      expect_same_values(actual, expected, what);
      const CacheSizes& c = actual.stats.caches;
      EXPECT_EQ(c.signatures.max_entries, 32) << what;
      EXPECT_GT(c.signatures.evictions, 0) << what;  // 23 dimensions of several types each: it started again
      EXPECT_EQ(c.scratch.max_bytes, int64_t{64} << 20) << what;
      if (std::string(policy) == "search") {
        EXPECT_EQ(c.search_schedules.max_entries, 2) << what;
        EXPECT_GT(c.search_schedules.evictions, 0) << what;
      }
      if (std::string(executor) == "jit") {
        EXPECT_EQ(c.jit_kernels.max_entries, 2) << what;
        EXPECT_GT(c.jit_kernels.evictions, 0) << what;
        EXPECT_GT(c.linked_kernels.entries, 0) << what;
        EXPECT_EQ(c.linked_kernels.max_entries, 4096) << what;
        EXPECT_EQ(c.kernel_memory.max_bytes, int64_t{64} << 20) << what;
      }
    }
  }
}

TEST(CacheBounds, DefaultsAreDocumentedNumbers) {
  EngineOptions options;
  EXPECT_EQ(options.cache_entries, 1024);
  options.executor = "batched";
  Engine engine(options);
  const CacheSizes& c = engine.stats().caches;
  EXPECT_EQ(c.signatures.max_entries, 16 * 1024);
  EXPECT_EQ(c.scratch.max_bytes, int64_t{64} << 20);
  options.cache_entries = 0;
  EXPECT_THROW(Engine{options}, UsageError);
}

// A signature table over its bound starts again between evaluations even with a cell recorded:
// the engine drops its cell records first (a cell called again records its body again).
TEST(CacheBounds, SignaturesStartAgainWithTheCellRecords) {
  for (const char* executor : {"batched", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.cache_entries = 1;  // 16 signatures, 1 cell record
    options.verify = true;
    Engine engine(options);
    const Cell cell("double", {{2, 1}}, [](Trace&, std::span<const Expr> in) { return std::vector<Expr>{in[0] * 2.0f}; });
    for (int dim = 2; dim < 30; ++dim) {
      Trace trace(engine);
      const Expr x = trace.input(std::vector<float>(static_cast<size_t>(dim), 1.0f));
      const Expr y = tanh(x) + sigmoid(x);
      const Expr z = cell(trace, {slice(y, 0, 2)})[0];
      EXPECT_FLOAT_EQ(z.value()(0), 2.0f * (std::tanh(1.0f) + 1.0f / (1.0f + std::exp(-1.0f)))) << executor << " " << dim;
    }
    const CacheSizes& c = engine.stats().caches;
    EXPECT_LE(c.signatures.entries, 16) << executor;
    EXPECT_GT(c.signatures.evictions, 0) << executor;
    EXPECT_EQ(c.cell_records.max_entries, 1) << executor;
    EXPECT_GT(c.cell_records.evictions, 0) << executor;
  }
}

// A cell body of its own per structure (its scale differs), called 3-6 times on inputs of one
// dimension, and once more on the first call's output; the calls' values per structure.
Outcome run_cells(const EngineOptions& options, int structures, CacheSizes* largest) {
  Model model("cell bounds", 5);
  const Parameter W = model.add_parameter("W", 4, 4);
  Engine engine(options);
  testing::Rng rng(29);
  Outcome outcome;
  for (int s = 0; s < structures; ++s) {
    const float scale = 1.0f + 0.125f * float(s);
    const Cell cell("scaled", {{4, 1}}, [&W, scale](Trace& t, std::span<const Expr> in) {
      return std::vector<Expr>{tanh(matmul(t.param(W), in[0])) * scale + in[0]};
    });
    {
      Trace trace(engine);
      std::vector<Expr> outputs;
      for (int k = 0, calls = 3 + s % 4; k < calls; ++k) {
        std::vector<float> values(4);
        for (float& v : values) v = float(rng.unit()) - 0.5f;
        outputs.push_back(cell(trace, {trace.input(values)})[0]);
      }
      outputs.push_back(cell(trace, {outputs[0]})[0]);
      trace.run();
      for (const Expr& output : outputs) outcome.values.push_back(output.value().data);
    }
    if (!largest) continue;
    const CacheSizes& c = engine.stats().caches;
    expect_within_bounds(c, "after structure " + std::to_string(s));
    largest->cell_records.entries = std::max(largest->cell_records.entries, c.cell_records.entries);
    largest->cell_kernels.entries = std::max(largest->cell_kernels.entries, c.cell_kernels.entries);
    largest->cell_kernels.bytes = std::max(largest->cell_kernels.bytes, c.cell_kernels.bytes);
    largest->call_expansions.entries = std::max(largest->call_expansions.entries, c.call_expansions.entries);
  }
  outcome.stats = engine.stats();
  return outcome;
}

// More distinct cell bodies than cache_entries: the cell records, the jit's compiled cells and
// the bodies expanded over calls stay within it, and every value equals the reference's.
TEST(CacheBounds, CellCachesStayWithinCacheEntries) {
  testing::TempDir cache;
  EngineOptions reference;
  reference.executor = "reference";
  reference.policy = "sequential";  // calls copy their bodies
  const Outcome expected = run_cells(reference, 12, nullptr);
  for (const char* executor : {"reference", "batched", "jit"}) {
    EngineOptions options;
    options.executor = executor;
    options.cache_directory = cache.path();
    options.cache_entries = 2;
    options.verify = true;
    const std::string what = executor;
    CacheSizes largest;
    const Outcome actual = run_cells(options, 12, &largest);
    expect_same_values(actual, expected, what);
    const CacheSizes& c = actual.stats.caches;
    EXPECT_EQ(c.cell_records.max_entries, 2) << what;
    EXPECT_EQ(largest.cell_records.entries, 2) << what;
    EXPECT_EQ(c.cell_records.evictions, 12) << what;  // 3 at a time, after the 3rd, 6th, 9th and 12th structure
    if (what == "jit") {
      EXPECT_EQ(c.cell_kernels.max_entries, 2) << what;
      EXPECT_EQ(largest.cell_kernels.entries, 2) << what;
      EXPECT_GT(largest.cell_kernels.bytes, 0) << what;  // the packed W
      EXPECT_GT(c.cell_kernels.evictions, 0) << what;
    } else {
      EXPECT_EQ(c.cell_kernels.max_entries, 0) << what;
      EXPECT_EQ(c.call_expansions.max_entries, 2) << what;
      EXPECT_EQ(largest.call_expansions.entries, 2) << what;
      EXPECT_GT(c.call_expansions.evictions, 0) << what;
    }
  }
}

// More distinct structures than the search policy keeps: the least recently used go.
TEST(CacheBounds, SearchKeepsAtMost64Schedules) {
  EngineOptions options;
  options.executor = "batched";
  options.policy = "search";
  options.search_budget_ms = 1;
  const Outcome outcome = run_structures(options, 70, true);
  const CacheSize& schedules = outcome.stats.caches.search_schedules;
  EXPECT_EQ(schedules.max_entries, 64);
  EXPECT_EQ(schedules.entries, 64);
  EXPECT_EQ(schedules.evictions, 70 - 64);
}

// Sizes are gauges: a difference of two readings keeps the later sizes, a sum leaves them as they are.
TEST(CacheBounds, SizesCombineAsGauges) {
  Stats earlier, later;
  earlier.caches.signatures.entries = 5;
  later.caches.signatures.entries = 7;
  later.nodes = 10;
  earlier.nodes = 4;
  Stats difference = later;
  difference -= earlier;
  EXPECT_EQ(difference.nodes, 6);
  EXPECT_EQ(difference.caches.signatures.entries, 7);
  Stats total = earlier;
  total += later;
  EXPECT_EQ(total.nodes, 14);
  EXPECT_EQ(total.caches.signatures.entries, 5);
}

}  // namespace
}  // namespace edb
