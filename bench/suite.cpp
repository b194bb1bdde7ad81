// edb-bench: the benchmark suite. Every sample model x policy x executor x device at several batch
// sizes on the shared data, each a warm-up pass then the median of --runs passes (the same loop as
// edb-run), beside this machine's GEMM rate; the report is written by suite_report.cpp.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include <edbatch/edbatch.h>

#include "bench/gemm_rate.h"
#include "bench/suite.h"
#include "jit/host.h"
#include "runtime/executor.h"
#include "samples/models.h"
#include "scheduler/schedule.h"
#include "tools/flags.h"
#include "tools/progress.h"

namespace {

using edb::UsageError;
using edb::bench::Suite;
using edb::bench::SuiteRow;

constexpr const char* kTool = "edb-bench";
constexpr int kDefaultLimit = 1000;

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// A --flag LIST of names, each one of `known`; the default is all of them.
std::vector<std::string> name_list(const edb::tools::Flags& flags, const std::string& flag,
                                   const std::vector<std::string>& known, const std::vector<std::string>& fallback) {
  if (!flags.has(flag)) return fallback;
  std::vector<std::string> names = split(flags.get(flag, ""));
  if (names.empty()) throw UsageError(std::string(kTool) + ": --" + flag + " needs at least one name");
  for (const std::string& n : names)
    if (std::find(known.begin(), known.end(), n) == known.end())
      throw UsageError(std::string(kTool) + ": --" + flag + ": unknown '" + n + "' (known: " + joined(known) + ")");
  return names;
}

std::vector<int> batch_list(const edb::tools::Flags& flags) {
  if (!flags.has("batches")) return {1, 8, 32, 64, 256};
  std::vector<int> batches;
  for (const std::string& item : split(flags.get("batches", ""))) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || value < 1 || value > (1 << 20))
      throw UsageError(std::string(kTool) + ": --batches: expected positive integers, got '" + item + "'");
    batches.push_back(int(value));
  }
  if (batches.empty()) throw UsageError(std::string(kTool) + ": --batches needs at least one size");
  return batches;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : edb::samples::model_registry()) names.push_back(entry.name);
  return names;
}

void print_help() {
  std::printf(
      "usage: edb-bench [flags]\n\n"
      "What batching buys on this machine: every sample model x policy x executor x device at\n"
      "several batch sizes, each a warm-up pass then the median of --runs passes over the first\n"
      "--limit instances, beside this machine's GEMM rate measured in the same run. Prints a\n"
      "markdown table; writes results.json and SVG plots into --out.\n\n"
      "With the defaults (330 configurations) it takes about 10 minutes on a 2-core x86 machine,\n"
      "about 3 with --limit 256: run time grows about linearly with --limit.\n\n"
      "flags:\n"
      "  --models LIST      comma-separated (default: all: %s)\n"
      "  --policies LIST    (default: all: %s)\n"
      "  --executors LIST   (default: all: %s); the reference executor runs node by node whatever\n"
      "                     the policy, so it runs only the sequential policy unless --full\n"
      "  --devices LIST     cpu, cuda (default: cpu, and cuda when the engine has a usable GPU;\n"
      "                     otherwise the report says it was skipped and why)\n"
      "  --batches LIST     instances per trace (default 1,8,32,64,256)\n"
      "  --runs N           measured passes per configuration, after a warm-up pass; the median\n"
      "                     is reported (default 5)\n"
      "  --limit N          instances per model: the first N of its data (default %d)\n"
      "  --full             also every batching policy on the reference executor\n"
      "  --data-dir DIR     where sst-like.txt, pos-like.txt and lattice-like.jsonl are\n"
      "                     (default: ../shared/data beside the source tree); a missing file means\n"
      "                     generated data, and the report says so\n"
      "  --trees FILE       SST-style trees for treelstm, treegru, mvrnn (overrides --data-dir)\n"
      "  --sentences FILE   word|tag sentences for bilstm\n"
      "  --lattices FILE    lattice JSON Lines for latticelstm, latticegru\n"
      "  --threads N        engine threads (default 1)\n"
      "  --cells on|off     (default on)\n"
      "  --train-traces N   the fsm policy is learned from N traces per batch size (default 8)\n"
      "  --detail-batch N   the batch size of the batches/LB and time-split plots (default 64, or\n"
      "                     the largest run below it)\n"
      "  --out DIR          results.json and the SVG plots (default edb-bench-report)\n"
      "  --json FILE        also write the JSON to FILE\n"
      "  --help             this text\n",
      joined(model_names()).c_str(), joined(edb::scheduler::policy_names()).c_str(),
      joined(edb::runtime::executor_names()).c_str(), kDefaultLimit);
}

std::string default_data_dir() { return std::string(EDB_SOURCE_DIR) + "/../shared/data"; }

