// edb-run: runs a sample model on a workload with a chosen policy, executor and device, and prints
// throughput, batching counts and the time split as a table (or one JSON object with --json).
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <edbatch/edbatch.h>

#include "jit/host.h"
#include "runtime/executor.h"
#include "scheduler/schedule.h"
#include "samples/models.h"
#include "samples/runner.h"
#include "tools/flags.h"
#include "tools/progress.h"
#include "tools/schedule_picture.h"
#include "trace/inspect.h"

namespace {

using edb::samples::ModelEntry;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void print_help() {
  std::string models;
  for (const ModelEntry& m : edb::samples::model_registry())
    models += "  " + m.name + std::string(14 - std::min<size_t>(13, m.name.size()), ' ') + m.summary + "\n";
  std::printf(
      "usage: edb-run MODEL [flags]\n\n"
      "Runs a sample model's inference over a workload and reports throughput, batches against the\n"
      "lower bound, and where the time went.\n\n"
      "models:\n%s\n"
      "flags:\n"
      "  --data FILE        workload file (default: a generated one)\n"
      "  --limit N          use the first N instances (generated default: 1000)\n"
      "  --batch N          instances per trace (default 64)\n"
      "  --embed N          embedding size (default: the model's, 128 for treelstm)\n"
      "  --hidden N         hidden size (default: the model's, 128 for treelstm)\n"
      "  --policy NAME      batching policy: %s (default greedy)\n"
      "  --executor NAME    %s (default batched)\n"
      "  --device NAME      cpu, cuda (a GPU through NVRTC and the CUDA driver; an error naming why\n"
      "                     when there is none) or auto (cuda when usable, else the CPU, saying why)\n"
      "                     (default cpu)\n"
      "  --threads N        threads (default 1); with 2 or more, execution overlaps recording\n"
      "  --repeat N         measured passes over the workload; the median is reported (default 3)\n"
      "  --seed N           seed for parameters and generated data (default 1)\n"
      "  --train-policy FILE  (fsm) learn the policy from --train-traces traces, save it to FILE, then run\n"
      "  --train-traces N   traces to learn from (default 8)\n"
      "  --policy-file FILE (fsm) load a learned policy\n"
      "  --policy-encoding base|sort  (fsm) the state encoding (default base)\n"
      "  --cells on|off     on: each cell call is one node for the policy, with the cell's own\n"
      "                     fewest-batch schedule inside; off: cells record node by node (default on)\n"
      "  --memplan on|off   on: the PQ-tree layout planner places batched operands in place;\n"
      "                     off: each batch's outputs in schedule order (default off)\n"
      "  --dump-schedule FILE  write the first trace's graph with each batch as a coloured cluster:\n"
      "                     FILE.dot or .gv (graphviz text), or .svg, .png, .pdf rendered by graphviz's\n"
      "                     dot (apt-get install graphviz); keep it small: --batch 2 --limit 2\n"
      "  --check-finite     stop at the first NaN or infinity, naming the node that produced it\n"
      "  --json             print one JSON object instead of the table\n"
      "  --help             this text\n\n"
      "Environment: EDB_DUMP=ir,schedule,batches,plan (or all) prints each stage's output to stderr\n"
      "(schedule: the graph with batches as clusters, graphviz dot; batches: the same as text); with\n"
      "EDB_DUMP_DIR=DIR each goes to DIR/STAGE-N.txt instead, the schedule as DIR/schedule-N.dot.\n",
      models.c_str(), joined(edb::scheduler::policy_names()).c_str(), joined(edb::runtime::executor_names()).c_str());
}

// The first trace of the workload (its first --batch instances, as every pass records it) with its
// batches, as a picture in `path`. Nodes beyond a few thousand make graphviz slow: say so.
void dump_schedule(edb::samples::SampleModel& model, edb::Engine& engine, int batch, const std::string& path) {
  edb::Trace trace(engine);
  std::vector<edb::Expr> losses;
  for (size_t i = 0; i < std::min(model.instance_count(), size_t(batch)); ++i) losses.push_back(model.record_loss(trace, i));
  const edb::Expr total = edb::sum(losses);
  const edb::detail::EvaluatedTrace evaluated = edb::detail::evaluated_trace(total);
  constexpr size_t kLargePicture = 3000;
  if (evaluated.graph.size() > kLargePicture && !path.ends_with(".dot") && !path.ends_with(".gv"))
    std::fprintf(stderr, "edb-run: --dump-schedule: the trace has %zu nodes; graphviz takes long on pictures this big "
                 "(try --batch 2 --limit 2)\n", evaluated.graph.size());
  edb::tools::write_picture("edb-run: --dump-schedule",
                            edb::scheduler::to_dot(evaluated.graph, evaluated.schedule, evaluated.signatures), path);
}

struct Report {
  std::string model, policy, executor, device, data, cpu;
  bool cells = true, memplan = false;
  int batch = 0, embed = 0, hidden = 0;
  edb::samples::RunResult result;
  bool trained = false;
  edb::PolicyProgress training;
  double training_ms = 0;
};

// The model's arithmetic rate at the median throughput (flops are the same every pass).
double gflops(const Report& r) {
  const int64_t instances = r.result.instances * r.result.repeat;
  return instances > 0 ? r.result.instances_per_sec * double(r.result.stats.flops) / double(instances) / 1e9 : 0.0;
}

nlohmann::json to_json(const Report& r) {
  const edb::Stats& s = r.result.stats;
  const auto& t = s.time;
  nlohmann::json j = {
      {"model", r.model},
      {"policy", r.policy},
      {"cells", r.cells},
      {"memplan", r.memplan},
      {"executor", r.executor},
      {"device", r.device},
      {"batch", r.batch},
      {"embed", r.embed},
      {"hidden", r.hidden},
      {"data", r.data},
      {"cpu", r.cpu},
      {"repeat", r.result.repeat},
      {"instances", r.result.instances * r.result.repeat},
      {"instances_per_sec", r.result.instances_per_sec},
      {"nodes", s.nodes},
      {"batches", s.batches},
      {"lower_bound", s.lower_bound},
      {"batches_per_lower_bound", s.lower_bound ? double(s.batches) / double(s.lower_bound) : 0.0},
      {"kernel_calls", s.kernel_calls},
      {"bytes_gathered", s.bytes_gathered},
      {"kernels_compiled", s.kernels_compiled},
      {"cache_hits", s.cache_hits},
      {"flops", s.flops},
      {"gflops_per_sec", gflops(r)},
      {"loss", r.result.loss},
      {"time_ms",
       {{"trace", r.result.trace_ms},
        {"schedule", t.schedule_ms},
        {"plan", t.plan_ms},
        {"compile", t.compile_ms},
        {"execute", t.execute_ms},
        {"total", r.result.total_ms}}},
  };
  if (s.policy_decisions > 0) j["policy_unseen_rate"] = double(s.policy_unseen) / double(s.policy_decisions);
  if (r.trained)
    j["training"] = {{"episodes", r.training.episode}, {"batches", r.training.best_batches},
                     {"lower_bound", r.training.lower_bound}, {"time_ms", r.training_ms}};
  return j;
}

void print_table(const Report& r) {
  const edb::Stats& s = r.result.stats;
  const double total = r.result.total_ms;
  auto row = [](const std::string& name, const std::string& value) {
    std::printf("| %-22s | %22s |\n", name.c_str(), value.c_str());
  };
  auto fixed = [](double v, int digits) {
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(digits);
    out << v;
    return out.str();
  };
  auto share = [&](double ms) { return fixed(ms, 1) + " ms (" + fixed(total > 0 ? 100 * ms / total : 0, 1) + "%)"; };
  std::printf("edb-run %s: %s\n", r.model.c_str(), r.data.c_str());
  std::printf("policy %s, cells %s, memplan %s, executor %s, device %s, batch %d, embed %d, hidden %d, CPU %s\n\n",
              r.policy.c_str(), r.cells ? "on" : "off", r.memplan ? "on" : "off", r.executor.c_str(),
              r.device.c_str(), r.batch, r.embed, r.hidden, r.cpu.c_str());
  std::printf("| %-22s | %22s |\n|%s|%s|\n", "measure", "value", std::string(24, '-').c_str(),
              std::string(24, '-').c_str());
  row("instances/s (median)", fixed(r.result.instances_per_sec, 1));
  row("instances x passes", std::to_string(r.result.instances) + " x " + std::to_string(r.result.repeat));
  row("nodes", std::to_string(s.nodes));
  row("batches", std::to_string(s.batches));
  row("lower bound (LB)", std::to_string(s.lower_bound));
  row("batches / LB", s.lower_bound ? fixed(double(s.batches) / double(s.lower_bound), 3) : "-");
  row("kernel calls", std::to_string(s.kernel_calls));
  row("bytes gathered", std::to_string(s.bytes_gathered));
  row("kernels compiled", std::to_string(s.kernels_compiled));
  row("GFLOP/s (median pass)", fixed(gflops(r), 2));
  if (s.policy_decisions > 0)
    row("unseen policy states", fixed(100.0 * double(s.policy_unseen) / double(s.policy_decisions), 2) + "%");
  if (r.trained)
    row("policy training", fixed(r.training_ms, 0) + " ms, " + std::to_string(r.training.episode) + " episodes");
  row("loss (one pass)", fixed(r.result.loss, 4));
  row("time: trace", share(r.result.trace_ms));
  row("time: schedule", share(s.time.schedule_ms));
  row("time: plan", share(s.time.plan_ms));
  row("time: compile", share(s.time.compile_ms));
  row("time: execute", share(s.time.execute_ms));
  row("time: total", fixed(total, 1) + " ms");
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-run",
                          {"data", "limit", "batch", "embed", "hidden", "policy", "executor", "device",
                           "threads", "repeat", "seed", "train-policy", "train-traces", "policy-file",
                           "policy-encoding", "cells", "memplan", "dump-schedule"},
                          {"json", "check-finite", "help"});
  const std::vector<std::string> positional = flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    print_help();
    return 0;
  }
  if (positional.size() != 1)
    throw edb::UsageError(positional.empty() ? "edb-run: which model? (see --help)"
                                             : "edb-run: expected one MODEL, got " + std::to_string(positional.size()) +
                                                   " arguments (see --help)");
  const ModelEntry* entry = edb::samples::find_model(positional[0]);
  if (!entry) throw edb::UsageError("edb-run: unknown model '" + positional[0] + "' (see --help)");

  edb::samples::ModelConfig config;
  config.data_path = flags.get("data", "");
  config.limit = flags.get_int("limit", -1, 1, int64_t{1} << 40);
  config.embed = int(flags.get_int("embed", entry->default_embed, 1, 1 << 16));
  config.hidden = int(flags.get_int("hidden", entry->default_hidden, 1, 1 << 16));
  config.seed = uint64_t(flags.get_int("seed", 1, 0, INT64_MAX));

  edb::EngineOptions options;
  options.policy = flags.get("policy", options.policy);
  options.executor = flags.get("executor", options.executor);
  options.device = flags.get("device", "cpu");
  options.threads = int(flags.get_int("threads", 1, 1, 1024));
  options.policy_file = flags.get("policy-file", "");
  options.policy_encoding = flags.get("policy-encoding", "base");
  const std::string cells = flags.get("cells", "on");
  if (cells != "on" && cells != "off") throw edb::UsageError("edb-run: --cells takes on or off, not '" + cells + "'");
  options.cells = cells == "on";
  const std::string memplan = flags.get("memplan", "off");
  if (memplan != "on" && memplan != "off")
    throw edb::UsageError("edb-run: --memplan takes on or off, not '" + memplan + "'");
  options.memplan = memplan == "on";
  options.check_finite = flags.has("check-finite");
  const std::string train_path = flags.get("train-policy", "");
  const int train_traces = int(flags.get_int("train-traces", 8, 1, 10000));
  if (!train_path.empty() && options.policy != "fsm")
    throw edb::UsageError("edb-run: --train-policy learns the fsm policy; add --policy fsm");
  if (!train_path.empty()) {
    // Find out now, not after training, whether the policy can be written there.
    const std::string probe = train_path + ".tmp";
    std::FILE* file = std::fopen(probe.c_str(), "w");
    if (!file)
      throw edb::UsageError("edb-run: --train-policy: cannot write '" + probe + "': " + std::strerror(errno));
    std::fclose(file);
    std::remove(probe.c_str());
  }
  const std::string schedule_path = flags.get("dump-schedule", "");
  if (flags.has("dump-schedule")) edb::tools::check_picture_path("edb-run: --dump-schedule", schedule_path);
  edb::samples::RunOptions run_options;
  run_options.batch = int(flags.get_int("batch", 64, 1, 1 << 20));
  run_options.repeat = int(flags.get_int("repeat", 3, 1, 1000));

  edb::Engine engine(options);  // rejects unknown or unavailable names before any work
  const std::unique_ptr<edb::samples::SampleModel> model = entry->make(config);

  Report report;
  if (!train_path.empty()) {
    edb::tools::ProgressBar training_bar("learning the policy");
    const auto start = std::chrono::steady_clock::now();
    const edb::PolicyProgress learned = edb::samples::train_policy(
        *model, engine, train_traces, run_options.batch, edb::PolicyTraining{},
        [&](const edb::PolicyProgress& p) {
          char note[96];
          std::snprintf(note, sizeof note, "episodes; batches/LB %.3f, best %.3f", double(p.batches) / double(p.lower_bound),
                        double(p.best_batches) / double(p.lower_bound));
          training_bar.update(p.episode, p.episodes, note);
        });
    training_bar.done();
    engine.save_policy(train_path);
    report.training_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    report.training = learned;
    report.trained = true;
  }
  if (!schedule_path.empty()) dump_schedule(*model, engine, run_options.batch, schedule_path);
  edb::tools::ProgressBar bar("edb-run " + entry->name);
  run_options.progress = [&](int64_t done, int64_t total) { bar.update(done, total, "instances"); };
  report.result = edb::samples::run_inference(*model, engine, run_options);
  bar.done();
  report.model = entry->name;
  report.policy = options.policy;
  report.executor = options.executor;
  report.cells = options.cells;
  report.memplan = options.memplan;
  report.device = engine.options().device;  // with auto: the one the engine chose
  report.data = model->describe_data();
  report.cpu = edb::jit::host_cpu_name();
  report.batch = run_options.batch;
  report.embed = config.embed;
  report.hidden = config.hidden;
  if (flags.has("json")) std::cout << to_json(report).dump(2) << '\n';
  else print_table(report);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-run", run, argc, argv); }
