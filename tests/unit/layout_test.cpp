// The PQ-tree layout planner: a hand-made graph whose ideal layout is known; random DAGs and every
// sample model planned with it must keep the plan and schedule contracts, gather no more than the
// batch order, and run through the batched executor to the reference values with exactly the
// bytes gathered that operand_modes predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "ir/ir.h"
#include "ir/signature.h"
#include "memplan/layout.h"
#include "memplan/plan.h"
#include "runtime/batched.h"
#include "runtime/executor.h"
#include "samples/models.h"
#include "scheduler/schedule.h"
#include "tests/support/random_graph.h"
#include "trace/state.h"

namespace edb::memplan {
namespace {

// Every batch's outputs consecutive in member order (views excepted), the executor's contract C1.
void expect_outputs_consecutive(const ir::Graph& graph, const scheduler::Schedule& schedule, const Plan& plan) {
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto members = schedule.batch(b);
    if (plan.is_view(members[0])) continue;
    const int64_t size = graph.node(members[0]).shape.size();
    for (size_t k = 1; k < members.size(); ++k)
      ASSERT_EQ(plan.offset[members[k]], plan.offset[members[0]] + int64_t(k) * size) << "batch " << b;
  }
}

// Brute force, written apart from layout.cpp: the mode of each slot the executor classifies from
// the real addresses (arena values at arena + offset), run_linear's early stop included; a slot
// mixing arena values and leaves is gathered, whatever their distance.
struct BruteMode {
  OperandMode mode;
  bool mixed;
};
std::vector<std::vector<BruteMode>> brute_force_modes(const ir::Graph& graph, const scheduler::Schedule& schedule,
                                                      const Plan& plan, const float* arena, int64_t& bytes) {
  std::vector<std::vector<BruteMode>> out(schedule.batch_count());
  bytes = 0;
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    const auto members = schedule.batch(b);
    const ir::Node& first = graph.node(members[0]);
    out[b].assign(first.arg_count, {OperandMode::unread, false});
    if (plan.is_view(members[0]) || first.op == ir::Op::lookup) continue;
    auto classify = [&](size_t slot) {
      std::vector<const float*> at;
      bool in_arena = false, leaf = false;
      for (ir::NodeId m : members) {
        const ir::NodeId a = graph.args(m)[slot];
        at.push_back(plan.offset[a] >= 0 ? arena + plan.offset[a] : graph.leaf_data(a));
        (plan.offset[a] >= 0 ? in_arena : leaf) = true;
      }
      const ir::Shape shape = graph.node(graph.args(members[0])[slot]).shape;
      OperandMode mode = OperandMode::contiguous;
      if (at.size() > 1) {
        const int64_t stride = at[1] - at[0];
        bool regular = stride == 0 || (stride >= shape.size() && (shape.cols == 1 || stride == shape.size()));
        for (size_t k = 2; k < at.size() && regular; ++k) regular = at[k] == at[0] + int64_t(k) * stride;
        mode = !regular || (in_arena && leaf) ? OperandMode::gather : stride == 0 ? OperandMode::shared : OperandMode::contiguous;
      }
      if (mode == OperandMode::gather) bytes += 4 * shape.size() * int64_t(at.size());
      out[b][slot] = {mode, in_arena && leaf};
      return mode;
    };
    const bool linear = first.op == ir::Op::matmul || first.op == ir::Op::affine || first.op == ir::Op::matvec;
    if (!linear) {
      for (size_t slot = 0; slot < first.arg_count; ++slot) classify(slot);
      continue;
    }
    const size_t products = first.op == ir::Op::affine ? 1 : 0;
    if (products == 1) classify(0);
    for (size_t slot = products; slot + 1 < first.arg_count; slot += 2) {
      const bool one_weight = classify(slot) == OperandMode::shared || members.size() == 1;
      if (first.op == ir::Op::matvec || !one_weight) break;
      classify(slot + 1);
    }
  }
  return out;
}