// The data file for a model, or "" (generated data) when it is missing.
std::string data_for(const std::string& model, const edb::tools::Flags& flags) {
  const std::string dir = flags.get("data-dir", default_data_dir());
  std::string flag, file;
  if (model.starts_with("lattice")) flag = "lattices", file = "lattice-like.jsonl";
  else if (model == "bilstm") flag = "sentences", file = "pos-like.txt";
  else if (model == "parser") return "";  // no parsed data under shared/: generated
  else flag = "trees", file = "sst-like.txt";
  if (flags.has(flag)) {
    const std::string path = flags.get(flag, "");
    if (!std::ifstream(path).good()) throw UsageError(std::string(kTool) + ": --" + flag + ": cannot read '" + path + "'");
    return path;
  }
  const std::string path = dir + "/" + file;
  if (std::ifstream(path).good()) return path;
  std::fprintf(stderr, "%s: %s not found: %s runs on generated data\n", kTool, path.c_str(), model.c_str());
  return "";
}

std::vector<edb::bench::DeviceInfo> probe_devices(const std::vector<std::string>& wanted) {
  std::vector<edb::bench::DeviceInfo> devices;
  for (const std::string& name : wanted) {
    edb::bench::DeviceInfo device{name, true, ""};
    try {
      edb::EngineOptions options;
      options.device = name;
      edb::Engine probe(options);
    } catch (const UsageError& e) {
      device.available = false;
      device.reason = e.what();
    }
    devices.push_back(device);
  }
  return devices;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

// Learns the fsm policy on `batch`-instance traces and saves it to `path` for the fsm rows.
edb::bench::TrainingInfo train(edb::samples::SampleModel& model, const Suite& suite, int batch, int traces,
                               const std::string& path) {
  edb::EngineOptions options;
  options.policy = "fsm";
  options.cells = suite.cells;
  edb::Engine engine(options);
  const auto start = std::chrono::steady_clock::now();
  const edb::PolicyProgress learned = edb::samples::train_policy(model, engine, traces, batch, edb::PolicyTraining{});
  engine.save_policy(path);
  edb::bench::TrainingInfo info;
  info.batch = batch;
  info.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  info.episodes = learned.episode;
  info.batches = learned.best_batches;
  info.lower_bound = learned.lower_bound;
  return info;
}

// One row: a warm-up pass, then the median of suite.runs passes. A combination the engine refuses
// (a device or executor this build lacks) is recorded as skipped with the engine's reason.
SuiteRow measure(edb::samples::SampleModel& model, const Suite& suite, SuiteRow row, const std::string& policy_path,
                 std::function<void(int64_t, int64_t)> progress) {
  edb::EngineOptions options;
  options.policy = row.policy;
  options.executor = row.executor;
  options.device = row.device;
  options.threads = suite.threads;
  options.cells = suite.cells;
  if (row.policy == "fsm") options.policy_file = policy_path;
  std::unique_ptr<edb::Engine> engine;
  try {
    engine = std::make_unique<edb::Engine>(options);
  } catch (const UsageError& e) {
    row.skipped = e.what();
    return row;
  }
  edb::samples::RunOptions run_options;
  run_options.batch = row.batch;
  run_options.repeat = suite.runs;
  run_options.progress = std::move(progress);
  row.run = edb::samples::run_inference(model, *engine, run_options);
  return row;
}

int run(int argc, char** argv) {
  edb::tools::Flags flags(kTool,
                          {"models", "policies", "executors", "devices", "batches", "runs", "limit", "data-dir", "trees",
                           "sentences", "lattices", "threads", "cells", "train-traces", "detail-batch", "out", "json"},
                          {"full", "help"});
  const std::vector<std::string> positional = flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    print_help();
    return 0;
  }
  if (!positional.empty()) throw UsageError(std::string(kTool) + ": unexpected argument '" + positional[0] + "' (see --help)");
  const auto wall_start = std::chrono::steady_clock::now();

  Suite suite;
  for (int i = 0; i < argc; ++i) suite.command += (i ? " " : "") + std::string(i ? argv[i] : kTool);
  suite.date = utc_now();
  suite.cpu = edb::jit::host_cpu_name();
  suite.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<std::string> models = name_list(flags, "models", model_names(), model_names());
  suite.policies = name_list(flags, "policies", edb::scheduler::policy_names(), edb::scheduler::policy_names());
  suite.executors = name_list(flags, "executors", edb::runtime::executor_names(), edb::runtime::executor_names());
  const std::vector<std::string> device_names =
      name_list(flags, "devices", {"cpu", "cuda"}, {"cpu", "cuda"});
  suite.batches = batch_list(flags);
  suite.runs = int(flags.get_int("runs", 5, 1, 1000));
  suite.limit = flags.get_int("limit", kDefaultLimit, 1, int64_t{1} << 30);
  suite.threads = int(flags.get_int("threads", 1, 1, 1024));
  const std::string cells = flags.get("cells", "on");
  if (cells != "on" && cells != "off") throw UsageError(std::string(kTool) + ": --cells takes on or off, not '" + cells + "'");
  suite.cells = cells == "on";
  const int train_traces = int(flags.get_int("train-traces", 8, 1, 10000));
  const bool full = flags.has("full");
  const std::string out_dir = flags.get("out", "edb-bench-report");
  int largest_below = 0;
  const int wanted_detail = int(flags.get_int("detail-batch", 64, 1, 1 << 20));
  for (int b : suite.batches)
    if (b <= wanted_detail) largest_below = std::max(largest_below, b);
  suite.detail_batch = largest_below ? largest_below : *std::min_element(suite.batches.begin(), suite.batches.end());
  std::filesystem::create_directories(out_dir);

  suite.devices = probe_devices(device_names);
  for (const auto& d : suite.devices)
    if (!d.available) std::fprintf(stderr, "%s: %s skipped: %s\n", kTool, d.name.c_str(), d.reason.c_str());

  // The GEMM rate for scale, one fixed shape (so runs compare): larger than any of the sample
  // models' products, on one thread like the engine's default.
  std::fprintf(stderr, "%s: measuring the GEMM rate...\n", kTool);
  suite.gemm_rows = 512, suite.gemm_inner = 512, suite.gemm_columns = 256;
  suite.gemm_gflops = edb::bench::gemm_gflops(suite.gemm_rows, suite.gemm_inner, suite.gemm_columns);

  // The matrix, in run order; the reference executor with batching policies only when --full.
  struct Planned { std::string policy, executor, device; };
  std::vector<Planned> per_batch;
  for (const auto& device : suite.devices)
    if (device.available)
      for (const std::string& executor : suite.executors)
        for (const std::string& policy : suite.policies)
          if (full || executor != "reference" || policy == "sequential") per_batch.push_back({policy, executor, device.name});
  const int64_t total = int64_t(models.size() * suite.batches.size() * per_batch.size());
  const bool has_fsm = std::find(suite.policies.begin(), suite.policies.end(), "fsm") != suite.policies.end();
  const std::string policy_path = (std::filesystem::temp_directory_path() /
                                   ("edb-bench-" + std::to_string(::getpid()) + ".policy")).string();

  edb::tools::ProgressBar bar(kTool);
  int64_t done = 0;
  for (const std::string& name : models) {
    const edb::samples::ModelEntry& entry = *edb::samples::find_model(name);
    edb::samples::ModelConfig config;
    config.data_path = data_for(name, flags);
    config.limit = suite.limit;
    config.embed = entry.default_embed;
    config.hidden = entry.default_hidden;
    const std::unique_ptr<edb::samples::SampleModel> model = entry.make(config);
    edb::bench::ModelInfo info{name, model->describe_data(), int64_t(model->instance_count()), config.embed, config.hidden, {}};
    for (int batch : suite.batches) {
      if (has_fsm) info.training.push_back(train(*model, suite, batch, train_traces, policy_path));
      for (const Planned& p : per_batch) {
        const std::string note = name + " " + p.policy + "/" + p.executor + " batch " + std::to_string(batch);
        bar.update(done * 1000, total * 1000, note);
        SuiteRow row = measure(*model, suite, {name, p.policy, p.executor, p.device, batch, "", {}}, policy_path,
                               [&](int64_t instances, int64_t all) {
                                 bar.update(done * 1000 + 1000 * instances / std::max<int64_t>(1, all), total * 1000, note);
                               });
        suite.rows.push_back(std::move(row));
        ++done;
      }
    }
    suite.models.push_back(std::move(info));
  }
  bar.done();
  std::filesystem::remove(policy_path);
  suite.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const std::vector<std::string> plots = edb::bench::write_plots(suite, out_dir);
  const std::string json = edb::bench::to_json(suite, plots).dump(2) + "\n";
  std::ofstream(out_dir + "/results.json") << json;
  if (flags.has("json")) {
    std::ofstream file(flags.get("json", ""));
    if (!(file << json)) throw UsageError(std::string(kTool) + ": --json: cannot write '" + flags.get("json", "") + "'");
  }
  edb::bench::print_markdown(suite, stdout);
  std::printf("\nwritten: %s/results.json", out_dir.c_str());
  for (const std::string& p : plots) std::printf(", %s", p.c_str());
  std::printf("\n");

  const std::vector<std::string> differing = edb::bench::models_with_differing_losses(suite);
  for (const std::string& m : differing)
    std::fprintf(stderr, "%s: %s: the loss differs between configurations (see results.json)\n", kTool, m.c_str());
  return differing.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool(kTool, run, argc, argv); }
