// edb-bench-fsm: what a learned-policy decision costs. Learns the fsm policy on a model's traces,
// then schedules held-out traces with it, and replays the same schedules through the frontier
// alone: the difference per decision is the policy's own cost (encoding the state, the table
// lookup, the choice), which docs/design.md wants under 100 ns.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "samples/runner.h"
#include "scheduler/fsm.h"
#include "tools/flags.h"
#include "trace/state.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-fsm", {"model", "data", "batch", "traces", "rounds"}, {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf("usage: edb-bench-fsm [--model treelstm] [--data FILE] [--batch 64] [--traces 8] [--rounds 100]\n");
    return 0;
  }
  const std::string name = flags.get("model", "treelstm");
  const int batch = int(flags.get_int("batch", 64, 1, 1 << 16));
  const int traces = int(flags.get_int("traces", 8, 1, 1000));
  const int rounds = int(flags.get_int("rounds", 100, 1, 10000));
  auto model = edb::samples::make_default_model(name, flags.get("data", ""), "edb-bench-fsm");

  edb::EngineOptions options;
  options.policy = "fsm";
  edb::Engine engine(options);
  const auto start = Clock::now();
  const edb::PolicyProgress learned = edb::samples::train_policy(*model, engine, traces, batch, {});
  const double training = seconds_since(start);

  // A held-out trace: the instances after the training ones.
  edb::Trace trace(engine);
  std::vector<edb::Expr> losses;
  const size_t count = model->instance_count();
  for (int i = 0; i < batch; ++i) losses.push_back(model->record_loss(trace, (size_t(traces) * batch + i) % count));
  edb::sum(losses);
  auto* state = edb::detail::TraceState::of(losses[0], "edb-bench-fsm").engine;
  edb::runtime::TraceData& data = edb::detail::TraceState::of(losses[0], "edb-bench-fsm").data;
  edb::scheduler::ScheduleInput input{data.graph, data.types, 0, nullptr, &state->driver.signatures};
  edb::scheduler::Analysis analysis;
  analysis.build(input);
  input.analysis = &analysis;

  edb::scheduler::FsmPolicy policy;
  const std::string file = "/tmp/edb-bench-fsm.policy";
  engine.save_policy(file);
  policy.load(file);
  std::remove(file.c_str());

  edb::scheduler::Schedule schedule;
  std::vector<double> with_policy, replay;
  edb::scheduler::TypewiseFrontier frontier;
  std::vector<uint32_t> local_of_batch;
  for (int r = 0; r < rounds; ++r) {
    auto t = Clock::now();
    policy.schedule(input, schedule);
    with_policy.push_back(seconds_since(t));
    if (local_of_batch.empty())
      for (edb::ir::TypeId type : schedule.batch_type)
        local_of_batch.push_back(uint32_t(std::find(analysis.types.global.begin(), analysis.types.global.end(), type) -
                                          analysis.types.global.begin()));
    edb::scheduler::Schedule replayed;
    t = Clock::now();
    frontier.reset(input, analysis);
    for (uint32_t local : local_of_batch) frontier.run(local, replayed);
    replay.push_back(seconds_since(t));
  }
  std::sort(with_policy.begin(), with_policy.end());
  std::sort(replay.begin(), replay.end());
  const double decisions = double(schedule.batch_count());
  // Fastest of the rounds: the least disturbed by the rest of the machine.
  const double per_decision = (with_policy.front() - replay.front()) / decisions * 1e9;
  std::printf("%s: learned from %d traces of %d in %.2f s (%d episodes, best %lld batches, LB %lld)\n", name.c_str(),
              traces, batch, training, learned.episode, (long long)learned.best_batches, (long long)learned.lower_bound);
  std::printf("held-out trace: %zu nodes, %.0f decisions, unseen %.1f%%\n", data.graph.size(), decisions,
              100.0 * double(policy.unseen()) / double(std::max<int64_t>(1, policy.decisions())));
  std::printf("scheduling with the policy %.1f us, replaying its schedule %.1f us (fastest of %d)\n",
              with_policy.front() * 1e6, replay.front() * 1e6, rounds);
  std::printf("policy decision: %.1f ns on average (target < 100 ns)\n", per_decision);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-fsm", run, argc, argv); }
