// The schedule search (scheduler/search.h) against the exhaustive branch and bound of exact.h on
// small graphs, its bound and budget; chain heights against their definition; the learned policy
// (imitation.h) never above greedy on its training traces, its greedy fallback, and its file
// refused when it is of another kind, version or model or damaged; the search policy's cache by
// trace structure.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "ir/signature.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "scheduler/exact.h"
#include "scheduler/fsm.h"
#include "scheduler/imitation.h"
#include "scheduler/lower_bound.h"
#include "scheduler/policies.h"
#include "scheduler/policy_file.h"
#include "scheduler/search.h"
#include "scheduler/tight.h"
#include "tests/support/graph_builder.h"
#include "tests/support/test_support.h"
#include "trace/state.h"

namespace edb::scheduler {
namespace {

using ir::NodeId;
using ir::Op;
using ir::Shape;

using testing::input;
using testing::op;

// Random DAGs of unary and binary elementwise ops over inputs of two sizes, so types repeat on
// different paths and the order of batches matters; `instances` copies side by side, each drawn
// from its own seed, like a trace of several instances.
ir::Graph random_dag(uint64_t seed, int ops, int instances = 1) {
  ir::Graph graph;
  for (int k = 0; k < instances; ++k) {
    std::mt19937_64 rng(seed * 1000 + uint64_t(k));
    std::vector<NodeId> by_rows[2];
    for (int i = 0; i < 3; ++i) by_rows[i % 2].push_back(input(graph, i % 2 ? 4 : 2));
    const Op unary[] = {Op::tanh, Op::sigmoid, Op::relu};
    for (int i = 0; i < ops; ++i) {
      std::vector<NodeId>& pool = by_rows[rng() % 2];
      auto pick = [&] { return pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 4)]; };
      pool.push_back(rng() % 3 == 0 ? op(graph, Op::add, {pick(), pick()}) : op(graph, unary[rng() % 3], {pick()}));
    }
  }
  return graph;
}

int64_t greedy_count(const ScheduleInput& in) {
  GreedyPolicy greedy;
  Schedule s;
  greedy.schedule(in, s);
  verify(in, s);
  return int64_t(s.batch_count());
}

// Chain heights against their definition, by a dense table per node and type: the most nodes of
// a node's own type on a path that starts at it; the remaining batches, the scheduled nodes on the
// longest path from it; also the sum of the heights' tops is the lower bound, and a type is
// terminal only when it is single-rank.
TEST(ChainHeights, MatchTheDefinitionOnRandomGraphs) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const ir::Graph graph = random_dag(seed, 30 + int(seed % 20), 1 + int(seed % 4));
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    Analysis analysis;
    analysis.build(in);
    ChainHeights heights;
    heights.build(in, analysis);  // without remaining first, then with it on the same buffers
    EXPECT_TRUE(heights.remaining.empty());
    heights.build(in, analysis, true);  // again on the same buffers: the same heights
    const size_t n = graph.size(), width = analysis.types.count();
    std::vector<uint32_t> most(n * width, 0);  // most[i][t]: t-nodes on the longest path from i
    std::vector<uint32_t> path(n, 0);          // scheduled nodes on the longest path from i
    std::vector<std::vector<NodeId>> users(n);
    for (NodeId id = 0; id < n; ++id)
      for (NodeId arg : graph.args(id)) users[arg].push_back(id);
    for (size_t i = n; i-- > 0;) {
      const uint32_t t = analysis.types.of_node[i];
      if (t == LocalTypes::kNone) continue;
      for (NodeId u : users[i])
        for (size_t k = 0; k < width; ++k) most[i * width + k] = std::max(most[i * width + k], most[u * width + k]);
      ++most[i * width + t];
      for (NodeId u : users[i]) path[i] = std::max(path[i], path[u]);
      ++path[i];  // without cells every type weighs one batch
      SCOPED_TRACE("seed " + std::to_string(seed) + ", node " + std::to_string(i));
      EXPECT_EQ(heights.height[i], most[i * width + t]);
      EXPECT_EQ(heights.remaining[i], path[i]);
    }
    int64_t bound = 0;
    std::vector<uint32_t> top(width, 0);
    for (size_t i = 0; i < n; ++i)
      if (const uint32_t t = analysis.types.of_node[i]; t != LocalTypes::kNone) top[t] = std::max(top[t], heights.height[i]);
    for (size_t t = 0; t < width; ++t) {
      bound += top[t];
      EXPECT_EQ(top[t], analysis.chains.longest[t]) << "seed " << seed << ", type " << t;
      if (heights.terminal[t]) {
        EXPECT_EQ(analysis.chains.longest[t], 1u);
      }
    }
    EXPECT_EQ(bound, lower_bound(in)) << "seed " << seed;

    // The analysis built for heights: the same heights, longest chains, bound, terminal types and
    // remaining batches, read from its reverse chain pass instead of rows of the policy's own.
    Analysis by_height;
    by_height.build(in, ChainDirection::heights);
    EXPECT_TRUE(by_height.chains.rank.empty());
    EXPECT_EQ(by_height.chains.longest, analysis.chains.longest) << "seed " << seed;
    EXPECT_EQ(by_height.chains.lower_bound(), analysis.chains.lower_bound()) << "seed " << seed;
    ChainHeights read;
    read.build(in, by_height, true);
    EXPECT_EQ(read.height.data(), by_height.chains.height.data());
    EXPECT_TRUE(std::equal(read.height.begin(), read.height.end(), heights.height.begin(), heights.height.end()))
        << "seed " << seed;
    EXPECT_TRUE(std::equal(read.remaining.begin(), read.remaining.end(), heights.remaining.begin(),
                           heights.remaining.end()))
        << "seed " << seed;
    EXPECT_EQ(read.terminal, heights.terminal) << "seed " << seed;
    EXPECT_EQ(read.weight, heights.weight) << "seed " << seed;
  }
}

