// edb-bench-search: the learned policy's batch targets (issue 19) on one model. Trains the learned
// policy on the first --train-traces traces, then on the next --test-traces (not trained on)
// compares batches against the lower bound for greedy, the tight-first rule, the learned table and
// the search itself, and the cost of a decision beyond greedy's: the analysis each reads and its
// schedule, per decision, with where the learned policy's time goes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <fstream>

#include <edbatch/edbatch.h>

#include "samples/models.h"
#include "samples/runner.h"
#include "scheduler/imitation.h"
#include "scheduler/lower_bound.h"
#include "scheduler/policies.h"
#include "scheduler/search.h"
#include "tools/flags.h"
#include "trace/state.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace sch = edb::scheduler;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }


// Fastest of `rounds` schedules of `input` by `policy`, minus the fastest replay of the schedule
// through the typewise frontier, per batch.
double nanoseconds_per_decision(sch::Policy& policy, const sch::ScheduleInput& input, const sch::Analysis& analysis,
                                int rounds) {
  sch::Schedule schedule;
  double best_schedule = 1e30, best_replay = 1e30;
  std::vector<uint32_t> local;
  for (int r = 0; r < rounds; ++r) {
    auto t = Clock::now();
    policy.schedule(input, schedule);
    best_schedule = std::min(best_schedule, seconds_since(t));
    if (local.empty())
      for (edb::ir::TypeId type : schedule.batch_type)
        local.push_back(uint32_t(std::find(analysis.types.global.begin(), analysis.types.global.end(), type) -
                                 analysis.types.global.begin()));
    sch::TypewiseFrontier frontier;
    sch::Schedule replayed;
    t = Clock::now();
    frontier.reset(input, analysis);
    for (uint32_t l : local) frontier.run(l, replayed);
    best_replay = std::min(best_replay, seconds_since(t));
  }
  return (best_schedule - best_replay) / double(std::max<size_t>(schedule.batch_count(), 1)) * 1e9;
}

// What a decision costs beyond greedy's, all told: per trace the driver builds the analysis the
// policy reads (Policy::chains()) and the policy schedules. Both timed for the policy and for greedy,
// interleaved, the fastest of `rounds` each, the difference over the policy's decisions; and the
// analyses' part of it. With `cold`, each is timed after 64 MiB of other writes have evicted the
// caches, as in an engine, where recording and execution run between two schedules.
struct Cost {
  double all_told_ns = 0, analysis_ns = 0;
};
Cost all_told_per_decision(sch::Policy& policy, const sch::ScheduleInput& without_analysis, int rounds, bool cold) {
  static std::vector<char> other(size_t{64} << 20);
  auto evict = [&] {
    if (cold)
      for (size_t k = 0; k < other.size(); k += 64) ++other[k];
  };
  sch::Schedule schedule;
  // One analysis each, as each engine's driver keeps one (built the same way every trace).
  sch::Analysis analysis, greedy_own;
  sch::GreedyPolicy greedy;
  sch::ScheduleInput input = without_analysis, greedy_input = without_analysis;
  input.analysis = &analysis;
  greedy_input.analysis = &greedy_own;
  double best_policy = 1e30, best_greedy = 1e30, policy_analysis = 1e30, greedy_analysis = 1e30;
  for (int r = 0; r < rounds; ++r) {
    evict();
    auto t = Clock::now();
    greedy_own.build(greedy_input, greedy.chains());
    greedy_analysis = std::min(greedy_analysis, seconds_since(t));
    greedy.schedule(greedy_input, schedule);
    best_greedy = std::min(best_greedy, seconds_since(t));
    evict();
    t = Clock::now();
    analysis.build(input, policy.chains());
    policy_analysis = std::min(policy_analysis, seconds_since(t));
    policy.schedule(input, schedule);
    best_policy = std::min(best_policy, seconds_since(t));
  }
  const double per = 1e9 / double(std::max<size_t>(schedule.batch_count(), 1));
  return {(best_policy - best_greedy) * per, (policy_analysis - greedy_analysis) * per};
}