// Runs the batched executor on the plan with a real arena: it must reproduce the reference
// executor's values (planned with the batch order) and gather no more than the brute force says, and
// operand_modes must agree with the brute force wherever a slot does not mix arena and leaves.
void expect_runs_like_reference(const ir::Graph& graph, const scheduler::Schedule& layout_schedule,
                                const Plan& layout, const scheduler::Schedule& reference_schedule,
                                const Plan& reference) {
  std::vector<float> arena(size_t(layout.arena_floats) + 1), reference_arena(size_t(reference.arena_floats) + 1);
  runtime::BatchedExecutor batched(1);
  Stats stats;
  batched.execute(layout_schedule, runtime::Values{graph, layout, arena.data()}, stats);
  int64_t brute_bytes = 0;
  const auto brute = brute_force_modes(graph, layout_schedule, layout, arena.data(), brute_bytes);
  // The executor reads strided runs inside a gathered slot in place and counts only the rest, so
  // it gathers at most what the slot-level brute force says.
  EXPECT_LE(stats.bytes_gathered, brute_bytes);
  const OperandModes modes = operand_modes(graph, layout_schedule, layout);
  for (size_t b = 0; b < layout_schedule.batch_count(); ++b)
    for (size_t slot = 0; slot < brute[b].size(); ++slot)
      EXPECT_EQ(modes.batch(b)[slot], brute[b][slot].mode) << "batch " << b << " slot " << slot
                                                           << (brute[b][slot].mixed ? " (arena values and leaves)" : "");
  EXPECT_GE(modes.bytes_gathered, brute_bytes);
  // The executor copies at most what the planner predicts (neither runs an arena value and a leaf
  // together).
  EXPECT_LE(stats.bytes_gathered, modes.bytes_copied);
  EXPECT_LE(modes.bytes_copied, modes.bytes_gathered);
  runtime::ReferenceExecutor oracle;
  Stats ignored;
  oracle.execute(reference_schedule, runtime::Values{graph, reference, reference_arena.data()}, ignored);
  for (ir::NodeId id : layout_schedule.nodes) {
    const int64_t size = graph.node(id).shape.size();
    for (int64_t i = 0; i < size; ++i) {
      const float want = reference_arena[size_t(reference.offset[id] + i)];
      const float got = arena[size_t(layout.offset[id] + i)];
      ASSERT_NEAR(got, want, 1e-4f * (1.0f + std::fabs(want))) << "node %" << id << " element " << i;
    }
  }
}

// Plans a recorded graph both ways and checks every contract; returns the layout's stats.
LayoutStats check_both_plans(const ir::Graph& graph, std::span<const ir::TypeId> types, const std::string& policy) {
  scheduler::ScheduleInput input{graph, types, 0, nullptr, nullptr};
  scheduler::Schedule schedule;
  scheduler::make_policy(policy)->schedule(input, schedule);
  scheduler::verify(input, schedule);

  Plan batch_order;
  plan_batch_order(graph, schedule, batch_order);
  const OperandModes before = operand_modes(graph, schedule, batch_order);

  scheduler::Schedule reordered = schedule;
  Plan layout;
  LayoutStats stats;
  plan_layout(graph, reordered, layout, &stats);
  EXPECT_NO_THROW(scheduler::verify(input, reordered));
  EXPECT_NO_THROW(verify(graph, layout));
  expect_outputs_consecutive(graph, reordered, layout);
  EXPECT_EQ(reordered.batch_count(), schedule.batch_count());
  for (size_t b = 0; b < schedule.batch_count(); ++b) {
    std::vector<ir::NodeId> was(schedule.batch(b).begin(), schedule.batch(b).end());
    std::vector<ir::NodeId> now(reordered.batch(b).begin(), reordered.batch(b).end());
    std::sort(was.begin(), was.end());
    std::sort(now.begin(), now.end());
    EXPECT_EQ(was, now) << "batch " << b << " changed members";
  }
  for (ir::NodeId id : schedule.nodes) EXPECT_EQ(layout.is_view(id), batch_order.is_view(id)) << "node %" << id;
  const OperandModes after = operand_modes(graph, reordered, layout);
  EXPECT_EQ(after.bytes_gathered, stats.bytes_gathered);
  EXPECT_EQ(before.bytes_gathered, stats.bytes_gathered_batch_order);
  EXPECT_EQ(after.bytes_copied, stats.bytes_copied);
  EXPECT_EQ(before.bytes_copied, stats.bytes_copied_batch_order);
  // Never worse than the batch order in what the executor copies (then in whole gathered slots).
  EXPECT_LE(std::pair(after.bytes_copied, after.bytes_gathered), std::pair(before.bytes_copied, before.bytes_gathered));
  EXPECT_EQ(stats.constraints_tried, stats.constraints_kept + stats.constraints_dropped);
  expect_runs_like_reference(graph, reordered, layout, schedule, batch_order);
  return stats;
}

