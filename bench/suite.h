// edb-bench's results: what was run (models, devices, the machine's GEMM rate) and one row per
// model x policy x executor x device x batch size, with the report writers (markdown, JSON, SVG).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "samples/runner.h"

namespace edb::bench {

struct DeviceInfo {
  std::string name;
  bool available = false;
  std::string reason;  // why not, when not
};

struct TrainingInfo {  // the fsm policy learned for one batch size
  int batch = 0;
  double time_ms = 0;
  int episodes = 0;
  int64_t batches = 0, lower_bound = 0;
};

struct ModelInfo {
  std::string name, data;
  int64_t instances = 0;
  int embed = 0, hidden = 0;
  std::vector<TrainingInfo> training;
};

struct SuiteRow {
  std::string model, policy, executor, device;
  int batch = 0;
  std::string skipped;  // empty when it ran; else why not
  samples::RunResult run;
};

struct Suite {
  std::string command, date, cpu;
  int cores = 1, threads = 1, runs = 5, detail_batch = 64;
  int64_t limit = 0;
  bool cells = true;
  int gemm_rows = 0, gemm_inner = 0, gemm_columns = 0;
  double gemm_gflops = 0;
  std::vector<std::string> policies, executors;
  std::vector<int> batches;
  std::vector<ModelInfo> models;
  std::vector<DeviceInfo> devices;
  std::vector<SuiteRow> rows;
  double wall_s = 0;
};

// Per-row figures derived from the engine's stats (all passes together) and the median rate.
struct RowFigures {
  double instances_per_sec = 0, gflops = 0, gemm_fraction = 0, batches_per_lower_bound = 0;
  double bytes_gathered_per_instance = 0;
  double vs_sequential = 0;  // against the sequential policy, same model, executor, device, batch; 0: not run
  double trace_ms = 0, schedule_ms = 0, plan_ms = 0, compile_ms = 0, execute_ms = 0, other_ms = 0, total_ms = 0;
};
RowFigures figures(const Suite& suite, const SuiteRow& row);

// Each model's losses (one pass's sum) agree across its rows to 1e-4 relative: the same answer
// whatever the batching. Returns the models that disagree.
std::vector<std::string> models_with_differing_losses(const Suite& suite);

void print_markdown(const Suite& suite, std::FILE* out);
nlohmann::json to_json(const Suite& suite, const std::vector<std::string>& plots);
// Writes throughput-MODEL.svg, batches-per-lb.svg and time-split-MODEL.svg into `directory`;
// returns their file names.
std::vector<std::string> write_plots(const Suite& suite, const std::string& directory);

}  // namespace edb::bench