// Random DAGs over inputs of `sizes` row counts, so types number about four per size: the chain
// pass's rows of one small vector (a few chain types), one large one, and several (and more than
// 64 lanes of types met, for terminal types).
ir::Graph random_dag_of_sizes(uint64_t seed, int ops, int sizes) {
  ir::Graph graph;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<NodeId>> by_rows(static_cast<size_t>(sizes));
  for (int k = 0; k < sizes; ++k) by_rows[size_t(k)].push_back(input(graph, 2 + k));
  const Op unary[] = {Op::tanh, Op::sigmoid, Op::relu};
  for (int i = 0; i < ops; ++i) {
    std::vector<NodeId>& pool = by_rows[rng() % by_rows.size()];
    auto pick = [&] { return pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 4)]; };
    pool.push_back(rng() % 3 == 0 ? op(graph, Op::add, {pick(), pick()}) : op(graph, unary[rng() % 3], {pick()}));
  }
  return graph;
}

// Ranks and heights from the analysis's chain pass against their definition by a dense table per
// node and type (the most nodes of a node's own type on a path that ends, or starts, at it), the
// longest chains, the remaining batches (scheduled nodes on the longest path from a node: without
// cells every type weighs one batch) and terminal types (single-rank, and no path from one of their
// nodes meets a type that is not).
void expect_chains_match_definition(const ir::Graph& graph) {
  ir::SignatureTable table;
  const std::vector<ir::TypeId> types = table.assign(graph);
  const ScheduleInput in{graph, types};
  Analysis by_rank, by_height;
  by_rank.build(in);
  by_height.build(in, ChainDirection::heights);
  const size_t n = graph.size(), width = by_rank.types.count();
  const std::vector<uint32_t>& of = by_rank.types.of_node;
  std::vector<std::vector<NodeId>> users(n);
  for (NodeId id = 0; id < n; ++id)
    for (NodeId arg : graph.args(id)) users[arg].push_back(id);
  std::vector<uint32_t> up(n * width, 0), down(n * width, 0), longest(width, 0), path(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (of[i] == LocalTypes::kNone) continue;
    for (NodeId a : graph.args(NodeId(i)))
      for (size_t k = 0; k < width; ++k) up[i * width + k] = std::max(up[i * width + k], up[a * width + k]);
    ++up[i * width + of[i]];
    ASSERT_EQ(by_rank.chains.rank[i], up[i * width + of[i]]) << "node " << i;
    longest[of[i]] = std::max(longest[of[i]], up[i * width + of[i]]);
  }
  std::vector<uint8_t> reaches_chain(width, 0);  // a path from one of its nodes meets a chain type
  for (size_t i = n; i-- > 0;) {
    if (of[i] == LocalTypes::kNone) continue;
    for (NodeId u : users[i]) {
      for (size_t k = 0; k < width; ++k) down[i * width + k] = std::max(down[i * width + k], down[u * width + k]);
      path[i] = std::max(path[i], path[u]);
    }
    ++down[i * width + of[i]];
    ++path[i];
    ASSERT_EQ(by_height.chains.height[i], down[i * width + of[i]]) << "node " << i;
    ASSERT_EQ(by_height.chains.remaining[i], path[i]) << "node " << i;
    for (size_t k = 0; k < width; ++k)
      if (down[i * width + k] > 0 && longest[k] > 1) reaches_chain[of[i]] = 1;
  }
  EXPECT_EQ(by_rank.chains.longest, longest);
  EXPECT_EQ(by_height.chains.longest, longest);
  for (size_t t = 0; t < width; ++t)
    EXPECT_EQ(by_height.chains.terminal[t], longest[t] == 1 && !reaches_chain[t]) << "type " << t;
}

// With few and with many types: rows of one small vector (a few chain types), one large one, and
// several (and more than 64 lanes of types met, for terminal types).
TEST(TypeChains, RanksHeightsAndTerminalTypesMatchTheDefinitionWithManyTypes) {
  for (int sizes : {1, 3, 10, 25, 60}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("sizes " + std::to_string(sizes) + ", seed " + std::to_string(seed));
      expect_chains_match_definition(random_dag_of_sizes(seed, 40 * sizes, sizes));
    }
  }
}

// Graphs of 65,535 nodes or more count in 32 bits: a row of one 16-byte vector (up to 4 chain
// types, one size) and rows of several (two sizes).
TEST(TypeChains, MatchTheDefinitionWithThirtyTwoBitCounts) {
  for (int sizes : {1, 2}) {
    SCOPED_TRACE("sizes " + std::to_string(sizes));
    const ir::Graph graph = random_dag_of_sizes(7, 70000, sizes);
    ASSERT_GE(graph.size(), 65535u);
    expect_chains_match_definition(graph);
  }
}

