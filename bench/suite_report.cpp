// edb-bench's report: derived figures per row, the markdown tables, the JSON document and the SVG
// plots (throughput against batch size, batches/LB per policy, the time split).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include <edbatch/version.h>

#include "bench/suite.h"
#include "bench/svg_chart.h"

namespace edb::bench {

namespace {

std::string label(const SuiteRow& row, bool with_device) {
  return row.policy + "/" + row.executor + (with_device ? "/" + row.device : "");
}

bool several_devices(const Suite& suite) {
  int ran = 0;
  for (const DeviceInfo& d : suite.devices) ran += d.available ? 1 : 0;
  return ran > 1;
}

const SuiteRow* find_row(const Suite& suite, const std::string& model, const std::string& policy,
                         const std::string& executor, const std::string& device, int batch) {
  for (const SuiteRow& r : suite.rows)
    if (r.skipped.empty() && r.model == model && r.policy == policy && r.executor == executor && r.device == device &&
        r.batch == batch)
      return &r;
  return nullptr;
}

// Configurations (policy, executor, device) that ran for `model`, in run order.
std::vector<const SuiteRow*> configurations(const Suite& suite, const std::string& model) {
  std::vector<const SuiteRow*> firsts;
  for (const SuiteRow& r : suite.rows) {
    if (!r.skipped.empty() || r.model != model) continue;
    const bool seen = std::any_of(firsts.begin(), firsts.end(), [&](const SuiteRow* f) {
      return f->policy == r.policy && f->executor == r.executor && f->device == r.device;
    });
    if (!seen) firsts.push_back(&r);
  }
  return firsts;
}

std::string percent(double part, double whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", whole > 0 ? 100 * part / whole : 0.0);
  return text;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  return bool(out << text);
}

}  // namespace

RowFigures figures(const Suite& suite, const SuiteRow& row) {
  RowFigures f;
  if (!row.skipped.empty()) return f;
  const samples::RunResult& run = row.run;
  const Stats& s = run.stats;
  const double instances = double(run.instances) * double(std::max(1, run.repeat));
  f.instances_per_sec = run.instances_per_sec;
  f.gflops = instances > 0 ? run.instances_per_sec * double(s.flops) / instances / 1e9 : 0;
  f.gemm_fraction = suite.gemm_gflops > 0 ? f.gflops / suite.gemm_gflops : 0;
  f.batches_per_lower_bound = s.lower_bound > 0 ? double(s.batches) / double(s.lower_bound) : 0;
  f.bytes_gathered_per_instance = instances > 0 ? double(s.bytes_gathered) / instances : 0;
  if (const SuiteRow* sequential = find_row(suite, row.model, "sequential", row.executor, row.device, row.batch))
    f.vs_sequential = sequential->run.instances_per_sec > 0 ? run.instances_per_sec / sequential->run.instances_per_sec : 0;
  f.trace_ms = run.trace_ms;
  f.schedule_ms = s.time.schedule_ms;
  f.plan_ms = s.time.plan_ms;
  f.compile_ms = s.time.compile_ms;
  f.execute_ms = s.time.execute_ms;
  f.total_ms = run.total_ms;
  // With threads >= 2 execution overlaps recording, so the stages can add up to more than the total.
  f.other_ms = std::max(0.0, f.total_ms - f.trace_ms - f.schedule_ms - f.plan_ms - f.compile_ms - f.execute_ms);
  return f;
}

std::vector<std::string> models_with_differing_losses(const Suite& suite) {
  std::vector<std::string> differing;
  for (const ModelInfo& m : suite.models) {
    bool first = true, agree = true;
    double reference = 0;
    for (const SuiteRow& r : suite.rows) {
      if (r.model != m.name || !r.skipped.empty()) continue;
      if (first) reference = r.run.loss, first = false;
      agree = agree && std::fabs(r.run.loss - reference) <= 1e-4 * std::max(1.0, std::fabs(reference));
    }
    if (!agree) differing.push_back(m.name);
  }
  return differing;
}

void print_markdown(const Suite& suite, std::FILE* out) {
  const bool devices = several_devices(suite);
  std::fprintf(out, "# edb-bench: what batching buys on this machine\n\n");
  std::fprintf(out, "- machine: CPU %s, %d cores; engine threads %d; edbatch %s\n", suite.cpu.c_str(), suite.cores,
               suite.threads, EDBATCH_VERSION_STRING);
  std::fprintf(out, "- date: %s; command: `%s`; took %.0f s\n", suite.date.c_str(), suite.command.c_str(), suite.wall_s);
  std::fprintf(out, "- GEMM rate (Eigen, one thread, %dx%d by %dx%d): %.1f GFLOP/s\n", suite.gemm_rows, suite.gemm_inner,
               suite.gemm_inner, suite.gemm_columns, suite.gemm_gflops);
  for (const DeviceInfo& d : suite.devices)
    std::fprintf(out, "- device %s: %s%s\n", d.name.c_str(), d.available ? "ran" : "skipped: ", d.reason.c_str());
  for (const ModelInfo& m : suite.models)
    std::fprintf(out, "- %s: %lld instances from %s (embed %d, hidden %d)\n", m.name.c_str(), (long long)m.instances,
                 m.data.c_str(), m.embed, m.hidden);
  std::fprintf(out, "- each row: a warm-up pass, then the median of %d passes; cells %s\n\n", suite.runs,
               suite.cells ? "on" : "off");

  // What batching buys: each model's fastest configuration against its fastest unbatched one.
  std::fprintf(out, "| model | sequential, best | best | at | speedup | GFLOP/s | of GEMM rate | batches/LB |\n");
  std::fprintf(out, "|---|---|---|---|---|---|---|---|\n");
  for (const ModelInfo& m : suite.models) {
    const SuiteRow *best = nullptr, *unbatched = nullptr;
    for (const SuiteRow& r : suite.rows) {
      if (r.model != m.name || !r.skipped.empty()) continue;
      if (!best || r.run.instances_per_sec > best->run.instances_per_sec) best = &r;
      if (r.policy == "sequential" && (!unbatched || r.run.instances_per_sec > unbatched->run.instances_per_sec))
        unbatched = &r;
    }
    if (!best) continue;
    const RowFigures f = figures(suite, *best);
    std::string base = "-", speedup = "-";
    if (unbatched) {
      char text[64];
      std::snprintf(text, sizeof text, "%.0f (%s, batch %d)", unbatched->run.instances_per_sec,
                    unbatched->executor.c_str(), unbatched->batch);
      base = text;
      std::snprintf(text, sizeof text, "%.2fx", f.instances_per_sec / unbatched->run.instances_per_sec);
      speedup = text;
    }
    std::fprintf(out, "| %s | %s | %.0f | %s, batch %d | %s | %.1f | %.0f%% | %.3f |\n", m.name.c_str(), base.c_str(),
                 f.instances_per_sec, label(*best, devices).c_str(), best->batch, speedup.c_str(), f.gflops,
                 100 * f.gemm_fraction, f.batches_per_lower_bound);
  }

  std::fprintf(out, "\n| model | batch | policy | executor |%s instances/s | vs sequential | batches/LB | GFLOP/s | "
                    "of GEMM rate | bytes gathered/instance | trace | schedule | plan | compile | execute |\n",
               devices ? " device |" : "");
  std::fprintf(out, "|---|---|---|---|%s---|---|---|---|---|---|---|---|---|---|---|\n", devices ? "---|" : "");
  for (const SuiteRow& r : suite.rows) {
    if (!r.skipped.empty()) continue;
    const RowFigures f = figures(suite, r);
    char vs[32] = "-";
    if (f.vs_sequential > 0) std::snprintf(vs, sizeof vs, "%.2fx", f.vs_sequential);
    std::fprintf(out, "| %s | %d | %s | %s |%s %.0f | %s | %.3f | %.2f | %.1f%% | %.0f | %s | %s | %s | %s | %s |\n",
                 r.model.c_str(), r.batch, r.policy.c_str(), r.executor.c_str(),
                 devices ? (" " + r.device + " |").c_str() : "", f.instances_per_sec, vs, f.batches_per_lower_bound,
                 f.gflops, 100 * f.gemm_fraction, f.bytes_gathered_per_instance, percent(f.trace_ms, f.total_ms).c_str(),
                 percent(f.schedule_ms, f.total_ms).c_str(), percent(f.plan_ms, f.total_ms).c_str(),
                 percent(f.compile_ms, f.total_ms).c_str(), percent(f.execute_ms, f.total_ms).c_str());
  }
  int skipped = 0;
  for (const SuiteRow& r : suite.rows) skipped += r.skipped.empty() ? 0 : 1;
  if (skipped > 0) {
    std::fprintf(out, "\nskipped (%d):\n", skipped);
    std::map<std::string, int> reasons;
    for (const SuiteRow& r : suite.rows)
      if (!r.skipped.empty()) ++reasons[r.device + ": " + r.skipped];
    for (const auto& [reason, count] : reasons) std::fprintf(out, "- %d x %s\n", count, reason.c_str());
  }
}

nlohmann::json to_json(const Suite& suite, const std::vector<std::string>& plots) {
  nlohmann::json devices = nlohmann::json::array(), models = nlohmann::json::array(), rows = nlohmann::json::array(),
                 skipped = nlohmann::json::array();
  for (const DeviceInfo& d : suite.devices) {
    nlohmann::json j = {{"name", d.name}, {"available", d.available}};
    if (!d.available) j["reason"] = d.reason;
    devices.push_back(j);
  }
  for (const ModelInfo& m : suite.models) {
    nlohmann::json training = nlohmann::json::array();
    for (const TrainingInfo& t : m.training)
      training.push_back({{"batch", t.batch}, {"time_ms", t.time_ms}, {"episodes", t.episodes}, {"batches", t.batches},
                          {"lower_bound", t.lower_bound}});
    models.push_back({{"name", m.name}, {"data", m.data}, {"instances", m.instances}, {"embed", m.embed},
                      {"hidden", m.hidden}, {"fsm_training", training}});
  }
  for (const SuiteRow& r : suite.rows) {
    nlohmann::json j = {{"model", r.model}, {"policy", r.policy}, {"executor", r.executor}, {"device", r.device},
                        {"batch", r.batch}};
    if (!r.skipped.empty()) {
      j["reason"] = r.skipped;
      skipped.push_back(j);
      continue;
    }
    const RowFigures f = figures(suite, r);
    const Stats& s = r.run.stats;
    j.update({{"instances", r.run.instances},
              {"runs", r.run.repeat},
              {"instances_per_sec", f.instances_per_sec},
              {"vs_sequential", f.vs_sequential > 0 ? nlohmann::json(f.vs_sequential) : nlohmann::json(nullptr)},
              {"nodes", s.nodes},
              {"batches", s.batches},
              {"lower_bound", s.lower_bound},
              {"batches_per_lower_bound", f.batches_per_lower_bound},
              {"kernel_calls", s.kernel_calls},
              {"bytes_gathered", s.bytes_gathered},
              {"bytes_gathered_per_instance", f.bytes_gathered_per_instance},
              {"kernels_compiled", s.kernels_compiled},
              {"flops", s.flops},
              {"gflops_per_sec", f.gflops},
              {"gemm_fraction", f.gemm_fraction},
              {"loss", r.run.loss},
              {"time_ms",
               {{"trace", f.trace_ms},
                {"schedule", f.schedule_ms},
                {"plan", f.plan_ms},
                {"compile", f.compile_ms},
                {"execute", f.execute_ms},
                {"other", f.other_ms},
                {"total", f.total_ms}}}});
    if (s.policy_decisions > 0) j["policy_unseen_rate"] = double(s.policy_unseen) / double(s.policy_decisions);
    rows.push_back(j);
  }
  return {{"tool", "edb-bench"},
          {"version", EDBATCH_VERSION_STRING},
          {"command", suite.command},
          {"date", suite.date},
          {"cpu", suite.cpu},
          {"cores", suite.cores},
          {"threads", suite.threads},
          {"runs", suite.runs},
          {"limit", suite.limit},
          {"cells", suite.cells},
          {"batches", suite.batches},
          {"policies", suite.policies},
          {"executors", suite.executors},
          {"detail_batch", suite.detail_batch},
          {"gemm", {{"rows", suite.gemm_rows}, {"inner", suite.gemm_inner}, {"columns", suite.gemm_columns},
                    {"gflops_per_sec", suite.gemm_gflops}}},
          {"devices", devices},
          {"models", models},
          {"results", rows},
          {"skipped", skipped},
          {"losses_agree", models_with_differing_losses(suite).empty()},
          {"plots", plots},
          {"wall_s", suite.wall_s}};
}

std::vector<std::string> write_plots(const Suite& suite, const std::string& directory) {
  std::vector<std::string> written;
  auto save = [&](const std::string& name, const std::string& svg) {
    if (!write_file(directory + "/" + name, svg)) throw UsageError("edb-bench: --out: cannot write '" + directory + "/" + name + "'");
    written.push_back(name);
  };
  const bool devices = several_devices(suite);
  for (const ModelInfo& m : suite.models) {
    const std::vector<const SuiteRow*> configs = configurations(suite, m.name);
    if (configs.empty()) continue;
    LineChart throughput;
    throughput.title = m.name + ": throughput against batch size";
    throughput.x_label = "instances per trace (batch size)";
    throughput.y_label = "instances/s (median)";
    throughput.log_x = true;
    BarChart split;
    split.title = m.name + ": where the time goes, batch " + std::to_string(suite.detail_batch);
    split.y_label = "microseconds per instance";
    split.stacked = true;
    split.series = {"trace", "schedule", "plan", "compile", "execute", "other"};
    for (const SuiteRow* c : configs) {
      LineSeries series{label(*c, devices), {}};
      for (int batch : suite.batches)
        if (const SuiteRow* r = find_row(suite, m.name, c->policy, c->executor, c->device, batch))
          series.points.push_back({double(batch), r->run.instances_per_sec});
      throughput.series.push_back(std::move(series));
      if (const SuiteRow* r = find_row(suite, m.name, c->policy, c->executor, c->device, suite.detail_batch)) {
        const RowFigures f = figures(suite, *r);
        const double per = 1000.0 / (double(r->run.instances) * double(std::max(1, r->run.repeat)));  // ms -> us/instance
        split.groups.push_back(label(*r, devices));
        split.values.push_back({f.trace_ms * per, f.schedule_ms * per, f.plan_ms * per, f.compile_ms * per,
                                f.execute_ms * per, f.other_ms * per});
      }
    }
    save("throughput-" + m.name + ".svg", render_line_chart(throughput));
    save("time-split-" + m.name + ".svg", render_bar_chart(split));
  }

  // Batches against the lower bound: the schedule, so the same for every executor; the first that ran.
  BarChart ratio;
  // The sequential policy (one node per batch, often 100x the bound) would flatten the others.
  ratio.title = "batches / lower bound, batch " + std::to_string(suite.detail_batch) + " (1 is optimal)";
  ratio.y_label = "batches / LB";
  ratio.reference_line = 1;
  for (const std::string& policy : suite.policies)
    if (policy != "sequential") ratio.series.push_back(policy);
  if (ratio.series.empty()) ratio.series = suite.policies;
  else if (ratio.series.size() < suite.policies.size()) ratio.title += "; sequential left out";
  for (const ModelInfo& m : suite.models) {
    std::vector<double> values;
    for (const std::string& policy : ratio.series) {
      double value = NAN;
      for (const SuiteRow& r : suite.rows)
        if (r.skipped.empty() && r.model == m.name && r.policy == policy && r.batch == suite.detail_batch) {
          value = figures(suite, r).batches_per_lower_bound;
          break;
        }
      values.push_back(value);
    }
    ratio.groups.push_back(m.name);
    ratio.values.push_back(values);
  }
  save("batches-per-lb.svg", render_bar_chart(ratio));
  return written;
}

}  // namespace edb::bench
