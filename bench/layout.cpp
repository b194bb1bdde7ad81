// edb-bench-layout: what the PQ-tree layout planner saves. Records traces of a sample model, runs
// each once through an Engine (greedy, batch-order plan) for its run time, then schedules it with
// greedy and plans it both ways: predicted bytes gathered per instance, the cut, and planning time.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <edbatch/edbatch.h>

#include "memplan/layout.h"
#include "memplan/plan.h"
#include "samples/models.h"
#include "scheduler/schedule.h"
#include "tools/flags.h"
#include "trace/state.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-layout", {"model", "data", "batch", "traces", "rounds"}, {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-layout [--model treelstm] [--data FILE] [--batch 64] [--traces 4] [--rounds 5]\n"
        "Predicted bytes gathered per instance with the batch-order plan and the PQ-tree layout,\n"
        "and the layout's planning time (fastest of --rounds) against the trace's run time.\n");
    return 0;
  }
  const std::string name = flags.get("model", "treelstm");
  const int batch = int(flags.get_int("batch", 64, 1, 1 << 16));
  const int traces = int(flags.get_int("traces", 4, 1, 1000));
  const int rounds = int(flags.get_int("rounds", 5, 1, 1000));
  auto model = edb::samples::make_default_model(name, flags.get("data", ""), "edb-bench-layout");
  std::printf("%s: %s; batch %d, %d traces, greedy schedule, no cells\n", name.c_str(), model->describe_data().c_str(),
              batch, traces);

  edb::EngineOptions options;
  options.policy = "greedy";
  options.cells = false;  // node by node: the graph the planner sees
  edb::Engine engine(options);
  auto policy = edb::scheduler::make_policy("greedy");
  int64_t instances = 0, before = 0, after = 0, measured = 0, tried = 0, kept = 0, misaligned = 0;
  double run_ms = 0, layout_ms = 0, batch_order_ms = 0;
  const size_t count = model->instance_count();
  for (int t = 0; t < traces; ++t) {
    edb::Trace trace(engine);
    std::vector<edb::Expr> losses;
    for (int i = 0; i < batch; ++i) losses.push_back(model->record_loss(trace, (size_t(t) * batch + i) % count));
    edb::sum(losses);
    engine.reset_stats();
    const auto start = Clock::now();
    trace.run();
    run_ms += ms_since(start);
    measured += engine.stats().bytes_gathered;
    instances += batch;

    edb::detail::TraceState& state = edb::detail::TraceState::of(losses[0], "edb-bench-layout");
    const edb::ir::Graph& graph = state.data.graph;
    edb::scheduler::ScheduleInput input{graph, state.data.types, 0, nullptr, &state.engine->driver.signatures};
    edb::scheduler::Schedule schedule;
    policy->schedule(input, schedule);

    edb::memplan::Plan batch_order;
    auto t0 = Clock::now();
    edb::memplan::plan_batch_order(graph, schedule, batch_order);
    batch_order_ms += ms_since(t0);
    before += edb::memplan::operand_modes(graph, schedule, batch_order).bytes_gathered;

    double fastest = 1e300;
    edb::memplan::LayoutStats stats;
    for (int r = 0; r < rounds; ++r) {
      edb::scheduler::Schedule reordered = schedule;
      edb::memplan::Plan layout;
      edb::memplan::plan_layout(graph, reordered, layout, &stats);
      fastest = std::min(fastest, stats.plan_ms);
      edb::memplan::verify(graph, layout);
      edb::scheduler::verify(input, reordered);
    }
    layout_ms += fastest;
    after += stats.bytes_gathered;
    tried += stats.constraints_tried;
    kept += stats.constraints_kept;
    misaligned += stats.operands_misaligned;
  }
  const double n = double(instances);
  std::printf("bytes gathered per instance: batch order %.0f (executor measured %.0f), layout %.0f: cut %.1f%%\n",
              double(before) / n, double(measured) / n, double(after) / n,
              before > 0 ? 100.0 * double(before - after) / double(before) : 0.0);
  std::printf("constraints per trace: %.0f tried, %.0f kept, %.0f kept but misaligned\n", double(tried) / traces,
              double(kept) / traces, double(misaligned) / traces);
  std::printf("per trace: run %.2f ms (greedy, batch order), layout planning %.3f ms = %.1f%% of the run "
              "(batch-order planning %.3f ms)\n",
              run_ms / traces, layout_ms / traces, 100.0 * layout_ms / run_ms, batch_order_ms / traces);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-layout", run, argc, argv); }