// One Analysis reused over graphs of other sizes and shapes, each way, gives what a fresh one gives:
// the chain pass writes every node's rank or height and remaining batches (0 for leaves), with
// nothing left from the graph before.
TEST(TypeChains, AReusedAnalysisMatchesAFreshOne) {
  for (ChainDirection direction : {ChainDirection::heights, ChainDirection::ranks}) {
    Analysis reused;  // as a driver keeps one, built the same way for every trace
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      const ir::Graph graph = random_dag(seed, 70 - int(seed), 1 + int(seed % 4));
      ir::SignatureTable table;
      const std::vector<ir::TypeId> types = table.assign(graph);
      const ScheduleInput in{graph, types};
      Analysis fresh;
      fresh.build(in, direction);
      reused.build(in, direction);
      EXPECT_EQ(reused.chains.rank, fresh.chains.rank) << "seed " << seed;
      EXPECT_EQ(reused.chains.height, fresh.chains.height) << "seed " << seed;
      EXPECT_EQ(reused.chains.remaining, fresh.chains.remaining) << "seed " << seed;
      EXPECT_EQ(reused.chains.longest, fresh.chains.longest) << "seed " << seed;
      EXPECT_EQ(reused.chains.terminal, fresh.chains.terminal) << "seed " << seed;
    }
  }
}

// Two types that feed each other in different instances form a cycle of types but no chain: both
// single-rank, so both terminal, unless a path from them meets a chain (the chain pass's exact
// count of the types met, beside its cheap one that is exact only when no such cycle exists).
TEST(TypeChains, ACycleOfTypesWithoutAChainIsTerminal) {
  for (const bool with_chain : {false, true}) {
    SCOPED_TRACE(with_chain ? "with a relu chain after the first sigmoid" : "no chain");
    ir::Graph graph;
    const NodeId s1 = op(graph, Op::sigmoid, {op(graph, Op::tanh, {input(graph, 2)})});
    op(graph, Op::tanh, {op(graph, Op::sigmoid, {input(graph, 2)})});
    if (with_chain) op(graph, Op::relu, {op(graph, Op::relu, {s1})});
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    Analysis by_height, by_rank;
    by_height.build(in, ChainDirection::heights);
    by_rank.build(in);
    ChainHeights own;  // the policy's own pass over the ranks analysis: node by node
    own.build(in, by_rank);
    for (uint32_t t = 0; t < by_height.types.count(); ++t) {
      const Op kind = graph.node(by_height.types.first[t]).op;
      const bool chain = kind == Op::relu && with_chain;
      EXPECT_EQ(by_height.chains.longest[t], chain ? 2u : 1u) << ir::op_name(kind);
      EXPECT_EQ(by_height.chains.terminal[t] != 0, !with_chain) << ir::op_name(kind);
    }
    EXPECT_EQ(by_height.chains.terminal, own.terminal);
  }
}

// The tight frontier's sum of remaining batches over each type's ready nodes, against a count
// from scratch after every batch of random schedules (random ready types, unbatchable ones too),
// and the remaining rule's pick among the tight types.
TEST(TightFrontier, ReadyRemainingIsTheSumOverTheReadyNodes) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ir::Graph graph = random_dag(seed, 30 + int(seed % 20), 1 + int(seed % 4));
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    Analysis analysis;
    analysis.build(in);
    ChainHeights heights;
    heights.build(in, analysis, true);
    TightFrontier frontier, steep;  // each node's remaining batches counted as is, and to the power 4
    frontier.reset(in, analysis, heights);
    steep.reset(in, analysis, heights, false, 4);
    std::vector<uint8_t> done(graph.size(), 0);
    for (NodeId id = 0; id < graph.size(); ++id) done[id] = analysis.types.of_node[id] == LocalTypes::kNone;
    std::mt19937_64 rng(seed);
    Schedule schedule;
    while (!frontier.done()) {
      std::vector<uint64_t> expected(analysis.types.count(), 0), expected_steep(analysis.types.count(), 0);
      for (NodeId id = 0; id < graph.size(); ++id) {
        if (done[id]) continue;
        bool ready = true;
        for (NodeId arg : graph.args(id)) ready = ready && done[arg];
        const uint64_t r = heights.remaining[id];
        if (ready) expected[analysis.types.of_node[id]] += r, expected_steep[analysis.types.of_node[id]] += r * r * r * r;
      }
      for (uint32_t t = 0; t < analysis.types.count(); ++t) {
        ASSERT_EQ(frontier.ready_remaining(t), double(expected[t])) << "seed " << seed << ", type " << t;
        ASSERT_EQ(steep.ready_remaining(t), double(expected_steep[t])) << "seed " << seed << ", type " << t;
      }
      const auto& ready = frontier.ready_types();
      // The remaining rule's tight part: a tight type with the most batches ahead (without cells every
      // weight is 1), terminal ones only when every tight type is, when any is tight.
      bool any_tight = false, only_terminal = true;
      for (uint32_t t : ready)
        if (frontier.tight(t)) any_tight = true, only_terminal = only_terminal && frontier.terminal(t);
      double most = 0;
      for (uint32_t t : ready)
        if (frontier.tight(t) && (only_terminal || !frontier.terminal(t))) most = std::max(most, double(expected[t]));
      const uint32_t tight = remaining_tight_choice(frontier, 1);
      EXPECT_EQ(tight != LocalTypes::kNone, any_tight) << "seed " << seed;
      if (any_tight) {
        EXPECT_TRUE(frontier.tight(tight));
        EXPECT_EQ(double(expected[tight]), most);
        EXPECT_EQ(remaining_choice(frontier, 1), tight);
      }
      const size_t before = schedule.nodes.size();
      const uint32_t chosen = ready[rng() % ready.size()];
      frontier.run(chosen, schedule);
      Schedule same;
      steep.run(chosen, same);
      for (size_t i = before; i < schedule.nodes.size(); ++i) done[schedule.nodes[i]] = 1;
    }
    verify(in, schedule);
  }
}

