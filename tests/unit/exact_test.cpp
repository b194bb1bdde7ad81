// The branch-and-bound scheduler (scheduler/exact.h): its batch count equals an exhaustive
// breadth-first search's on random small graphs, its schedules pass the checker, and with a tiny
// time cap or too many nodes it still returns a valid schedule no worse than greedy's.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "ir/ir.h"
#include "ir/signature.h"
#include "scheduler/exact.h"
#include "scheduler/lower_bound.h"
#include "scheduler/policies.h"
#include "tests/support/graph_builder.h"

namespace edb::scheduler {
namespace {

using ir::NodeId;
using ir::Op;
using ir::Shape;

using testing::input;
using testing::op;

// A random DAG of `ops` unary and binary elementwise ops over a few inputs of two sizes, so that
// types repeat on different paths and orders matter.
ir::Graph random_dag(uint64_t seed, int ops) {
  std::mt19937_64 rng(seed);
  ir::Graph graph;
  std::vector<NodeId> by_rows[2];
  for (int i = 0; i < 3; ++i) by_rows[i % 2].push_back(input(graph, i % 2 ? 4 : 2));
  const Op unary[] = {Op::tanh, Op::sigmoid, Op::relu};
  for (int i = 0; i < ops; ++i) {
    std::vector<NodeId>& pool = by_rows[rng() % 2];
    // Prefer recent nodes, so chains grow.
    auto pick = [&] { return pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 4)]; };
    const NodeId made = rng() % 3 == 0 ? op(graph, Op::add, {pick(), pick()}) : op(graph, unary[rng() % 3], {pick()});
    pool.push_back(made);
  }
  return graph;
}

// The fewest batches by breadth-first search over every reachable frontier state.
size_t exhaustive_fewest_batches(const ir::Graph& graph, const std::vector<ir::TypeId>& types) {
  std::vector<NodeId> nodes;
  for (NodeId id = 0; id < graph.size(); ++id)
    if (types[id] != ir::kNoType) nodes.push_back(id);
  using State = uint64_t;  // bit k: nodes[k] has run
  auto index_of = [&](NodeId id) { return size_t(std::find(nodes.begin(), nodes.end(), id) - nodes.begin()); };
  const State all = nodes.size() == 64 ? ~0ull : (1ull << nodes.size()) - 1;
  std::set<State> layer{0}, seen{0};
  for (size_t depth = 0;; ++depth) {
    if (layer.count(all)) return depth;
    std::set<State> next;
    for (State s : layer) {
      std::vector<std::pair<ir::TypeId, State>> runs;
      for (size_t k = 0; k < nodes.size(); ++k) {
        if (s >> k & 1) continue;
        bool ready = true;
        for (NodeId arg : graph.args(nodes[k]))
          if (types[arg] != ir::kNoType && !(s >> index_of(arg) & 1)) ready = false;
        if (!ready) continue;
        auto it = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r.first == types[nodes[k]]; });
        if (it == runs.end()) runs.emplace_back(types[nodes[k]], s | 1ull << k);
        else it->second |= 1ull << k;
      }
      for (const auto& [type, to] : runs)
        if (seen.insert(to).second) next.insert(to);
    }
    layer = std::move(next);
  }
}

TEST(ExactScheduler, EqualsExhaustiveSearchOnRandomSmallGraphs) {
  int better_than_greedy = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const ir::Graph graph = random_dag(seed, 12 + int(seed % 8));
    ir::SignatureTable table;
    const std::vector<ir::TypeId> types = table.assign(graph);
    const ScheduleInput in{graph, types};
    const ExactResult result = schedule_fewest_batches(in);
    verify(in, result.schedule);
    ASSERT_TRUE(result.optimal) << "seed " << seed;
    EXPECT_EQ(result.schedule.batch_count(), exhaustive_fewest_batches(graph, types)) << "seed " << seed;
    EXPECT_GE(int64_t(result.schedule.batch_count()), lower_bound(in)) << "seed " << seed;
    EXPECT_LE(int64_t(result.schedule.batch_count()), result.greedy_batches) << "seed " << seed;
    if (int64_t(result.schedule.batch_count()) < result.greedy_batches) ++better_than_greedy;
  }
  // The search is worth having: on some of these graphs greedy is not optimal.
  EXPECT_GT(better_than_greedy, 0);
}

TEST(ExactScheduler, TimeCapAndSizeCapReturnValidSchedulesNoWorseThanGreedy) {
  const ir::Graph graph = random_dag(7, 400);
  ir::SignatureTable table;
  const std::vector<ir::TypeId> types = table.assign(graph);
  const ScheduleInput in{graph, types};

  ExactSearch capped;
  capped.time_cap = std::chrono::microseconds(1);
  const ExactResult timed_out = schedule_fewest_batches(in, capped);
  verify(in, timed_out.schedule);
  EXPECT_FALSE(timed_out.optimal);
  EXPECT_LE(int64_t(timed_out.schedule.batch_count()), timed_out.greedy_batches);

  ExactSearch small;
  small.max_nodes = 100;
  const ExactResult too_big = schedule_fewest_batches(in, small);
  verify(in, too_big.schedule);
  EXPECT_FALSE(too_big.optimal);
  EXPECT_EQ(int64_t(too_big.schedule.batch_count()), too_big.greedy_batches);
  EXPECT_EQ(too_big.states_explored, 0);
}

}  // namespace
}  // namespace edb::scheduler