// ---- A hand-made graph: chains batched level by level ----

// `chains` chains of `length` tanh nodes over one input each, scheduled one batch per level with
// the members' order reversed at every other level, so that the batch order reads every operand
// of those levels backwards (gathered) while a layout can line all of them up.
struct Chains {
  ir::Graph graph;
  std::vector<ir::TypeId> types;
  scheduler::Schedule schedule;
};

Chains make_chains(int chains, int length) {
  Chains c;
  const ir::Shape shape{4, 1};
  std::vector<ir::NodeId> last;
  for (int i = 0; i < chains; ++i) {
    ir::Attributes attrs;
    const std::vector<float> values(4, float(i));
    attrs.index = c.graph.add_constants(values);
    last.push_back(c.graph.add(ir::Op::input, {}, shape, attrs));
  }
  std::vector<std::vector<ir::NodeId>> levels;
  for (int level = 0; level < length; ++level) {
    std::vector<ir::NodeId>& members = levels.emplace_back();
    for (int i = 0; i < chains; ++i) {
      const ir::NodeId arg = last[size_t(i)];
      last[size_t(i)] = c.graph.add(ir::Op::tanh, std::span(&arg, 1), shape);
      members.push_back(last[size_t(i)]);
    }
    if (level % 2 == 1) std::reverse(members.begin(), members.end());
  }
  ir::SignatureTable signatures;
  c.types = signatures.assign(c.graph);
  for (const auto& members : levels) c.schedule.add_batch(c.types[members[0]], members);
  return c;
}

TEST(LayoutChains, EveryOperandContiguousAfterPlanningAndGatheredBefore) {
  Chains c = make_chains(5, 6);
  ir::verify(c.graph);
  scheduler::verify({c.graph, c.types, 0, nullptr, nullptr}, c.schedule);

  Plan batch_order;
  plan_batch_order(c.graph, c.schedule, batch_order);
  const OperandModes before = operand_modes(c.graph, c.schedule, batch_order);
  // Levels 1..5 read the level before in the opposite order: a negative stride, gathered.
  for (size_t b = 1; b < c.schedule.batch_count(); ++b) EXPECT_EQ(before.batch(b)[0], OperandMode::gather) << b;
  EXPECT_EQ(before.bytes_gathered, 5 * 4 * 4 * 5);

  scheduler::Schedule schedule = c.schedule;
  Plan layout;
  LayoutStats stats;
  plan_layout(c.graph, schedule, layout, &stats);
  verify(c.graph, layout);
  expect_outputs_consecutive(c.graph, schedule, layout);
  const OperandModes after = operand_modes(c.graph, schedule, layout);
  for (size_t b = 1; b < schedule.batch_count(); ++b) EXPECT_EQ(after.batch(b)[0], OperandMode::contiguous) << b;
  EXPECT_EQ(after.bytes_gathered, 0);
  EXPECT_EQ(stats.bytes_gathered, 0);
  EXPECT_FALSE(stats.kept_batch_order);
  EXPECT_EQ(stats.constraints_dropped, 0);
  EXPECT_EQ(stats.operands_misaligned, 0);
  EXPECT_EQ(layout.arena_floats, 5 * 6 * 4);
  expect_runs_like_reference(c.graph, schedule, layout, c.schedule, batch_order);
}