// The remaining rule gives valid schedules no shorter than the lower bound, and on child-sum trees
// (where lagging instances matter) needs fewer batches than the tight-first rule (1.06 against
// 1.23 x the weighted LB on 4 traces of 64 when this was written).
TEST(RemainingRule, ValidEverywhereAndAheadOfTheTightFirstRuleOnChildSumTrees) {
  // power 0: the tight-first rule; 1 or 2: the remaining rule's weight power; -1: the boosted rule
  // (weight power 1); `steep`: each node's remaining batches to the power 4.
  auto run_rule = [](const ScheduleInput& in, const Analysis& analysis, const ChainHeights& heights, int power,
                     bool steep = false) {
    TightFrontier frontier;
    frontier.reset(in, analysis, heights, false, steep ? 4 : 1);
    Schedule schedule;
    while (!frontier.done())
      frontier.run(power == 0    ? tight_first_choice(frontier)
                   : power == -1 ? boosted_remaining_among(frontier, frontier.ready_types(), 1, 4)
                                 : remaining_choice(frontier, power),
                   schedule);
    verify(in, schedule);
    return expanded_batch_count(in, schedule);
  };
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ir::Graph graph = random_dag(seed, 30, 4);
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    ScheduleInput in{graph, types};
    Analysis analysis;
    analysis.build(in);
    in.analysis = &analysis;
    ChainHeights heights;
    heights.build(in, analysis, true);
    for (int power : {1, 2})
      for (bool steep : {false, true})
        EXPECT_GE(run_rule(in, analysis, heights, power, steep), lower_bound(in)) << "seed " << seed;
    EXPECT_GE(run_rule(in, analysis, heights, -1, true), lower_bound(in)) << "seed " << seed;
  }
  samples::ModelConfig config;
  config.limit = 128;
  config.embed = 4;
  config.hidden = 4;
  auto model = samples::make_childsum(config);
  Engine engine;
  int64_t by_tight_first = 0, by_remaining = 0, bound = 0;
  for (int t = 0; t < 2; ++t) {
    Trace trace(engine);
    std::vector<Expr> losses;
    for (size_t i = 0; i < 64; ++i) losses.push_back(model->record_loss(trace, size_t(t) * 64 + i));
    sum(losses);
    detail::TraceState& state = detail::TraceState::of(losses[0], "search_test");
    const runtime::TraceData& data = state.data;
    ASSERT_EQ(data.types.size(), data.graph.size());
    ScheduleInput in{data.graph, data.types, 0, nullptr, &state.engine->driver.signatures};
    Analysis analysis;
    analysis.build(in);
    in.analysis = &analysis;
    ChainHeights heights;
    heights.build(in, analysis, true);
    by_tight_first += run_rule(in, analysis, heights, 0);
    by_remaining += run_rule(in, analysis, heights, 1);
    TightFrontier frontier;
    frontier.reset(in, analysis, heights);
    bound += frontier.remaining_bound();
  }
  EXPECT_GE(by_remaining, bound);
  EXPECT_LT(by_remaining * 100, by_tight_first * 95) << by_remaining << " against " << by_tight_first;
}

TEST(ScheduleSearch, NeverBelowTheOptimumAndFindsItOnSmallGraphs) {
  int optimal = 0, cases = 0, better_than_greedy = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const ir::Graph graph = random_dag(seed, 12 + int(seed % 8));
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    const ExactResult exact = schedule_fewest_batches(in);
    ASSERT_TRUE(exact.optimal) << "seed " << seed;
    const SearchResult found = search_schedule(in);
    verify(in, found.schedule);
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_EQ(found.batches, int64_t(found.schedule.batch_count()));
    EXPECT_EQ(found.lower_bound, lower_bound(in));  // without cells every type weighs one batch
    EXPECT_GE(found.batches, int64_t(exact.schedule.batch_count()));
    EXPECT_LE(found.batches, found.rule_batches);
    EXPECT_LE(found.batches, greedy_count(in));
    EXPECT_TRUE(found.finished);
    ++cases;
    if (found.batches == int64_t(exact.schedule.batch_count())) ++optimal;
    if (found.batches < greedy_count(in)) ++better_than_greedy;
  }
  // The beam with rollouts reaches the proven optimum on nearly all of them.
  EXPECT_GE(optimal, cases * 9 / 10) << optimal << " of " << cases;
  EXPECT_GT(better_than_greedy, 0);
}

TEST(ScheduleSearch, ATinyBudgetStillGivesAValidScheduleNoWorseThanTheRule) {
  const ir::Graph graph = random_dag(3, 60, 12);
  ir::SignatureTable table;
  const std::vector<ir::TypeId> types = table.assign(graph);
  const ScheduleInput in{graph, types};
  SearchOptions tiny;
  tiny.budget = std::chrono::microseconds(1);
  const SearchResult rushed = search_schedule(in, tiny);
  verify(in, rushed.schedule);
  EXPECT_FALSE(rushed.finished);
  EXPECT_LE(rushed.batches, rushed.rule_batches);
  const SearchResult full = search_schedule(in);
  verify(in, full.schedule);
  EXPECT_LE(full.batches, rushed.batches);
  EXPECT_GE(full.batches, lower_bound(in));
}