// Where the learned policy's time goes beyond its analysis, per decision (fastest of `rounds`):
// the chain heights (from an analysis built its way: when that holds the heights, only the weights,
// terminal types and remaining batches), and replaying its schedule through the tight frontier
// beyond a replay through greedy's (the typewise frontier with its counts).
struct Breakdown {
  double heights_ns = 0, tight_frontier_ns = 0;
  double ranks_pass_ns = 0, heights_pass_ns = 0;  // the analysis's chain pass each way, per decision
};
Breakdown learned_breakdown(sch::ImitationPolicy& policy, const sch::ScheduleInput& without_analysis, int rounds) {
  sch::Analysis ranks, own;
  sch::ScheduleInput input = without_analysis;
  ranks.build(input);
  own.build(input, policy.chains());
  input.analysis = &own;
  sch::Schedule schedule;
  policy.schedule(input, schedule);
  std::vector<uint32_t> local;
  for (edb::ir::TypeId type : schedule.batch_type)
    local.push_back(uint32_t(std::find(own.types.global.begin(), own.types.global.end(), type) -
                             own.types.global.begin()));
  double best_heights = 1e30, best_tight = 1e30, best_replay = 1e30, best_ranks_pass = 1e30, best_heights_pass = 1e30;
  sch::TypeChains chains;
  sch::ChainHeights heights;
  sch::TightFrontier tight;
  sch::TypewiseFrontier typewise;
  sch::Schedule replayed;
  for (int r = 0; r < rounds; ++r) {
    auto t = Clock::now();
    heights.build(input, own, policy.needs_remaining());
    best_heights = std::min(best_heights, seconds_since(t));
    replayed.clear();
    t = Clock::now();
    tight.reset(input, own, heights);
    for (uint32_t l : local) tight.run(l, replayed);
    best_tight = std::min(best_tight, seconds_since(t));
    replayed.clear();
    t = Clock::now();
    typewise.reset(input, ranks);
    for (uint32_t l : local) typewise.run(l, replayed);
    best_replay = std::min(best_replay, seconds_since(t));
    t = Clock::now();
    chains.build(input, own.types, own.dependencies, sch::ChainDirection::ranks, own.weights);
    best_ranks_pass = std::min(best_ranks_pass, seconds_since(t));
    t = Clock::now();
    chains.build(input, own.types, own.dependencies, sch::ChainDirection::heights, own.weights);
    best_heights_pass = std::min(best_heights_pass, seconds_since(t));
  }
  const double per = 1e9 / double(std::max<size_t>(schedule.batch_count(), 1));
  return {best_heights * per, (best_tight - best_replay) * per, best_ranks_pass * per, best_heights_pass * per};
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-search",
                          {"model", "data", "batch", "train-traces", "test-traces", "budget", "cells", "rounds", "widen",
                           "json", "cold"},
                          {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-search [--model latticelstm] [--data FILE] [--batch 64] [--train-traces 8]\n"
        "                        [--test-traces 4] [--budget 2000 (ms per searched trace)] [--cells on|off]\n"
        "                        [--rounds 20] [--widen on|off (the test traces' search as in training)]\n"
        "                        [--cold on|off (the caches evicted before each timed schedule)]\n"
        "                        [--json FILE]\n");
    return 0;
  }
  const std::string name = flags.get("model", "latticelstm");
  const int batch = int(flags.get_int("batch", 64, 1, 1 << 16));
  const int train_traces = int(flags.get_int("train-traces", 8, 1, 1000));
  const int test_traces = int(flags.get_int("test-traces", 4, 1, 1000));
  const int64_t budget = flags.get_int("budget", 2000, 1, int64_t{1} << 30);
  const int rounds = int(flags.get_int("rounds", 20, 1, 10000));
  const std::string cells = flags.get("cells", "on");
  if (cells != "on" && cells != "off") throw edb::UsageError("edb-bench-search: --cells takes on or off");
  const std::string widen = flags.get("widen", "on");
  const std::string cold = flags.get("cold", "off");
  if (cold != "on" && cold != "off") throw edb::UsageError("edb-bench-search: --cold takes on or off");
  if (widen != "on" && widen != "off") throw edb::UsageError("edb-bench-search: --widen takes on or off");
  auto model = edb::samples::make_default_model(name, flags.get("data", ""), "edb-bench-search");

  edb::EngineOptions options;
  options.policy = "learned";
  options.cells = cells == "on";
  edb::Engine engine(options);
  const size_t count = model->instance_count();
  std::vector<std::unique_ptr<edb::Trace>> traces;
  for (int t = 0; t < train_traces + test_traces; ++t) {
    edb::Trace& trace = *traces.emplace_back(std::make_unique<edb::Trace>(engine));
    std::vector<edb::Expr> losses;
    for (int i = 0; i < batch; ++i) losses.push_back(model->record_loss(trace, (size_t(t) * batch + i) % count));
    edb::sum(losses);
  }
  if (size_t(train_traces + test_traces) * size_t(batch) > count)
    std::fprintf(stderr, "edb-bench-search: warning: %zu instances, fewer than the traces need: test traces repeat training ones\n",
                 count);

  std::vector<edb::Trace*> training;
  for (int t = 0; t < train_traces; ++t) training.push_back(traces[size_t(t)].get());
  edb::PolicyTraining policy_training;
  policy_training.search_budget_ms = budget;
  auto start = Clock::now();
  const edb::PolicyProgress learned = engine.train_policy(training, policy_training);
  const double training_s = seconds_since(start);
  const std::string file = "/tmp/edb-bench-search.policy";
  engine.save_policy(file);
  sch::ImitationPolicy policy;
  policy.load(file);
  std::remove(file.c_str());

  struct Totals {
    int64_t lower_bound = 0, weighted_bound = 0, greedy = 0, rule = 0, learned = 0, search = 0;
    double learned_ns = 0, greedy_ns = 0, search_s = 0;
    double heights_ns = 0, tight_frontier_ns = 0, analysis_ns = 0, ranks_pass_ns = 0, heights_pass_ns = 0;
    int64_t decisions = 0;
  } totals;
  std::printf("%s, cells %s, batch %d: learned from %d traces in %.1f s (%s)\n", name.c_str(), cells.c_str(), batch,
              train_traces, training_s, learned.stop_reason.c_str());
  std::printf("training traces fitted: learned %lld, greedy %lld, LB %lld; held out of fitting: learned %lld, greedy %lld\n\n",
              (long long)learned.best_batches, (long long)learned.greedy_batches, (long long)learned.lower_bound,
              (long long)learned.heldout_batches, (long long)learned.heldout_greedy_batches);
  std::printf("| test trace | nodes | LB | weighted LB | greedy | tight-first | learned | search | search s |\n|---|---|---|---|---|---|---|---|---|\n");
  for (int t = train_traces; t < train_traces + test_traces; ++t) {
    edb::Trace& trace = *traces[size_t(t)];
    edb::Expr any = trace.input(std::vector<float>{0.0f});  // a handle to reach the trace's state
    auto& state = edb::detail::TraceState::of(any, "edb-bench-search");
    edb::runtime::TraceData& data = state.data;
    if (data.types.size() != data.graph.size()) state.engine->driver.signatures.assign(data.graph, 0, data.types);
    sch::ScheduleInput input{data.graph, data.types, 0, nullptr, &state.engine->driver.signatures};
    sch::Analysis analysis;
    auto timer = Clock::now();
    analysis.build(input);
    const double analysis_ms = seconds_since(timer) * 1e3;
    input.analysis = &analysis;
    sch::ChainHeights heights;
    timer = Clock::now();
    heights.build(input, analysis);
    size_t chain_types = 0;
    uint32_t longest = 0;
    for (size_t k = 0; k < analysis.types.count(); ++k)
      if (analysis.chains.longest[k] > 1 && !analysis.dependencies.unbatchable[k]) ++chain_types, longest = std::max(longest, analysis.chains.longest[k]);
    std::fprintf(stderr, "trace %d: %zu chain types, longest %u\n", t, chain_types, longest);
    std::fprintf(stderr, "trace %d: %zu scheduled nodes, %zu edges, %zu types; analysis %.3f ms, chain heights %.3f ms\n", t,
                 analysis.dependencies.scheduled, analysis.dependencies.arguments.size(), analysis.types.count(), analysis_ms,
                 seconds_since(timer) * 1e3);
    const int64_t bound = sch::lower_bound(sch::ScheduleInput{data.graph, data.types, 0});
    sch::SearchOptions search_options;
    search_options.budget = std::chrono::milliseconds(budget);
    search_options.widen = widen == "on";
    start = Clock::now();
    const sch::SearchResult found = sch::search_schedule(input, search_options);
    const double search_s = seconds_since(start);
    sch::Schedule schedule;
    policy.schedule(input, schedule);
    const int64_t learned_batches = sch::expanded_batch_count(input, schedule);
    sch::GreedyPolicy greedy;
    const sch::ScheduleInput bare{data.graph, data.types, 0, nullptr, input.signatures};
    const Cost cost = all_told_per_decision(policy, bare, rounds, cold == "on");
    totals.learned_ns += cost.all_told_ns / test_traces;
    totals.analysis_ns += cost.analysis_ns / test_traces;
    totals.greedy_ns += nanoseconds_per_decision(greedy, input, analysis, rounds) / test_traces;
    const Breakdown parts = learned_breakdown(policy, bare, rounds);
    totals.heights_ns += parts.heights_ns / test_traces;
    totals.ranks_pass_ns += parts.ranks_pass_ns / test_traces;
    totals.heights_pass_ns += parts.heights_pass_ns / test_traces;
    totals.tight_frontier_ns += parts.tight_frontier_ns / test_traces;
    totals.decisions += int64_t(schedule.batch_count());
    std::fprintf(stderr, "rollouts %lld, %d passes to width %d, first finished %d\n", (long long)found.rollouts,
                 found.passes, found.last_width, int(found.finished));
    std::printf("| %d | %zu | %lld | %lld | %lld | %lld | %lld | %lld | %.2f |\n", t, data.graph.size(), (long long)bound,
                (long long)found.lower_bound, (long long)found.greedy_batches, (long long)found.rule_batches,
                (long long)learned_batches, (long long)found.batches, search_s);
    totals.lower_bound += bound;
    totals.weighted_bound += found.lower_bound;
    totals.greedy += found.greedy_batches;
    totals.rule += found.rule_batches;
    totals.learned += learned_batches;
    totals.search += found.batches;
    totals.search_s += search_s;
  }
  const double lb = double(std::max<int64_t>(totals.lower_bound, 1));
  std::printf("\nbatches / LB on the test traces: greedy %.3f, tight-first %.3f, learned %.3f, search %.3f "
              "(weighted LB of the policy's graph %.3f)\n",
              double(totals.greedy) / lb, double(totals.rule) / lb, double(totals.learned) / lb, double(totals.search) / lb,
              double(totals.weighted_bound) / lb);
  std::printf("learned against greedy: %.1f%% fewer batches\n", 100.0 * (1.0 - double(totals.learned) / double(totals.greedy)));
  std::printf("cost per decision beyond greedy's, all told (the analysis it reads and its schedule against greedy's; "
              "fastest of %d%s): learned %.1f ns (target <= 100 ns); greedy's choice beyond its frontier %.1f ns\n",
              rounds, cold == "on" ? ", caches evicted" : "", totals.learned_ns, totals.greedy_ns);
  std::printf("of which (learned): its analysis against greedy's %.1f ns, chain heights beyond the analysis %.1f ns, the "
              "tight frontier beyond greedy's %.1f ns; %lld decisions\n",
              totals.analysis_ns, totals.heights_ns, totals.tight_frontier_ns, (long long)totals.decisions);
  std::printf("the analysis's chain pass alone, per decision: ranks (greedy's) %.1f ns, heights (the learned policy's) %.1f ns\n",
              totals.ranks_pass_ns, totals.heights_pass_ns);
  if (flags.has("json")) {
    std::ofstream out(flags.get("json", ""));
    out << nlohmann::json{{"model", name}, {"cells", cells}, {"batch", batch}, {"cold", cold == "on"},
                          {"lower_bound", totals.lower_bound},
                          {"weighted_lower_bound", totals.weighted_bound}, {"greedy", totals.greedy},
                          {"tight_first", totals.rule}, {"learned", totals.learned}, {"search", totals.search},
                          {"learned_ns_per_decision", totals.learned_ns}, {"greedy_ns_per_decision", totals.greedy_ns},
                          {"heights_ns_per_decision", totals.heights_ns},
                          {"tight_frontier_ns_per_decision", totals.tight_frontier_ns},
                          {"ranks_pass_ns_per_decision", totals.ranks_pass_ns},
                          {"heights_pass_ns_per_decision", totals.heights_pass_ns},
                          {"analysis_ns_per_decision", totals.analysis_ns},
                          {"decisions", totals.decisions},
                          {"training_s", training_s}, {"stop_reason", learned.stop_reason}}
               .dump(2)
        << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-search", run, argc, argv); }
