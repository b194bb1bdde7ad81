// edb-bench-train: training throughput of TreeLSTM and the BiLSTM tagger at one batch size, one
// epoch per configuration: the sequential policy (the unbatched baseline), the batched Eigen
// executor and the jit executor with the default policy; forward, backward and optimizer times,
// and the target, backward at most 2.5x forward.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "samples/models.h"
#include "samples/training.h"
#include "tools/flags.h"
#include "tools/progress.h"

namespace {

constexpr double kBackwardTarget = 2.5;  // backward time / forward time, at most

struct Workload {
  std::string model, file;  // file: in ../shared/data beside the source tree
};

struct Config {
  std::string name, policy, executor;
};

struct Row {
  std::string model, config, policy, executor;
  int64_t instances = 0;
  double first_loss = 0;  // the first batch's, before any update: equal in every configuration
  double compile_ms = 0;  // kernels compiled during the measured epoch (jit)
  edb::samples::EpochResult epoch;
};

edb::OptimizerOptions adam() {
  edb::OptimizerOptions options;
  options.kind = "adam";
  options.learning_rate = 0.01f;
  return options;
}

std::string default_data(const std::string& file) {
  const std::string path = std::string(EDB_SOURCE_DIR) + "/../shared/data/" + file;
  return std::ifstream(path).good() ? path : "";
}

// One epoch over the model's instances (nothing held out) on a fresh engine, after a warm-up
// epoch over the first `batch` instances of a copy of the model, so first-use costs (kernels
// compiled, the arena grown) stay out.
Row measure(const edb::samples::ModelEntry& entry, const edb::samples::ModelConfig& config, const Config& c,
            int batch, edb::tools::ProgressBar& bar, int64_t done, int64_t total) {
  edb::EngineOptions options;
  options.policy = c.policy;
  options.executor = c.executor;
  edb::Engine engine(options);
  edb::samples::TrainOptions train;
  train.batch = batch;
  train.holdout = 0;
  {
    edb::samples::ModelConfig small = config;
    small.limit = batch;
    const std::unique_ptr<edb::samples::SampleModel> warm = entry.make(small);
    edb::Optimizer optimizer(warm->model(), adam());
    edb::samples::train(*warm, engine, optimizer, train);
  }
  const std::unique_ptr<edb::samples::SampleModel> model = entry.make(config);
  edb::Optimizer optimizer(model->model(), adam());
  Row row;
  row.model = entry.name;
  row.config = c.name;
  row.policy = c.policy;
  row.executor = c.executor;
  row.instances = int64_t(model->instance_count());
  bool first = true;
  train.progress = [&](const edb::samples::TrainProgress& p) {
    if (first) row.first_loss = p.loss;
    first = false;
    bar.update(done + p.done, total, entry.name + ", " + c.name);
  };
  engine.reset_stats();
  row.epoch = edb::samples::train(*model, engine, optimizer, train).epochs.front();
  row.compile_ms = engine.stats().time.compile_ms;
  return row;
}

void print_report(const std::vector<Row>& rows, int batch, const std::vector<std::string>& data) {
  std::printf("Training throughput, batch %d, one epoch per configuration (Adam, lr 0.01), one thread\n", batch);
  for (const std::string& d : data) std::printf("  %s\n", d.c_str());
  std::printf("\n| model | configuration | policy | executor | instances/s | vs sequential | forward ms | backward ms "
              "| optimizer ms | backward/forward | <= %.1f | compile ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
              kBackwardTarget);
  for (const Row& r : rows) {
    double sequential = 0;
    for (const Row& s : rows)
      if (s.model == r.model && s.policy == "sequential") sequential = s.epoch.instances_per_sec;
    const double ratio = r.epoch.backward_over_forward();
    std::printf("| %s | %s | %s | %s | %.1f | %.2fx | %.0f | %.0f | %.0f | %.2f | %s | %.0f |\n", r.model.c_str(),
                r.config.c_str(), r.policy.c_str(), r.executor.c_str(), r.epoch.instances_per_sec,
                sequential > 0 ? r.epoch.instances_per_sec / sequential : 0.0, r.epoch.forward_ms,
                r.epoch.backward_ms, r.epoch.optimizer_ms, ratio, ratio <= kBackwardTarget ? "yes" : "NO", r.compile_ms);
  }
}

int run(int argc, char** argv) {
  edb::tools::Flags flags("edb-bench-train", {"instances", "batch", "models", "json"}, {"help"});
  flags.parse(argc, argv, 1);
  if (flags.has("help")) {
    std::printf(
        "usage: edb-bench-train [--instances N] [--batch 64] [--models treelstm,bilstm] [--json FILE]\n"
        "Training instances/s of each model, one epoch over its first N instances (default 2000: the\n"
        "whole shared files, about 10 s on a 2-vCPU machine), under three configurations: the\n"
        "sequential policy (batched executor, one node per batch), the default policy on the batched\n"
        "Eigen executor, and on the jit executor. Forward (recording and evaluating the loss), backward\n"
        "(Trace::backward) and optimizer (Adam) times, and the target backward <= %.1fx forward.\n"
        "One run, one thread. Data: ../shared/data/sst-like.txt and pos-like.txt beside the source\n"
        "tree, else generated. Exits 1 when the configurations' first-batch losses differ.\n",
        kBackwardTarget);
    return 0;
  }
  const int64_t instances = flags.get_int("instances", 2000, 1, int64_t{1} << 30);
  const int batch = int(flags.get_int("batch", 64, 1, 1 << 16));
  std::vector<Workload> workloads;
  const std::string models = flags.get("models", "treelstm,bilstm");
  for (size_t begin = 0; begin <= models.size();) {
    const size_t end = std::min(models.find(',', begin), models.size());
    const std::string name = models.substr(begin, end - begin);
    if (name == "treelstm") workloads.push_back({name, "sst-like.txt"});
    else if (name == "bilstm") workloads.push_back({name, "pos-like.txt"});
    else throw edb::UsageError("edb-bench-train: --models takes treelstm and bilstm, not '" + name + "'");
    begin = end + 1;
  }
  const std::vector<Config> configs = {{"sequential", "sequential", "batched"},
                                       {"batched", edb::EngineOptions{}.policy, "batched"},
                                       {"jit", edb::EngineOptions{}.policy, "jit"}};

  std::vector<Row> rows;
  std::vector<std::string> data;
  edb::tools::ProgressBar bar("edb-bench-train");
  const int64_t total = int64_t(workloads.size() * configs.size()) * instances;
  int64_t done = 0;
  for (const Workload& w : workloads) {
    const edb::samples::ModelEntry& entry = *edb::samples::find_model(w.model);
    edb::samples::ModelConfig config;
    config.data_path = default_data(w.file);
    config.limit = instances;
    config.embed = entry.default_embed;
    config.hidden = entry.default_hidden;
    data.push_back(w.model + ": " + entry.make(config)->describe_data());
    for (const Config& c : configs) {
      rows.push_back(measure(entry, config, c, batch, bar, done, total));
      done += rows.back().instances;
    }
  }
  bar.done();
  print_report(rows, batch, data);

  // Every configuration starts from the same parameters on the same first batch.
  bool losses_agree = true;
  for (const Row& r : rows)
    for (const Row& s : rows)
      if (s.model == r.model)
        losses_agree = losses_agree && std::fabs(r.first_loss - s.first_loss) <= 1e-4 * std::fabs(s.first_loss);
  bool met = true;
  for (const Row& r : rows) met = met && r.epoch.backward_over_forward() <= kBackwardTarget;
  std::printf("\ntarget: backward <= %.1fx forward in every configuration: %s\n", kBackwardTarget, met ? "met" : "NOT met");
  std::printf("first-batch losses agree across configurations (1e-4 relative): %s\n", losses_agree ? "yes" : "NO");

  if (flags.has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"model", r.model}, {"configuration", r.config}, {"policy", r.policy}, {"executor", r.executor},
                     {"batch", batch}, {"instances", r.instances}, {"instances_per_sec", r.epoch.instances_per_sec},
                     {"forward_ms", r.epoch.forward_ms}, {"backward_ms", r.epoch.backward_ms},
                     {"optimizer_ms", r.epoch.optimizer_ms}, {"total_ms", r.epoch.total_ms},
                     {"backward_over_forward", r.epoch.backward_over_forward()},
                     {"compile_ms", r.compile_ms}, {"train_loss", r.epoch.train_loss}, {"first_loss", r.first_loss}});
    std::ofstream file(flags.get("json", ""));
    file << nlohmann::json{{"rows", out}, {"backward_target", kBackwardTarget}, {"target_met", met},
                           {"losses_agree", losses_agree}}.dump(2) << '\n';
    if (!file) throw edb::UsageError("edb-bench-train: --json: cannot write '" + flags.get("json", "") + "'");
  }
  return losses_agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return edb::tools::run_tool("edb-bench-train", run, argc, argv); }