// Widening: after a beam of width 1 finishes, passes that branch on tight types too, of width 1, 2,
// ..., 64, follow within the budget, and the best schedule of any pass is kept: never worse than
// the first pass alone, and on multi-instance graphs where running tight types at once misses the
// proven optimum, the widened search finds it more often.
TEST(ScheduleSearch, WideningRunsWiderPassesAndNeverLosesTheBest) {
  int narrow_optimal = 0, widened_optimal = 0, widened_better = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ir::Graph graph = random_dag(seed, 10 + int(seed % 6), 4);
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    const ExactResult exact = schedule_fewest_batches(in);
    ASSERT_TRUE(exact.optimal) << "seed " << seed;
    SearchOptions narrow;
    narrow.beam_width = 1;
    narrow.budget = std::chrono::seconds(30);  // never reached: the passes end first
    SearchOptions widened = narrow;
    widened.widen = true;
    const SearchResult one = search_schedule(in, narrow);
    const SearchResult many = search_schedule(in, widened);
    SCOPED_TRACE("seed " + std::to_string(seed));
    verify(in, many.schedule);
    EXPECT_EQ(one.passes, 1);
    EXPECT_EQ(many.passes, 8);
    EXPECT_EQ(many.last_width, 64);
    EXPECT_TRUE(many.finished);
    EXPECT_EQ(many.batches, int64_t(many.schedule.batch_count()));
    EXPECT_LE(many.batches, one.batches);  // its first pass is the narrow search
    EXPECT_GE(many.batches, int64_t(exact.schedule.batch_count()));
    narrow_optimal += one.batches == int64_t(exact.schedule.batch_count());
    widened_optimal += many.batches == int64_t(exact.schedule.batch_count());
    widened_better += many.batches < one.batches;
  }
  EXPECT_GT(widened_optimal, narrow_optimal);
  EXPECT_GT(widened_better, 0);
}

// Several traces of random DAGs, typed in one table like an engine's.
struct Traces {
  std::vector<ir::Graph> graphs;
  std::vector<std::vector<ir::TypeId>> types;
  ir::SignatureTable table;
  std::vector<ScheduleInput> inputs() const {
    std::vector<ScheduleInput> out;
    for (size_t g = 0; g < graphs.size(); ++g) out.push_back({graphs[g], types[g], 0, nullptr, &table});
    return out;
  }
};

Traces random_traces(uint64_t first_seed, int count) {
  Traces t;
  for (int g = 0; g < count; ++g) t.graphs.push_back(random_dag(first_seed + uint64_t(g), 40, 16));
  for (const ir::Graph& graph : t.graphs) t.types.push_back(t.table.assign(graph));
  return t;
}

TEST(LearnedPolicy, NeverAboveGreedyOnItsTrainingTracesAndValidEverywhere) {
  const Traces training = random_traces(10, 6);
  const std::vector<ScheduleInput> inputs = training.inputs();
  ImitationPolicy policy;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(300);
  const LearnedReport report = policy.train(inputs, options);
  EXPECT_FALSE(policy.learned_nothing()) << report.stop_reason;
  EXPECT_LT(report.batches, report.greedy_batches) << report.stop_reason;
  EXPECT_EQ(report.traces + report.heldout_traces, 6);
  EXPECT_GT(report.heldout_traces, 0);
  EXPECT_LE(report.batches, report.greedy_batches);
  EXPECT_LE(report.search_batches, report.greedy_batches);
  EXPECT_FALSE(report.stop_reason.empty());
  for (size_t g = 0; g < size_t(report.traces); ++g) {
    Schedule s;
    policy.schedule(inputs[g], s);
    verify(inputs[g], s);
    EXPECT_LE(int64_t(s.batch_count()), greedy_count(inputs[g])) << "training trace " << g;
  }
  // Traces it never saw: valid schedules.
  const Traces other = random_traces(100, 3);
  for (const ScheduleInput& in : other.inputs()) {
    Schedule s;
    policy.schedule(in, s);
    verify(in, s);
  }
}

TEST(LearnedPolicy, UntrainedIsGreedyExactly) {
  const Traces t = random_traces(40, 2);
  for (const ScheduleInput& in : t.inputs()) {
    ImitationPolicy policy;
    GreedyPolicy greedy;
    Schedule a, b;
    policy.schedule(in, a);
    greedy.schedule(in, b);
    EXPECT_EQ(a.nodes, b.nodes);
    EXPECT_EQ(a.batch_type, b.batch_type);
  }
}

TEST(LearnedPolicy, FileRoundTripSchedulesAlike) {
  const Traces training = random_traces(10, 6);
  const std::vector<ScheduleInput> inputs = training.inputs();
  ImitationPolicy trained;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(300);
  trained.train(inputs, options);
  ASSERT_FALSE(trained.learned_nothing());
  testing::TempDir dir;
  const std::string path = dir.path() + "/learned.policy";
  trained.save(path);
  ImitationPolicy loaded;
  loaded.load(path);
  EXPECT_EQ(loaded.state_count(), trained.state_count());
  EXPECT_EQ(loaded.report().stop_reason, trained.report().stop_reason);
  for (const ScheduleInput& in : inputs) {
    Schedule a, b;
    trained.schedule(in, a);
    loaded.schedule(in, b);
    EXPECT_EQ(a.nodes, b.nodes);
  }
}