TEST(LayoutChains, ExtendsAPlanThatCoversEarlierNodes) {
  Chains c = make_chains(3, 4);
  // Plan the first two levels with the batch order, then lay out the last two after them.
  scheduler::Schedule first, rest;
  for (size_t b = 0; b < c.schedule.batch_count(); ++b)
    (b < 2 ? first : rest).add_batch(c.schedule.batch_type[b], c.schedule.batch(b));
  Plan plan;
  plan_batch_order(c.graph, first, plan);
  const int64_t planned = plan.arena_floats;
  LayoutStats stats;
  plan_layout(c.graph, rest, plan, &stats);
  verify(c.graph, plan);
  expect_outputs_consecutive(c.graph, rest, plan);
  for (ir::NodeId id : rest.nodes) EXPECT_GE(plan.offset[id], planned);
  EXPECT_EQ(plan.arena_floats, planned + 2 * 3 * 4);
  // Level 3 reads level 2, both laid out now: in order. Level 2 reads the earlier plan as it is.
  EXPECT_EQ(operand_modes(c.graph, rest, plan).batch(1)[0], OperandMode::contiguous);
}

TEST(OperandModes, FollowsTheExecutorsRule) {
  Chains c = make_chains(3, 2);
  Plan plan;
  plan_batch_order(c.graph, c.schedule, plan);
  // Level 0 reads three inputs copied one after another into the constant pool: contiguous.
  EXPECT_EQ(operand_modes(c.graph, c.schedule, plan).batch(0)[0], OperandMode::contiguous);
  const auto level1 = c.schedule.batch(1);
  // Members 4 floats apart, then a larger stride for a column vector: still contiguous (strided).
  for (size_t k = 0; k < 3; ++k) plan.offset[c.graph.args(level1[k])[0]] = 100 + 8 * int64_t(k);
  EXPECT_EQ(operand_modes(c.graph, c.schedule, plan).batch(1)[0], OperandMode::contiguous);
  // Overlapping members (stride below the size) and uneven strides are gathered.
  for (size_t k = 0; k < 3; ++k) plan.offset[c.graph.args(level1[k])[0]] = 100 + 2 * int64_t(k);
  EXPECT_EQ(operand_modes(c.graph, c.schedule, plan).batch(1)[0], OperandMode::gather);
  plan.offset[c.graph.args(level1[2])[0]] = 200;
  const OperandModes modes = operand_modes(c.graph, c.schedule, plan);
  EXPECT_EQ(modes.batch(1)[0], OperandMode::gather);
  EXPECT_EQ(modes.bytes_gathered, 4 * 4 * 3);
}

// ---- Random DAGs and sample models ----

TEST(LayoutRandomGraphs, KeepsTheContractsAndNeverGathersMore) {
  testing::RandomGraphModel model;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Engine engine;
    Trace trace(engine);
    const testing::RandomGraph recorded = testing::record_random_graph(trace, model, seed);
    auto& state = detail::TraceState::of(recorded.compared[0], "layout_test");
    ir::verify(state.data.graph);
    check_both_plans(state.data.graph, state.data.types, seed % 2 ? "greedy" : "agenda");
  }
}

TEST(LayoutSampleModels, KeepsTheContractsAndNeverGathersMore) {
  for (const samples::ModelEntry& entry : samples::model_registry()) {
    SCOPED_TRACE(entry.name);
    samples::ModelConfig config;
    config.limit = 12;
    config.embed = 8;
    config.hidden = 8;
    auto sample = entry.make(config);
    EngineOptions options;
    options.cells = false;  // the graph node by node, as the planner sees it without cells
    Engine engine(options);
    Trace trace(engine);
    std::vector<Expr> losses;
    for (size_t i = 0; i < sample->instance_count(); ++i) losses.push_back(sample->record_loss(trace, i));
    auto& state = detail::TraceState::of(losses[0], "layout_test");
    ASSERT_EQ(state.data.types.size(), state.data.graph.size());
    const LayoutStats stats = check_both_plans(state.data.graph, state.data.types, "greedy");
    EXPECT_GT(stats.constraints_kept, 0);
  }
}

}  // namespace
}  // namespace edb::memplan