// The driver builds the analysis the way the policy asks (Policy::chains()): the learned policy
// makes the same schedule from an analysis with heights, one with ranks, or none.
TEST(LearnedPolicy, SchedulesAlikeWhicheverWayTheAnalysisRan) {
  const Traces training = random_traces(10, 6);
  const std::vector<ScheduleInput> inputs = training.inputs();
  ImitationPolicy policy;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(300);
  policy.train(inputs, options);
  ASSERT_FALSE(policy.learned_nothing());
  EXPECT_EQ(policy.chains(), policy.needs_remaining() || policy.base() == ImitationPolicy::Base::tight_first
                                 ? ChainDirection::heights
                                 : ChainDirection::ranks);
  EXPECT_EQ(ImitationPolicy().chains(), ChainDirection::ranks);  // greedy exactly reads ranks
  const Traces other = random_traces(100, 3);
  for (const ScheduleInput& bare : other.inputs()) {
    Schedule none, ranks, heights;
    policy.schedule(bare, none);
    for (ChainDirection direction : {ChainDirection::ranks, ChainDirection::heights}) {
      Analysis analysis;
      analysis.build(bare, direction);
      ScheduleInput in = bare;
      in.analysis = &analysis;
      Schedule& s = direction == ChainDirection::ranks ? ranks : heights;
      policy.schedule(in, s);
      verify(in, s);
    }
    EXPECT_EQ(none.nodes, ranks.nodes);
    EXPECT_EQ(none.nodes, heights.nodes);
    EXPECT_EQ(none.batch_type, heights.batch_type);
  }
}

// Scheduling traces whose types the table never saw leaves the table as trained: only training
// adds type names, so a policy serving many structures keeps its size.
TEST(LearnedPolicy, SchedulingUnseenTypesLeavesTheTableAsTrained) {
  const Traces training = random_traces(10, 6);
  ImitationPolicy policy;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(300);
  policy.train(training.inputs(), options);
  ASSERT_FALSE(policy.learned_nothing());
  testing::TempDir dir;
  policy.save(dir.file("trained.policy"));
  Traces unseen;  // inputs of 5 to 44 rows: types of sizes the training traces do not have
  for (int rows = 5; rows < 45; ++rows) {
    ir::Graph graph;
    const NodeId a = input(graph, rows), b = input(graph, rows);
    op(graph, Op::tanh, {op(graph, Op::add, {a, b})});
    op(graph, Op::relu, {op(graph, Op::sigmoid, {a})});
    unseen.graphs.push_back(std::move(graph));
  }
  for (const ir::Graph& graph : unseen.graphs) unseen.types.push_back(unseen.table.assign(graph));
  for (const ScheduleInput& in : unseen.inputs()) {
    Schedule s;
    policy.schedule(in, s);
    EXPECT_EQ(s.nodes.size(), 4u);
  }
  policy.save(dir.file("after.policy"));
  EXPECT_EQ(testing::read_file(dir.file("after.policy")), testing::read_file(dir.file("trained.policy")));
}

std::string load_error(const std::string& path) {
  try {
    ImitationPolicy policy;
    policy.load(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LearnedPolicy, FilesOfAnotherKindOrVersionAreRefused) {
  testing::TempDir dir;
  const std::string fsm_path = dir.path() + "/fsm.policy";
  FsmPolicy().save(fsm_path);
  EXPECT_NE(load_error(fsm_path).find("a Q-learning table of the fsm policy"), std::string::npos) << load_error(fsm_path);

  const std::string path = dir.path() + "/learned.policy";
  ImitationPolicy().save(path);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t at = text.find("\"version\": 6");
  ASSERT_NE(at, std::string::npos);
  for (const char* version : {"7", "3"}) {
    text.replace(at, 12, std::string("\"version\": ") + version);
    const std::string other = dir.path() + "/other.policy";
    std::ofstream(other) << text;
    EXPECT_NE(load_error(other).find(std::string("format version ") + version + ", this build reads versions 4 to 6"),
              std::string::npos)
        << load_error(other);
    EXPECT_NE(load_error(other).find("train the policy again"), std::string::npos) << load_error(other);
  }

  // The other way round: the fsm policy refuses a learned file and says which policy reads it.
  try {
    FsmPolicy fsm;
    fsm.load(path);
    ADD_FAILURE() << "loaded a learned file as fsm";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("run it with policy learned"), std::string::npos) << e.what();
  }
}

// A file's base: a version 4 file (before the steep bases) reads as it did and cannot name a steep
// base, nor a version 5 file the boosted one; a steep or boosted base read from a file schedules
// exactly as its rule (a table with no scores: the base makes every decision).
TEST(LearnedPolicy, ReadsOlderFilesAndSchedulesASteepBaseAsItsRule) {
  testing::TempDir dir;
  const std::string untrained = dir.file("untrained.policy");
  ImitationPolicy().save(untrained);
  const nlohmann::json file = nlohmann::json::parse(testing::read_file(untrained));
  auto with_base = [&](int version, const std::string& base) {
    nlohmann::json content = file.at("content");
    content["base"] = base;
    const std::string path = dir.file(base + "-" + std::to_string(version) + ".policy");
    scheduler::policy_file::write(path, "edbatch-learned-policy", version, content);
    return path;
  };
  ImitationPolicy four;
  four.load(with_base(4, "remaining-cheap"));
  EXPECT_EQ(four.base(), ImitationPolicy::Base::remaining_cheap);
  const std::string refused = with_base(4, "remaining-steep");
  EXPECT_NE(load_error(refused).find("unknown base 'remaining-steep'"), std::string::npos) << load_error(refused);
  ImitationPolicy five;
  five.load(with_base(5, "remaining-steep-cheap"));
  EXPECT_EQ(five.base(), ImitationPolicy::Base::remaining_steep_cheap);
  const std::string boosted_in_five = with_base(5, "remaining-steep-boosted");
  EXPECT_NE(load_error(boosted_in_five).find("unknown base 'remaining-steep-boosted'"), std::string::npos)
      << load_error(boosted_in_five);

  const Traces other = random_traces(100, 3);
  for (const auto& [name, base, weight_power] :
       {std::tuple{"remaining-steep", ImitationPolicy::Base::remaining_steep, 1},
        std::tuple{"remaining-steep-cheap", ImitationPolicy::Base::remaining_steep_cheap, 2},
        std::tuple{"remaining-steep-boosted", ImitationPolicy::Base::remaining_steep_boosted, 0}}) {
    ImitationPolicy policy;
    policy.load(with_base(6, name));
    EXPECT_EQ(policy.base(), base);
    EXPECT_FALSE(policy.greedy_fallback());
    EXPECT_EQ(policy.chains(), ChainDirection::heights);
    for (const ScheduleInput& bare : other.inputs()) {
      Schedule learned;
      policy.schedule(bare, learned);
      verify(bare, learned);
      Analysis analysis;
      analysis.build(bare, ChainDirection::heights);
      ScheduleInput in = bare;
      in.analysis = &analysis;
      ChainHeights heights;
      heights.build(in, analysis, true);
      TightFrontier frontier;
      frontier.reset(in, analysis, heights, false, 4);
      Schedule by_rule;
      while (!frontier.done())  // weight power 0: the boosted rule (weight power 1)
        frontier.run(weight_power == 0 ? boosted_remaining_among(frontier, frontier.ready_types(), 1,
                                                                 ImitationPolicy::kTightBoost)
                                       : remaining_choice(frontier, weight_power),
                     by_rule);
      EXPECT_EQ(learned.nodes, by_rule.nodes) << name;
      EXPECT_EQ(learned.batch_type, by_rule.batch_type) << name;
    }
  }
}

// Through the engine: a table trained on childsum traces refuses to schedule a dagrnn trace.
TEST(LearnedPolicy, AFileOfAnotherModelIsRefusedNamingBoth) {
  samples::ModelConfig config;
  config.limit = 16;
  config.embed = 4;
  config.hidden = 4;
  testing::TempDir dir;
  const std::string path = dir.path() + "/childsum.policy";
  {
    auto childsum = samples::make_childsum(config);
    EngineOptions options;
    options.policy = "learned";
    Engine engine(options);
    PolicyTraining training;
    training.search_budget_ms = 100;
    const PolicyProgress p = samples::train_policy(*childsum, engine, 4, 4, training);
    EXPECT_LE(p.best_batches, p.greedy_batches);
    EXPECT_EQ(p.beats_greedy, p.best_batches < p.greedy_batches);
    EXPECT_FALSE(p.stop_reason.empty());
    engine.save_policy(path);
  }
  auto dagrnn = samples::make_dagrnn(config);
  EngineOptions options;
  options.policy = "learned";
  options.policy_file = path;
  Engine engine(options);
  Trace trace(engine);
  dagrnn->record_loss(trace, 0);
  try {
    trace.run();
    ADD_FAILURE() << "scheduled a dagrnn trace with a childsum table";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("trained on model childsum"), std::string::npos) << what;
    EXPECT_NE(what.find("this trace uses model dagrnn"), std::string::npos) << what;
  }
}

TEST(LearnedPolicy, SavingATableThatLearnedNothingSaysSo) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/empty.policy";
  ::testing::internal::CaptureStderr();
  ImitationPolicy().save(path);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("learned nothing: every decision falls back to greedy"), std::string::npos) << said;
  EXPECT_TRUE(std::filesystem::exists(path));
  ::testing::internal::CaptureStderr();
  FsmPolicy().save(dir.path() + "/empty-fsm.policy");
  const std::string fsm_said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(fsm_said.find("learned nothing"), std::string::npos) << fsm_said;
}

// Chains of one op side by side: one type, never a choice, so greedy meets the lower bound and no
// table can beat it.
Traces chain_traces(int count) {
  Traces t;
  for (int g = 0; g < count; ++g) {
    ir::Graph& graph = t.graphs.emplace_back();
    for (int k = 0; k < 12; ++k) {
      NodeId at = input(graph, 2);
      for (int i = 0; i < 2 + (g * 7 + k * 3) % 6; ++i) at = op(graph, Op::tanh, {at});
    }
  }
  for (const ir::Graph& graph : t.graphs) t.types.push_back(t.table.assign(graph));
  return t;
}

TEST(LearnedPolicy, FallsBackToGreedyExactlyWhereItCannotWinAndSaysSo) {
  const Traces training = chain_traces(4);
  const std::vector<ScheduleInput> inputs = training.inputs();
  ImitationPolicy policy;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(50);
  const LearnedReport report = policy.train(inputs, options);
  EXPECT_TRUE(report.greedy_fallback) << report.stop_reason;
  EXPECT_TRUE(policy.greedy_fallback());
  EXPECT_EQ(report.batches, report.greedy_batches);
  EXPECT_NE(report.stop_reason.find("falls back to greedy exactly"), std::string::npos) << report.stop_reason;
  for (const ScheduleInput& in : inputs) {
    GreedyPolicy greedy;
    Schedule a, b;
    policy.schedule(in, a);
    greedy.schedule(in, b);
    EXPECT_EQ(a.nodes, b.nodes);
    EXPECT_EQ(a.batch_type, b.batch_type);
  }
  EXPECT_EQ(policy.greedy_schedules(), int64_t(inputs.size()));

  // A table that wins keeps itself, and says it did not fall back.
  const Traces random = random_traces(10, 6);
  ImitationPolicy winner;
  options.search.budget = std::chrono::milliseconds(300);
  const LearnedReport won = winner.train(random.inputs(), options);
  EXPECT_FALSE(won.greedy_fallback) << won.stop_reason;
  EXPECT_LT(won.batches, won.greedy_batches);
}

// On every training trace: a valid schedule with no more batches than greedy's, fewer over all, on
// a trained table and on the same table read back from its file.
TEST(LearnedPolicy, ReadBackItNeverNeedsMoreBatchesThanGreedyOnItsTrainingTraces) {
  const Traces training = random_traces(20, 5);
  const std::vector<ScheduleInput> inputs = training.inputs();
  ImitationPolicy trained;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(300);
  options.heldout_fraction = 0;
  const LearnedReport report = trained.train(inputs, options);
  testing::TempDir dir;
  const std::string path = dir.path() + "/learned.policy";
  trained.save(path);
  ImitationPolicy loaded;
  loaded.load(path);
  EXPECT_EQ(loaded.report().greedy_fallback, report.greedy_fallback);
  EXPECT_EQ(loaded.report().batches, report.batches);
  EXPECT_EQ(int(loaded.base()), int(trained.base()));
  int64_t learned_total = 0, greedy_total = 0;
  for (const ScheduleInput& in : inputs) {
    Schedule s;
    loaded.schedule(in, s);
    verify(in, s);
    EXPECT_LE(int64_t(s.batch_count()), greedy_count(in));
    learned_total += int64_t(s.batch_count());
    greedy_total += greedy_count(in);
  }
  EXPECT_EQ(learned_total, report.batches);
  if (!report.greedy_fallback) {
    EXPECT_LT(learned_total, greedy_total);
  }
}

TEST(LearnedPolicy, ADamagedFileIsRefusedNamingIt) {
  const Traces training = random_traces(10, 3);
  ImitationPolicy trained;
  ImitationTraining options;
  options.search.budget = std::chrono::milliseconds(100);
  trained.train(training.inputs(), options);
  testing::TempDir dir;
  const std::string path = dir.path() + "/learned.policy";
  trained.save(path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});

  // A changed value: the checksum no longer matches.
  std::string changed = text;
  const size_t at = changed.find("\"greedy_batches\": ");
  ASSERT_NE(at, std::string::npos);
  changed.insert(at + 18, "1");
  const std::string damaged = dir.path() + "/damaged.policy";
  std::ofstream(damaged) << changed;
  std::string what = load_error(damaged);
  EXPECT_NE(what.find(damaged), std::string::npos) << what;
  EXPECT_NE(what.find("checksum mismatch"), std::string::npos) << what;

  // Cut short: not JSON any more.
  const std::string truncated = dir.path() + "/truncated.policy";
  std::ofstream(truncated) << text.substr(0, text.size() / 2);
  what = load_error(truncated);
  EXPECT_NE(what.find(truncated), std::string::npos) << what;

  // The policy keeps what it had: a failed load changes nothing.
  ImitationPolicy policy;
  policy.load(path);
  EXPECT_THROW(policy.load(damaged), UsageError);
  EXPECT_EQ(policy.state_count(), trained.state_count());
}

TEST(SearchPolicy, CachesByStructureAndShiftsToTheRange) {
  const ir::Graph one = random_dag(5, 30, 6);
  ir::Graph two = random_dag(5, 30, 6);  // the same structure
  ir::SignatureTable table;
  const std::vector<ir::TypeId> types_one = table.assign(one);
  const std::vector<ir::TypeId> types_two = table.assign(two);
  const ScheduleInput a{one, types_one, 0, nullptr, &table}, b{two, types_two, 0, nullptr, &table};
  EXPECT_EQ(structure_key(a), structure_key(b));
  const ir::Graph different = random_dag(6, 30, 6);
  const std::vector<ir::TypeId> types_different = table.assign(different);
  const ScheduleInput c{different, types_different, 0, nullptr, &table};
  EXPECT_NE(structure_key(a), structure_key(c));

  SearchPolicy policy;
  Schedule first, second, third;
  policy.schedule(a, first);
  policy.schedule(b, second);
  policy.schedule(c, third);
  verify(a, first);
  verify(b, second);
  verify(c, third);
  EXPECT_EQ(policy.searches(), 2);
  EXPECT_EQ(policy.cache_hits(), 1);
  EXPECT_EQ(first.nodes, second.nodes);
  EXPECT_LE(int64_t(first.batch_count()), greedy_count(a));
}

}  // namespace
}  // namespace edb::scheduler
